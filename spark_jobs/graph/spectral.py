"""Graph-wide spectral structure embedding: the top eigenvectors of the normalised adjacency, in Spark DataFrames.

On a user-item graph this is a truncated SVD of the degree-normalised interaction matrix, the collaborative
signal of PureSVD (Cremonesi, Koren & Turrin, "Performance of Recommender Algorithms on Top-N Recommendation
Tasks", RecSys 2010) and of the normalised variants of Nikolakopoulos et al. (EigenRec, 2017). It ranks pairs by
their co-engagement directly, where FastRP's random sketch (:mod:`spark_jobs.graph.fastrp`) only says which nodes
share neighbours.

* ``W``: the symmetric adjacency of ``graph_edges`` with each ordered pair's weights summed and raised to
  ``structure_weight_exponent`` (``gamma``; 0 counts a connected pair once, whatever its funnel weight).
* ``M = D^-a W D^-a`` with ``D`` the row sums of ``W`` and ``a = structure_normalisation_exponent`` (0.5 is the
  symmetric normalised adjacency; smaller values keep more of the popular nodes' weight).
* Randomized subspace iteration (Halko, Martinsson & Tropp, SIAM Review 2011, algorithm 4.4): ``X_0 = R``, the
  very sparse random rows of FastRP, ``p = 2 d + 8`` columns; then ``structure_power_iterations`` times
  ``X = orth(M X)``; then Rayleigh-Ritz: ``X^T M X = V diag(lambda) V^T`` and
  ``E = X V_d diag(sqrt(lambda_d))`` for the ``d = structure_dim`` largest eigenvalues (negative ones give zero
  columns).

Why the largest (signed) eigenvalues and ``p = 2 d + 8``: a bipartite graph's spectrum is symmetric, each
singular value ``s`` of the user-item matrix giving eigenvalues ``+s`` and ``-s``. The subspace iteration finds
the largest ``|lambda|`` (both halves, hence twice ``d`` columns and an oversampling of 8); only the positive
half scores a pair as the SVD does (``e_u . e_i = sum_k lambda_k x_uk x_ik = 1/2 sum_k u_k s_k v_k``).

``orth`` runs on the driver on a ``p x p`` matrix: the Gram matrix ``Y^T Y`` is summed from one partial sum per
partition (``mapInPandas``), and ``X = Y U diag(g^-1/2)`` over its eigenpairs ``(g, U)`` above a relative floor
(directions without support are dropped, so a graph with fewer nodes than ``p`` works). No RDD and no
``sparkContext`` are used (Spark Connect compatible); every iteration is localCheckpointed.

Scale and sign: the rows are divided by their mean norm (so the input is of the size of FastRP's unit rows),
keeping their relative norms: a popular item's longer row is the popularity a dot-product ranking needs. An
eigenvector's sign is arbitrary and floating-point sums in another order can flip it, so each column is signed
by its projection on fixed pseudo-random node weights (:func:`column_signs_and_mean_norm`): the same graph gives
the same rows from one run to the next. Catalogue edges are edges of ``W`` like any other, so a cold item is
embedded from its campaign / category neighbourhood.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN, adjacency, multiply, projection_row, unit_interval

#: Eigenvalues of a Gram matrix below this fraction of the largest are treated as zero (dropped directions).
GRAM_FLOOR = 1e-10


def subspace_width(dim: int) -> int:
    """Columns ``p`` of the iterated subspace for ``dim`` output dimensions (both spectrum halves + 8)."""
    return 2 * dim + 8


def normalised_adjacency(edges: DataFrame, config: GraphConfig) -> DataFrame:
    """``M = D^-a W D^-a`` as ``src_idx, dst_idx, w`` (see the module docstring)."""
    gamma, a = float(config.structure_weight_exponent), float(config.structure_normalisation_exponent)
    w = F.lit(1.0) if gamma == 0.0 else F.pow(F.col("w"), F.lit(gamma))
    pairs = adjacency(edges).select("src_idx", "dst_idx", w.alias("w"))
    deg = pairs.groupBy(F.col("src_idx").alias("node")).agg(F.pow(F.sum("w"), F.lit(-a)).alias("s"))
    src = deg.select(F.col("node").alias("src_idx"), F.col("s").alias("s_src"))
    dst = deg.select(F.col("node").alias("dst_idx"), F.col("s").alias("s_dst"))
    return pairs.join(src, "src_idx").join(dst, "dst_idx").select(
        "src_idx", "dst_idx", (F.col("w") * F.col("s_src") * F.col("s_dst")).alias("w"))


def _stack(column: pd.Series, width: int) -> np.ndarray:
    return np.stack(column.to_numpy()) if len(column) else np.zeros((0, width))


def cross_gram(x: DataFrame, y: DataFrame, width_x: int, width_y: int) -> np.ndarray:
    """``X^T Y`` (``[width_x, width_y]``) of two ``node_idx, x`` frames, rows paired by ``node_idx``.

    Each partition sums its rows' outer products in numpy; the driver adds the partial sums. ``X^T X`` (``y is
    x``) reads ``x`` once, without a join.
    """
    if y is x:
        pairs = x.select(F.col("x").alias("a"), F.col("x").alias("b"))
    else:
        pairs = x.select("node_idx", F.col("x").alias("a")).join(y.select("node_idx", F.col("x").alias("b")),
                                                                  "node_idx")

    def partial(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        acc = np.zeros((width_x, width_y))
        for pdf in batches:
            acc += _stack(pdf["a"], width_x).T @ _stack(pdf["b"], width_y)
        yield pd.DataFrame({"g": [acc.ravel()]})

    total = np.zeros((width_x, width_y))
    for row in pairs.select("a", "b").mapInPandas(partial, "g array<double>").collect():
        total += np.asarray(row.g).reshape(width_x, width_y)
    return total


def times_matrix(x: DataFrame, b: np.ndarray) -> DataFrame:
    """``X B``: ``node_idx, x`` rows multiplied by the driver-side matrix ``b`` (``[width, k]``), in numpy."""
    width = b.shape[0]

    def apply(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            yield pd.DataFrame({"node_idx": pdf["node_idx"].to_numpy(),
                                "x": list(_stack(pdf["x"], width) @ b)})

    return x.mapInPandas(apply, "node_idx long, x array<double>")


def orthonormaliser(gram: np.ndarray) -> np.ndarray:
    """``B`` with ``(Y B)^T (Y B) = I`` from ``gram = Y^T Y``, dropping directions below :data:`GRAM_FLOOR`."""
    g, u = np.linalg.eigh((gram + gram.T) / 2)
    keep = g > GRAM_FLOOR * max(float(g.max()), 0.0) if len(g) else np.zeros(0, bool)
    keep &= g > 0
    return u[:, keep] / np.sqrt(g[keep])


def ritz_projection(t: np.ndarray, dim: int) -> np.ndarray:
    """``V_d diag(sqrt(lambda_d))`` (``[r, dim]``) from ``t = X^T M X``: the ``dim`` largest eigenvalues, negative
    ones (and missing ones, when ``r < dim``) as zero columns."""
    lam, v = np.linalg.eigh((t + t.T) / 2)
    order = np.argsort(-lam, kind="stable")[:dim]
    out = np.zeros((t.shape[0], dim))
    out[:, :len(order)] = v[:, order] * np.sqrt(np.maximum(lam[order], 0.0))
    return out


def column_signs_and_mean_norm(e: DataFrame, dim: int, seed: int) -> tuple[np.ndarray, float]:
    """Per column ``j``, the sign of ``sum_i e_ij r_i`` (``r_i`` a fixed pseudo-random weight of node ``i`` in
    ``(-1/2, 1/2)``, from ``xxhash64(node_idx, seed)``; a continuous function of the column, so rounding cannot flip
    it, and symmetric graphs have no ties), and the mean row norm of ``e``; one Spark job."""
    r = unit_interval(F.xxhash64(F.col("node_idx"), F.lit(int(seed)).cast("long"))) - F.lit(0.5)
    norm = F.sqrt(F.aggregate("x", F.lit(0.0), lambda acc, v: acc + v * v))
    row = e.agg(*[F.sum(F.col("x")[j] * r) for j in range(dim)], F.avg(norm)).first()
    signs = np.array([-1.0 if (v or 0.0) < 0 else 1.0 for v in row[:dim]])
    return signs, float(row[dim] or 0.0)


def spectral_embeddings(index: DataFrame, edges: DataFrame, config: GraphConfig) -> DataFrame:
    """Spectral embedding of every node with at least one edge (see the module docstring).

    Runs ``structure_power_iterations + 2`` rounds of Spark jobs now (each localCheckpointed); the returned
    frame reads those checkpoints.

    Args:
        index: ``node_idx, entity_id`` of every node (:func:`~spark_jobs.graph.index.index_entities`).
        edges: the ``graph_edges`` rows of the graph (symmetric).
        config: ``structure_dim``, ``structure_power_iterations``, ``structure_weight_exponent``,
            ``structure_normalisation_exponent``, ``structure_sparsity`` and ``seed``.

    Returns:
        ``node_idx long, structure_embedding array<float>`` (mean row norm 1).
    """
    dim, width = config.structure_dim, subspace_width(config.structure_dim)
    m = normalised_adjacency(edges, config).localCheckpoint()
    nodes = m.select(F.col("src_idx").alias("node_idx")).distinct()
    x = index.select("node_idx", "entity_id").join(nodes, "node_idx").select(
        "node_idx", projection_row(F.xxhash64("entity_id"), config, width).alias("x")).localCheckpoint()
    for _ in range(config.structure_power_iterations):
        y = multiply(m, x, width).localCheckpoint()
        b = orthonormaliser(cross_gram(y, y, width, width))
        x, width = times_matrix(y, b).localCheckpoint(), b.shape[1]
    projection = ritz_projection(cross_gram(x, multiply(m, x, width), width, width), dim)
    e = times_matrix(x, projection).localCheckpoint()
    signs, mean = column_signs_and_mean_norm(e, dim, config.seed)
    factor = signs / (mean if mean > 0 else 1.0)
    return times_matrix(e, np.diag(factor)).select(
        "node_idx", F.col("x").cast("array<float>").alias(STRUCTURE_COLUMN))
