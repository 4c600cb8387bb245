"""Graph-wide structural embedding of every node: FastRP in Spark DataFrames.

FastRP (Chen et al., "Fast and Accurate Network Embeddings via Very Sparse Random Projection", CIKM 2019) gives
each node a sketch of its multi-hop neighbourhood: nodes that share neighbours (users with overlapping histories,
items with overlapping audiences, ads of one campaign) get similar vectors. It is the whole-graph collaborative
signal the sampled views cannot carry, and costs a few sparse matrix products:

* ``R``: a very sparse random projection (Achlioptas 2003; Li, Hastie & Church 2006), ``N x d`` entries
  ``sqrt(s) * {+1, 0, -1}`` with probabilities ``1 / 2s, 1 - 1 / s, 1 / 2s``. An entry is a function of
  ``(seed, xxhash64(entity_id), dim)`` alone (Spark's ``xxhash64``), so no matrix is held on the driver, a node
  keeps its row from one run to the next, and the result does not depend on partitioning or ``node_idx``.
* ``X_0 = diag(deg^beta) R`` (``structure_degree_exponent``, the paper's normalisation strength: ``beta < 0``
  lowers the weight of hubs' random vectors); ``deg`` is the weighted degree.
* ``X_t = rownorm(D^-1 A X_{t-1})`` for ``t = 1..k``: ``A`` the symmetric adjacency of ``graph_edges`` with the
  funnel-weighted, time-decayed (or catalogue) weights summed per ordered pair, ``D`` its weighted degrees.
  ``D^-1`` is a positive per-row scale, which the row L2 normalisation removes, so it is not computed.
* ``E = rownorm(sum_t alpha_t X_t)`` (``structure_iteration_weights``, ``alpha_1..alpha_k``).

Catalogue edges are edges of ``A`` like any other, so an item without activity (a cold item) is still embedded
from its campaign / category neighbourhood. Nodes without any edge get no row (``null`` in ``graph_nodes``).

Representation. Each iteration joins the edges with the current ``(node_idx, x array<double>)`` rows and sums the
``d`` coordinates in one hash aggregation (``d`` ``sum`` aggregates, partially aggregated before the shuffle),
then localCheckpoints the result so the lineage stays one iteration deep. A long ``(node, dim, value)`` layout
would shuffle ``d`` rows per edge instead of one. One vector aggregate (``Summarizer.sum``) instead of ``d`` sums
compiles faster on a small graph but was slower and larger at 3 * 10^5 events (``benchmarks/graph_build.py``).
No RDD and no ``sparkContext`` are used (Spark Connect compatible).
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.graph.config import GraphConfig

#: Column of ``graph_nodes`` holding the embedding (``array<float>``, L2-normalised; null without edges or when off).
STRUCTURE_COLUMN = "structure_embedding"


def unit_interval(h: Column) -> Column:
    """A uniform number in (0, 1) from a 64-bit hash: its 53 high bits, centred (never 0 or 1)."""
    return (F.shiftrightunsigned(h, 11).cast("double") + 0.5) / float(2**53)


def projection_row(node_hash: Column, config: GraphConfig, dim: int | None = None) -> Column:
    """The node's row of ``R`` (``array<double>`` of ``dim`` entries, by default ``structure_dim``).

    Entry ``j`` is ``sqrt(s)`` when ``u < 1 / 2s``, ``-sqrt(s)`` when ``u > 1 - 1 / 2s`` and 0 otherwise, with
    ``u = unit_interval(xxhash64(seed, node_hash, j))`` (all three as ``long``).

    Args:
        node_hash: ``xxhash64(entity_id)`` of the node.
        config: ``structure_dim``, ``structure_sparsity`` (``s``) and ``seed``.
        dim: the row width when not ``structure_dim`` (the spectral embedding's wider random start).
    """
    s = float(config.structure_sparsity)
    p, scale = 1.0 / (2.0 * s), math.sqrt(s)
    seed = F.lit(int(config.seed)).cast("long")

    def entry(j: Column) -> Column:
        u = unit_interval(F.xxhash64(seed, node_hash, j.cast("long")))
        return F.when(u < p, F.lit(scale)).when(u > 1.0 - p, F.lit(-scale)).otherwise(F.lit(0.0))

    return F.transform(F.sequence(F.lit(0), F.lit((dim or config.structure_dim) - 1)), entry)


def l2_normalise(v: Column) -> Column:
    """``v / ||v||`` for an ``array<double>``; a zero vector stays zero."""
    norm = F.sqrt(F.aggregate(v, F.lit(0.0), lambda acc, e: acc + e * e))
    return F.when(norm > 0, F.transform(v, lambda e: e / norm)).otherwise(v)


def adjacency(edges: DataFrame) -> DataFrame:
    """``A``: ``src_idx, dst_idx, w`` with the weights of every edge of an ordered pair summed (``graph_edges`` is
    symmetric, so this is symmetric too)."""
    return edges.groupBy("src_idx", "dst_idx").agg(F.sum(F.col("weight").cast("double")).alias("w"))


def initial_vectors(index: DataFrame, adj: DataFrame, config: GraphConfig) -> DataFrame:
    """``X_0 = diag(deg^beta) R`` for every node with at least one edge.

    Args:
        index: ``node_idx, entity_id`` of every node (``index_entities``).
        adj: :func:`adjacency`.
        config: projection settings and ``structure_degree_exponent``.

    Returns:
        ``node_idx, x array<double>``.
    """
    deg = adj.groupBy(F.col("src_idx").alias("node_idx")).agg(F.sum("w").alias("_deg"))
    beta = float(config.structure_degree_exponent)
    row = projection_row(F.xxhash64("entity_id"), config)
    if beta != 0.0:
        factor = F.pow(F.col("_deg"), F.lit(beta))
        row = F.transform(row, lambda e: e * factor)
    return index.select("node_idx", "entity_id").join(deg, "node_idx").select("node_idx", row.alias("x"))


def multiply(adj: DataFrame, x: DataFrame, dim: int) -> DataFrame:
    """``A x``: ``node_idx, x`` for every node with an edge to a node of ``x``.

    Args:
        adj: ``src_idx, dst_idx, w`` (:func:`adjacency`, or any weighted edge list).
        x: ``node_idx, x array<double>`` (``dim`` entries).
        dim: the vector width.
    """
    msg = adj.join(x.withColumnRenamed("node_idx", "dst_idx"), "dst_idx")
    sums = msg.groupBy("src_idx").agg(*[F.sum(F.col("w") * F.col("x")[j]).alias(f"_s{j}") for j in range(dim)])
    return sums.select(F.col("src_idx").alias("node_idx"), F.array(*[F.col(f"_s{j}") for j in range(dim)]).alias("x"))


def propagate(adj: DataFrame, x: DataFrame, dim: int) -> DataFrame:
    """One FastRP step ``rownorm(A x)`` (see :func:`multiply`)."""
    return multiply(adj, x, dim).select("node_idx", l2_normalise(F.col("x")).alias("x"))


def _plus_scaled(alpha: float):
    """``(a, b) -> a + alpha * b`` for ``zip_with`` (a lambda Spark can inspect: exactly two parameters)."""
    weight = F.lit(float(alpha))
    return lambda a, b: a + weight * b


def structure_embeddings(index: DataFrame, edges: DataFrame, config: GraphConfig) -> DataFrame:
    """FastRP embedding of every node with at least one edge (see the module docstring).

    Runs ``len(structure_iteration_weights)`` Spark jobs now (one localCheckpoint per iteration); the returned
    frame reads those checkpoints.

    Args:
        index: ``node_idx, entity_id`` of every node (:func:`~spark_jobs.graph.index.index_entities`).
        edges: the ``graph_edges`` rows of the graph (symmetric).
        config: ``structure_dim``, ``structure_iteration_weights``, ``structure_sparsity``,
            ``structure_degree_exponent`` and ``seed``.

    Returns:
        ``node_idx long, structure_embedding array<float>`` (L2-normalised).
    """
    dim = config.structure_dim
    adj = adjacency(edges).localCheckpoint()
    x = initial_vectors(index, adj, config)
    zeros = F.array_repeat(F.lit(0.0), dim)
    frame = x.select("node_idx", "x", zeros.alias("acc")).localCheckpoint()
    for alpha in config.structure_iteration_weights:
        nxt = propagate(adj, frame.select("node_idx", "x"), dim)
        # Every node of ``frame`` has an edge, so it has a row in ``nxt``: the join keeps all of them.
        acc = F.zip_with("acc", "x", _plus_scaled(alpha))
        frame = nxt.join(frame.select("node_idx", "acc"), "node_idx").select("node_idx", "x", acc.alias("acc"))
        frame = frame.localCheckpoint()
    return frame.select("node_idx", l2_normalise(F.col("acc")).cast("array<float>").alias(STRUCTURE_COLUMN))
