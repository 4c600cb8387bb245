"""FastRP structure embedding (spark_jobs.graph.fastrp) against a numpy / scipy reference (real local Spark)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest
import scipy.sparse as sp
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVENT_DATE_COLUMN, source_ddl
from spark_jobs.graph import GraphConfig, build_edges, build_nodes
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN, initial_vectors, projection_row, structure_embeddings
from spark_jobs.graph.index import index_entities

RUN = dt.date(2024, 3, 31)
CFG = GraphConfig(seed=11, structure_method="fastrp", structure_dim=16, structure_iteration_weights=(0.5, 1.0, 2.0))

# --- numpy reference -------------------------------------------------------------------------------------------

_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxhash64_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashLong(value, seed)`` (the ``xxhash64`` of a long column), elementwise on uint64."""
    v = np.asarray(value, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = np.asarray(seed, dtype=np.uint64) + _P5 + np.uint64(8)
        h = h ^ (_rotl(v * _P2, 31) * _P1)
        h = _rotl(h, 27) * _P1 + _P4
        h = (h ^ (h >> np.uint64(33))) * _P2
        h = (h ^ (h >> np.uint64(29))) * _P3
        return h ^ (h >> np.uint64(32))


def projection_reference(node_hash: np.ndarray, dim: int, seed: int, sparsity: float) -> np.ndarray:
    """``R`` ``[n, dim]`` from Spark's ``xxhash64(seed, node_hash, j)`` chain (Spark seeds the first column with 42)."""
    h = xxhash64_long(np.full(len(node_hash), seed), np.uint64(42))
    h = xxhash64_long(node_hash, h)
    h = xxhash64_long(np.arange(dim)[None, :], h[:, None])
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(2**53)
    p = 1.0 / (2.0 * sparsity)
    return np.sqrt(sparsity) * (np.where(u < p, 1.0, 0.0) - np.where(u > 1.0 - p, 1.0, 0.0))


def _rownorm(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def fastrp_reference(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, node_hash: np.ndarray,
                     cfg: GraphConfig) -> tuple[np.ndarray, np.ndarray]:
    """FastRP as written in the paper, with scipy: ``X_t = rownorm(D^-1 A X_{t-1})``, ``E = rownorm(sum alpha_t X_t)``.

    Returns ``(E [n, d], has_edge [n])``.
    """
    a = sp.coo_matrix((weight, (src, dst)), shape=(n, n)).tocsr()  # duplicate (src, dst) entries add up
    deg = np.asarray(a.sum(axis=1)).ravel()
    has = np.diff(a.indptr) > 0
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    r = projection_reference(node_hash, cfg.structure_dim, cfg.seed, cfg.structure_sparsity)
    scale = np.power(deg, cfg.structure_degree_exponent, out=np.zeros_like(deg), where=has)
    x = r * scale[:, None]
    acc = np.zeros_like(x)
    for alpha in cfg.structure_iteration_weights:
        x = _rownorm(sp.diags(inv) @ (a @ x))
        acc += alpha * x
    return _rownorm(acc), has


# --- fixtures ----------------------------------------------------------------------------------------------------


def _source(spark):
    ents = [(f"u{i}", "user") for i in range(5)] + [(f"a{i}", "ad") for i in range(6)]
    ents += [("c0", "campaign"), ("c1", "campaign"), ("cold_ad", "ad"), ("p_iso", "product"), ("pr0", "product")]
    entities = spark.createDataFrame([(i, t, *[None] * 6) for i, t in ents], source_ddl("entities"))
    rels = [("a0", "c0", "ad_of_campaign", None), ("a1", "c0", "ad_of_campaign", 2.0),
            ("a2", "c1", "ad_of_campaign", 1.0), ("cold_ad", "c1", "ad_of_campaign", 1.0),  # catalogue only
            ("a1", "c0", "ad_alt", 0.5),  # a second edge on one pair: weights add up
            ("c1", "c1", "self_ref", 1.0),  # self-loop
            ("a3", "pr0", "ad_promotes_product", 1.0)]
    relations = spark.createDataFrame(rels, source_ddl("relations"))
    day = lambda k: dt.datetime(RUN.year, RUN.month, RUN.day, 12) - dt.timedelta(days=k)  # noqa: E731
    evs = [("u0", "a0", "click", day(0)), ("u0", "a1", "conversion", day(40)), ("u1", "a1", "impression", day(1)),
           ("u1", "a2", "add_to_cart", day(3)), ("u2", "a2", "click", day(10)), ("u2", "a3", "click", day(0)),
           ("u3", "a4", "conversion", day(2)), ("u4", "a4", "click", day(5)), ("u4", "a5", "impression", day(0))]
    events = spark.createDataFrame([(f"e{i}", u, e, t, ts, None) for i, (u, e, t, ts) in enumerate(evs)],
                                   source_ddl("events")).withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts"))
    return entities, relations, events


@pytest.fixture(scope="module")
def graph(spark):
    entities, relations, events = _source(spark)
    edges = build_edges(entities, relations, events, RUN, CFG).cache()
    yield entities, edges
    edges.unpersist()


def _arrays(entities, edges):
    idx = index_entities(entities).select("node_idx", "entity_id", F.xxhash64("entity_id").alias("nh")).toPandas()
    idx = idx.sort_values("node_idx")
    e = edges.select("src_idx", "dst_idx", "weight").toPandas()
    return (len(idx), idx["entity_id"].tolist(), idx["nh"].to_numpy(np.int64), e["src_idx"].to_numpy(),
            e["dst_idx"].to_numpy(), e["weight"].to_numpy())


def _spark_matrix(frame, n: int, dim: int, column: str = STRUCTURE_COLUMN) -> tuple[np.ndarray, np.ndarray]:
    out, has = np.zeros((n, dim)), np.zeros(n, dtype=bool)
    for row in frame.select("node_idx", column).collect():
        if row[column] is not None:
            out[row["node_idx"]] = row[column]
            has[row["node_idx"]] = True
    return out, has


# --- tests -------------------------------------------------------------------------------------------------------


def test_projection_rows_equal_reference_and_are_very_sparse(spark):
    cfg = GraphConfig(seed=5, structure_dim=64, structure_sparsity=4.0)
    df = spark.range(3000).select(F.concat(F.lit("e"), F.col("id").cast("string")).alias("entity_id"))
    got = df.select(F.xxhash64("entity_id").alias("nh"), projection_row(F.xxhash64("entity_id"), cfg).alias("r"))
    pdf = got.toPandas()
    r = np.stack(pdf["r"].to_numpy())
    np.testing.assert_array_equal(r, projection_reference(pdf["nh"].to_numpy(np.int64), 64, 5, 4.0))
    assert set(np.unique(r)) == {-2.0, 0.0, 2.0}
    assert abs((r != 0).mean() - 0.25) < 0.01  # non-zero with probability 1 / s
    assert abs((r > 0).mean() - (r < 0).mean()) < 0.01
    other = projection_reference(pdf["nh"].to_numpy(np.int64), 64, 6, 4.0)
    assert (other != r).mean() > 0.2  # the seed matters


@pytest.mark.slow
def test_projection_row_depends_on_entity_not_node_index(spark, graph):
    entities, edges = graph
    more = entities.unionByName(spark.createDataFrame([("a00_new", "ad", *[None] * 6)],
                                                      source_ddl("entities")))
    from spark_jobs.graph.fastrp import adjacency

    adj = adjacency(edges)
    rows = {}
    for ents in (entities, more):
        index = index_entities(ents)
        x0 = initial_vectors(index, adj, CFG).join(index, "node_idx").select("entity_id", "x", "node_idx")
        rows[ents is more] = {r.entity_id: (r.node_idx, r.x) for r in x0.collect()}
    assert rows[False]["a1"][0] != rows[True]["a1"][0]  # a1 moved in the index ...
    assert rows[False]["a1"][1] == rows[True]["a1"][1]  # ... and kept its random vector


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [CFG, dataclasses.replace(CFG, structure_degree_exponent=-0.5, structure_sparsity=2.0,
                                                          structure_iteration_weights=(0.0, 1.0))],
                         ids=["default_degree", "beta_-0.5"])
def test_spark_equals_numpy_reference(spark, graph, cfg):
    entities, edges = graph
    n, ids, nh, src, dst, w = _arrays(entities, edges)
    want, want_has = fastrp_reference(n, src, dst, w, nh, cfg)
    got, got_has = _spark_matrix(structure_embeddings(index_entities(entities), edges, cfg), n, cfg.structure_dim)
    np.testing.assert_array_equal(got_has, want_has)
    np.testing.assert_allclose(got, want, atol=1e-6)
    norms = np.linalg.norm(got[got_has], axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    pos = {e: i for i, e in enumerate(ids)}
    assert not got_has[pos["p_iso"]]  # no edge, no embedding
    # An ad with catalogue edges only (no event) is embedded from its campaign's neighbourhood.
    assert got_has[pos["cold_ad"]] and np.abs(got[pos["cold_ad"]]).sum() > 0


@pytest.mark.slow
def test_neighbourhood_similarity(spark, graph):
    """Nodes that share neighbours are closer than nodes in another component (what the signal is for)."""
    entities, edges = graph
    n, ids, *_ = _arrays(entities, edges)
    got, _ = _spark_matrix(structure_embeddings(index_entities(entities), edges, CFG), n, CFG.structure_dim)
    pos = {e: i for i, e in enumerate(ids)}
    cos = lambda a, b: float(got[pos[a]] @ got[pos[b]])  # noqa: E731
    # a2 and cold_ad share campaign c1; a4 / a5 are another component.
    assert cos("a2", "cold_ad") > cos("a2", "a5") + 0.2
    assert cos("u3", "u4") > cos("u3", "u0") + 0.2  # u3, u4 both on a4


@pytest.mark.slow
def test_build_nodes_column_on_and_off(spark, graph):
    entities, edges = graph
    on = build_nodes(entities, edges, RUN, CFG)
    assert dict(on.dtypes)[STRUCTURE_COLUMN] == "array<float>"
    rows = {r.entity_id: r for r in on.collect()}
    assert rows["p_iso"][STRUCTURE_COLUMN] is None and rows["p_iso"].degree == 0
    assert all(len(r[STRUCTURE_COLUMN]) == CFG.structure_dim for r in rows.values() if r.degree > 0)
    n, *_ = _arrays(entities, edges)
    want, _ = _spark_matrix(structure_embeddings(index_entities(entities), edges, CFG), n, CFG.structure_dim)
    got, _ = _spark_matrix(on, n, CFG.structure_dim)
    np.testing.assert_array_equal(got, want)
    spectral = build_nodes(entities, edges, RUN, dataclasses.replace(CFG, structure_method="spectral"))
    from spark_jobs.graph.spectral import spectral_embeddings

    want, _ = _spark_matrix(spectral_embeddings(index_entities(entities), edges, spectral_cfg := dataclasses.replace(
        CFG, structure_method="spectral")), n, spectral_cfg.structure_dim)
    np.testing.assert_array_equal(_spark_matrix(spectral, n, CFG.structure_dim)[0], want)
    off = build_nodes(entities, edges, RUN, dataclasses.replace(CFG, structure_embedding=False))
    assert dict(off.dtypes)[STRUCTURE_COLUMN] == "array<float>"
    assert off.where(F.col(STRUCTURE_COLUMN).isNotNull()).count() == 0
    assert off.drop(STRUCTURE_COLUMN).orderBy("node_idx").collect() == on.drop(STRUCTURE_COLUMN).orderBy(
        "node_idx").collect()


@pytest.mark.parametrize("bad", [{"structure_dim": 0}, {"structure_iteration_weights": ()},
                                 {"structure_iteration_weights": (0.0, 0.0)},
                                 {"structure_iteration_weights": (1.0, -1.0)}, {"structure_sparsity": 0.5},
                                 {"structure_degree_exponent": float("nan")}])
def test_config_rejects_bad_structure_settings(bad):
    with pytest.raises(ValueError):
        GraphConfig(**bad)
