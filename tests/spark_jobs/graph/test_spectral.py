"""Spectral structure embedding (spark_jobs.graph.spectral) against numpy / scipy references (real local Spark)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from pyspark.sql import functions as F

from hir_pipeline.contracts import source_ddl
from spark_jobs.graph import GraphConfig
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN, projection_row
from spark_jobs.graph.index import index_entities
from spark_jobs.graph.spectral import (
    orthonormaliser,
    ritz_projection,
    spectral_embeddings,
    subspace_width,
)

CFG = GraphConfig(seed=3, structure_dim=4, structure_power_iterations=3, structure_normalisation_exponent=0.25,
                  structure_weight_exponent=0.5)

# --- references --------------------------------------------------------------------------------------------------


def normalised_matrix(n: int, src, dst, weight, cfg: GraphConfig) -> sp.csr_matrix:
    """``D^-a W D^-a`` with ``W`` the summed pair weights raised to ``gamma`` (scipy)."""
    w = sp.coo_matrix((weight, (src, dst)), shape=(n, n)).tocsr()  # duplicate pairs add up
    w.data = np.power(w.data, cfg.structure_weight_exponent)
    deg = np.asarray(w.sum(axis=1)).ravel()
    s = np.power(deg, -cfg.structure_normalisation_exponent, out=np.zeros_like(deg), where=deg > 0)
    return (sp.diags(s) @ w @ sp.diags(s)).tocsr()


def subspace_reference(m: sp.csr_matrix, x0: np.ndarray, cfg: GraphConfig) -> np.ndarray:
    """The module's algorithm in numpy, from the same start rows ``x0`` (zero rows for nodes without edges)."""
    x = x0
    for _ in range(cfg.structure_power_iterations):
        y = m @ x
        x = y @ orthonormaliser(y.T @ y)
    e = x @ ritz_projection(x.T @ (m @ x), cfg.structure_dim)
    has = np.diff(m.indptr) > 0
    return e / np.linalg.norm(e[has], axis=1).mean()


def exact_reference(m: sp.csr_matrix, dim: int) -> np.ndarray:
    """``X_d diag(sqrt(lambda_d))`` from a dense eigendecomposition: the ``dim`` largest eigenvalues (numpy)."""
    lam, v = np.linalg.eigh(m.toarray())
    order = np.argsort(-lam)[:dim]
    return v[:, order] * np.sqrt(np.maximum(lam[order], 0.0))


# --- fixtures ----------------------------------------------------------------------------------------------------


def _graph(spark, n_users: int, n_items: int, seed: int, extra: list[tuple[str, str, float]] = ()):
    """Entities and symmetric ``graph_edges``-like rows: users engage with the items of two planted blocks (with
    funnel-like weights, some pairs twice), plus ``extra`` pairs."""
    rng = np.random.default_rng(seed)
    names = [f"u{i}" for i in range(n_users)] + [f"i{j}" for j in range(n_items)] + ["c0", "cold", "iso"]
    types = ["user"] * n_users + ["ad"] * n_items + ["campaign", "ad", "ad"]
    rows = [(e, t, *[None] * 6) for e, t in zip(names, types, strict=True)]
    entities = spark.createDataFrame(rows, source_ddl("entities"))
    index = index_entities(entities)
    pos = {r.entity_id: r.node_idx for r in index.collect()}
    pairs = []
    for u in range(n_users):
        block = u % 2
        for j in range(n_items):
            p = 0.6 if j % 2 == block else 0.1
            if rng.random() < p:
                pairs.append((f"u{u}", f"i{j}", float(rng.choice([0.1, 1.0, 3.0, 10.0]))))
                if rng.random() < 0.2:
                    pairs.append((f"u{u}", f"i{j}", 1.0))  # a second edge type on one pair
    pairs += [("i0", "c0", 1.0), ("i2", "c0", 1.0), ("cold", "c0", 1.0), *extra]
    rows = [(pos[a], pos[b], w) for a, b, w in pairs] + [(pos[b], pos[a], w) for a, b, w in pairs]
    edges = spark.createDataFrame(rows, "src_idx long, dst_idx long, weight double")
    return entities, index, edges, pos, len(names)


