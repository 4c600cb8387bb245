"""Graph-wide spectral structure embedding: the top eigenvectors of the normalised adjacency, on the driver.

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

Where the work runs, and why. The ``graph_edges`` rows and each node's ``xxhash64(entity_id)`` are collected to
the driver through Arrow; the start rows are drawn there with the numpy twin of Spark's ``xxhash64``
(:mod:`spark_jobs.graph.xxhash`, the same rows as FastRP's projection) and the iterations run in scipy (one sparse
product and a ``p x p`` eigendecomposition each). As Spark jobs, each iteration was a join of every edge with its
neighbour's ``p``-wide row plus ``p`` sums per node: at 10^7 events that took minutes, where scipy's product takes
about a second, and on small graphs the dozens of Spark jobs cost more than the arithmetic
(docs/results.md). ``orth`` keeps ``X = Y U diag(g^-1/2)`` over the eigenpairs ``(g, U)`` of the Gram matrix
``Y^T Y`` above a relative floor (directions without support are dropped, so a graph with fewer nodes than ``p``
works). No RDD and no ``sparkContext`` are used (Spark Connect compatible).

Memory: the driver holds the ``graph_edges`` rows while building ``M`` (24 bytes each), then ``M`` (12 bytes per
ordered connected pair) and two ``N x p`` float64 matrices (``16 p`` bytes per node: 1.2 KB at the default
``p = 72``), so about 1.3 GB at 10^6 nodes and 10^7 edges. The views stage already collects the graph to the
driver; for a graph whose nodes do not fit, ``structure_method = "fastrp"`` runs entirely as Spark jobs.

Scale and sign: the rows are divided by their mean norm (so the input is of the size of FastRP's unit rows),
keeping their relative norms: a popular item's longer row is the popularity a dot-product ranking needs. An
eigenvector's sign is arbitrary and floating-point sums in another order can flip it, so each column is signed
by its projection on fixed pseudo-random node weights (:func:`column_signs`): the same graph gives
the same rows from one run to the next. Catalogue edges are edges of ``W`` like any other, so a cold item is
embedded from its campaign / category neighbourhood.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.arrow_columns import list_column
from spark_jobs.driver_collect import to_arrow
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN
from spark_jobs.graph.sampling import edges_among
from spark_jobs.graph.xxhash import spark_unit_interval, xxhash64_longs

log = logging.getLogger(__name__)

#: Eigenvalues of a Gram matrix below this fraction of the largest are treated as zero (dropped directions).
GRAM_FLOOR = 1e-10


def subspace_width(dim: int) -> int:
    """Columns ``p`` of the iterated subspace for ``dim`` output dimensions (both spectrum halves + 8)."""
    return 2 * dim + 8


def normalised_matrix(
    src: np.ndarray, dst: np.ndarray, weight: np.ndarray, config: GraphConfig
) -> tuple[np.ndarray, sp.csr_matrix]:
    """``M = D^-a W D^-a`` (see the module docstring) over the nodes with an edge.

    Args:
        src, dst, weight: the ``graph_edges`` rows (symmetric; rows of one ordered pair add up).
        config: ``structure_weight_exponent`` (``gamma``) and ``structure_normalisation_exponent`` (``a``).

    Returns:
        ``(nodes, M)``: the ``node_idx`` of the nodes with an edge, ascending, and ``M`` with row ``i`` for
        ``nodes[i]``.
    """
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    has = np.zeros(int(max(src.max(initial=-1), dst.max(initial=-1))) + 1, dtype=bool)
    has[src] = True
    symmetric = has[dst]
    if not symmetric.all():  # graph_edges' blocking check reports these; they must not stop the embedding
        log.warning("spectral: %d edges to a node without edges of its own are left out", (~symmetric).sum())
        src, dst, weight = src[symmetric], dst[symmetric], np.asarray(weight)[symmetric]
    nodes, pos = np.flatnonzero(has), np.cumsum(has) - 1
    n = len(nodes)
    w = sp.csr_matrix((np.asarray(weight, dtype=np.float64), (pos[src], pos[dst])), shape=(n, n))
    w.sum_duplicates()
    gamma, a = float(config.structure_weight_exponent), float(config.structure_normalisation_exponent)
    w.data = np.ones_like(w.data) if gamma == 0.0 else np.power(w.data, gamma)
    deg = np.asarray(w.sum(axis=1)).ravel()
    s = sp.diags(np.power(deg, -a, out=np.zeros_like(deg), where=deg > 0))
    return nodes, (s @ w @ s).tocsr()


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


def subspace_iteration(m: sp.csr_matrix, x0: np.ndarray, iterations: int, dim: int) -> np.ndarray:
    """``X V_d diag(sqrt(lambda_d))`` after ``iterations`` rounds of ``X = orth(M X)`` from ``x0`` (module docstring).

    Args:
        m: the symmetric ``[N, N]`` matrix ``M``.
        x0: ``[N, p]`` start rows.
        iterations: subspace iterations (>= 1).
        dim: output columns ``d``.
    """
    x = x0
    for _ in range(iterations):
        y = m @ x
        x = y @ orthonormaliser(y.T @ y)
    return x @ ritz_projection(x.T @ (m @ x), dim)


def start_rows(node_hash: np.ndarray, config: GraphConfig, width: int) -> np.ndarray:
    """``[N, width]`` rows of :func:`spark_jobs.graph.fastrp.projection_row`, bit for bit, from ``xxhash64(entity_id)``.

    Args:
        node_hash: Spark's ``xxhash64(entity_id)`` of each node.
        config: ``structure_sparsity`` and ``seed``.
        width: columns ``p``.
    """
    s = float(config.structure_sparsity)
    p, scale = 1.0 / (2.0 * s), float(np.sqrt(s))
    rows = np.zeros((len(node_hash), width))
    for j in range(width):  # a column at a time: no [N, p] temporaries
        u = spark_unit_interval(xxhash64_longs(int(config.seed), node_hash, j))
        rows[:, j] = np.where(u < p, scale, np.where(u > 1.0 - p, -scale, 0.0))
    return rows


def column_signs(e: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per column ``j``, the sign of ``sum_i e_ij r_i`` (``r_i`` a fixed pseudo-random weight of node ``i``): a
    continuous function of the column, so rounding cannot flip it, and symmetric graphs have no ties."""
    return np.where(r @ e < 0, -1.0, 1.0)