def _matrix(frame, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    out, has = np.zeros((n, dim)), np.zeros(n, dtype=bool)
    for row in frame.select("node_idx", STRUCTURE_COLUMN).collect():
        out[row.node_idx] = row[STRUCTURE_COLUMN]
        has[row.node_idx] = True
    return out, has


def _edge_arrays(edges):
    e = edges.toPandas()
    return e["src_idx"].to_numpy(), e["dst_idx"].to_numpy(), e["weight"].to_numpy()


def _start_rows(index, n: int, cfg: GraphConfig, has: np.ndarray) -> np.ndarray:
    """The Spark start rows (FastRP's projection rows, tested against their own reference in test_fastrp)."""
    width = subspace_width(cfg.structure_dim)
    x0 = np.zeros((n, width))
    for row in index.select("node_idx", projection_row(F.xxhash64("entity_id"), cfg, width).alias("r")).collect():
        x0[row.node_idx] = row.r
    return x0 * has[:, None]


# --- tests -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [CFG, dataclasses.replace(CFG, structure_weight_exponent=0.0,
                                                          structure_normalisation_exponent=0.5, seed=8)],
                         ids=["weighted", "binary_symmetric"])
def test_spark_equals_numpy_reference(spark, cfg):
    entities, index, edges, pos, n = _graph(spark, 12, 10, seed=1)
    src, dst, w = _edge_arrays(edges)
    m = normalised_matrix(n, src, dst, w, cfg)
    has = np.diff(m.indptr) > 0
    want = subspace_reference(m, _start_rows(index, n, cfg, has), cfg)
    got, got_has = _matrix(spectral_embeddings(index, edges, cfg), n, cfg.structure_dim)
    np.testing.assert_array_equal(got_has, has)
    # Eigenvectors are defined up to sign (and rotation within repeated eigenvalues): compare the scores.
    np.testing.assert_allclose(got @ got.T, want @ want.T, atol=1e-6)
    assert not got_has[pos["iso"]]  # no edge, no row
    assert np.abs(got[pos["cold"]]).sum() > 0  # a catalogue-only ad is embedded from its campaign
    np.testing.assert_allclose(np.linalg.norm(got[has], axis=1).mean(), 1.0, rtol=1e-6)


def test_converges_to_the_truncated_svd_of_a_user_item_graph(spark):
    """Enough iterations give the exact top eigenpairs; on a bipartite graph the user-item scores are then the
    truncated SVD's ``U_d S_d V_d^T`` of the normalised interaction matrix (halved). A property of the algorithm,
    checked on its numpy reference from the Spark start rows, which :func:`test_spark_equals_numpy_reference`
    ties to the module's output."""
    cfg = dataclasses.replace(CFG, structure_dim=3, structure_power_iterations=40, structure_weight_exponent=0.0)
    entities, index, edges, pos, n = _graph(spark, 30, 16, seed=2)
    users = edges.where(F.col("src_idx").isin([pos[f"u{i}"] for i in range(30)]))
    bipartite = users.unionByName(users.select(F.col("dst_idx").alias("src_idx"), F.col("src_idx").alias("dst_idx"),
                                               "weight"))
    src, dst, w = _edge_arrays(bipartite)
    m = normalised_matrix(n, src, dst, w, cfg)
    has = np.diff(m.indptr) > 0
    got = subspace_reference(m, _start_rows(index, n, cfg, has), cfg)
    exact = exact_reference(m, cfg.structure_dim)
    exact = exact / np.linalg.norm(exact[has], axis=1).mean()
    np.testing.assert_allclose(got @ got.T, exact @ exact.T, atol=1e-4)
    u_rows = [pos[f"u{i}"] for i in range(30)]
    i_rows = [pos[f"i{j}"] for j in range(16)]
    b = m[u_rows][:, i_rows].toarray()
    uu, s, vt = np.linalg.svd(b)
    svd_scores = (uu[:, :3] * s[:3]) @ vt[:3] / 2
    scale = np.linalg.norm(exact_reference(m, 3)[has], axis=1).mean() ** 2
    np.testing.assert_allclose(got[u_rows] @ got[i_rows].T * scale, svd_scores, atol=1e-4 * scale)
    # The planted blocks: a user scores its block's items above the other block's.
    scores = got[u_rows] @ got[i_rows].T
    same = np.array([[j % 2 == i % 2 for j in range(16)] for i in range(30)])
    assert scores[same].mean() > scores[~same].mean() + 0.1


@pytest.mark.slow
def test_the_same_graph_gives_the_same_rows_whatever_the_partitioning(spark):
    """Eigenvector signs are fixed by a deterministic rule, so sums in another order cannot flip a column."""
    entities, index, edges, pos, n = _graph(spark, 12, 10, seed=4)
    first, _ = _matrix(spectral_embeddings(index, edges.coalesce(1), CFG), n, CFG.structure_dim)
    shuffled = edges.repartition(7, "dst_idx").orderBy(F.rand(5))
    second, _ = _matrix(spectral_embeddings(index.repartition(3), shuffled, CFG), n, CFG.structure_dim)
    np.testing.assert_allclose(second, first, atol=1e-6)


@pytest.mark.slow
def test_a_graph_smaller_than_the_subspace(spark):
    """Fewer nodes than ``2 d + 8`` columns: directions without support are dropped, the rows keep width ``d``."""
    cfg = dataclasses.replace(CFG, structure_dim=8)
    entities, index, edges, pos, n = _graph(spark, 4, 3, seed=3)
    got, has = _matrix(spectral_embeddings(index, edges, cfg), n, 8)
    assert has.sum() < subspace_width(8) and np.isfinite(got).all()
    assert np.abs(got[has]).sum(axis=1).min() > 0


def test_ritz_projection_keeps_the_largest_eigenvalues_and_zeroes_negative_ones():
    t = np.diag([3.0, -5.0, 1.0])
    out = ritz_projection(t, 4)
    assert out.shape == (3, 4)
    np.testing.assert_allclose(np.abs(out[:, 0]), [np.sqrt(3.0), 0, 0])
    np.testing.assert_allclose(np.abs(out[:, 1]), [0, 0, 1.0])
    np.testing.assert_allclose(out[:, 2:], 0.0)  # lambda = -5 and the missing fourth


def test_orthonormaliser_drops_directions_without_support():
    y = np.random.default_rng(0).normal(size=(5, 3)) @ np.array([[1.0, 0, 1.0], [0, 1.0, 1.0], [0, 0, 0]])
    b = orthonormaliser(y.T @ y)
    assert b.shape == (3, 2)
    np.testing.assert_allclose((y @ b).T @ (y @ b), np.eye(2), atol=1e-9)


@pytest.mark.parametrize("bad", [{"structure_method": "svd"}, {"structure_power_iterations": 0},
                                 {"structure_weight_exponent": float("inf")},
                                 {"structure_normalisation_exponent": float("nan")}])
def test_config_rejects_bad_spectral_settings(bad):
    with pytest.raises(ValueError):
        GraphConfig(**bad)


def test_edges_outside_the_index_or_one_way_are_left_out(spark):
    """A dangling edge is reported by graph_edges' blocking check; the embedding of the rest must not change."""
    entities, index, edges, pos, n = _graph(spark, 12, 10, seed=5)
    clean, _ = _matrix(spectral_embeddings(index, edges, CFG), n, CFG.structure_dim)
    bad = spark.createDataFrame([(pos["u0"], 10**9, 1.0), (pos["u1"], pos["iso"], 2.0), (-1, pos["u2"], 1.0)],
                                "src_idx long, dst_idx long, weight double")
    got, has = _matrix(spectral_embeddings(index, edges.unionByName(bad), CFG), n, CFG.structure_dim)
    np.testing.assert_allclose(got, clean, atol=1e-9)
    assert not has[pos["iso"]]