def spectral_embeddings(index: DataFrame, edges: DataFrame, config: GraphConfig) -> DataFrame:
    """Spectral embedding of every node with at least one edge (see the module docstring).

    Runs now: two Spark jobs (the edge rows and the nodes' entity-id hashes, collected through Arrow), then the
    rest on the driver; the returned frame is localCheckpointed, so its plan holds no driver-side data.

    Args:
        index: ``node_idx, entity_id`` of every node (:func:`~spark_jobs.graph.index.index_entities`).
        edges: the ``graph_edges`` rows of the graph (symmetric).
        config: ``structure_dim``, ``structure_power_iterations``, ``structure_weight_exponent``,
            ``structure_normalisation_exponent``, ``structure_sparsity`` and ``seed``.

    Returns:
        ``node_idx long, structure_embedding array<float>`` (mean row norm 1).
    """
    dim, width = config.structure_dim, subspace_width(config.structure_dim)
    spark = index.sparkSession
    t0 = time.perf_counter()
    hashes = to_arrow(index.select("node_idx", F.xxhash64("entity_id").alias("h")), "node hashes").sort_by(
        "node_idx")
    idx, node_hash = hashes.column("node_idx").to_numpy(), hashes.column("h").to_numpy()
    # The raw rows, not a Spark aggregation: scipy sums an ordered pair's rows faster than a shuffle would.
    rows = to_arrow(edges.select("src_idx", "dst_idx", F.col("weight").cast("double")), "graph_edges rows")
    src, dst = rows.column("src_idx").to_numpy(), rows.column("dst_idx").to_numpy()
    in_index = np.zeros(int(idx.max(initial=-1)) + 1, dtype=bool)
    in_index[idx] = True
    known = edges_among(src, dst, in_index)
    if not known.all():  # graph_edges' blocking check reports these; they must not stop the embedding
        log.warning("spectral: %d edges naming a node outside the index are left out", (~known).sum())
    if not known.any():
        return spark.createDataFrame([], f"node_idx long, {STRUCTURE_COLUMN} array<float>")
    nodes, m = normalised_matrix(src[known], dst[known], rows.column("weight").to_numpy()[known], config)
    del rows, src, dst, known
    at = np.searchsorted(idx, nodes)
    x0 = start_rows(node_hash[at], config, width)
    r = spark_unit_interval(xxhash64_longs(nodes, int(config.seed))) - 0.5
    log.info("spectral: collected %d nodes, %d matrix entries in %.1f s", len(nodes), m.nnz, time.perf_counter() - t0)
    t0 = time.perf_counter()
    e = subspace_iteration(m, x0, config.structure_power_iterations, dim)
    mean = float(np.linalg.norm(e, axis=1).mean())
    e *= column_signs(e, r) / (mean if mean > 0 else 1.0)
    log.info("spectral: %d iterations of width %d in %.1f s", config.structure_power_iterations, width,
             time.perf_counter() - t0)
    table = pa.table({"node_idx": pa.array(nodes, pa.int64()), STRUCTURE_COLUMN: list_column(e, pa.float32())})
    return spark.createDataFrame(table).localCheckpoint()
