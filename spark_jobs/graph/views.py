"""Sampled neighbourhood views of every anchor, with their shortest-path and edge-type structure.

Each anchor gets a *broad* view (teacher) and a *narrow* view (student), the two "crops" of DINO-style
self-distillation (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021),
drawn as hop-by-hop weight-biased neighbour samples in the spirit of GraphSAGE (Hamilton et al., NeurIPS
2017). At each hop every frontier node keeps its ``fanout`` neighbours with the smallest
Efraimidis-Spirakis key ``-ln(u) / w`` (Efraimidis & Spirakis, "Weighted random sampling with a
reservoir", IPL 2006): a weighted sample without replacement. ``u`` is a hash of
``(seed, view, anchor, hop, neighbour)`` over *entity ids* (splitmix64 over the ``xxhash64(entity_id)`` node
hashes, :mod:`spark_jobs.graph.sampling`), so a sample depends neither on partitioning nor on the node index
of a run, and scaling every weight by the same factor (one more day of decay) leaves it unchanged. Ties are
broken by ``node_idx`` (the rank of the entity id, so their order is the same in every run).

Where the work runs, and why. The ``graph_nodes`` and ``graph_edges`` rows are collected to the driver once,
through Arrow (:func:`collect_view_graph`), and the two graph-wide tables the views are drawn from are computed
there in numpy: the hub-capped sampling adjacency (:func:`~spark_jobs.graph.sampling.sampling_adjacency`) and
the degree-oriented connected pairs (:func:`~spark_jobs.graph.sampling.oriented_pairs`); from collected rows they
are a few sorts, where Spark needed a window, an aggregation and four joins over the edges (docs/results.md).
They become compact CSR arrays (:class:`~spark_jobs.graph.sampling.ViewGraph`: ``int32`` neighbours, ``float64``
weights, ``int64`` node hashes, ``int8`` node types, ``uint8`` edge types) and broadcast to the executors.
One ``mapInPandas`` over the anchors (spread over ``4 x defaultParallelism`` partitions, so it scales out with
executors) then samples both views, finds their induced edges and runs the per-view BFS for batches of
anchors in numpy. The work per anchor is bounded (fan-outs x ``hub_cap`` candidates, at most
``max_view_nodes`` members), so the stage is linear in the anchors plus a few sorts of the edges on the driver.
An earlier version did the sampling as Spark joins and windows hop by hop; at 10^7 events it shuffled about
10^8 candidate rows at hop 2 (anchors x 16 x ``hub_cap``) plus the members x pairs x members join for the
induced edges, and took far longer than building the graph.

Memory limit of this design: the broadcast graph takes about ``26 N + 12 A + 6 P`` bytes (N nodes,
A <= N x ``hub_cap`` sampling-adjacency entries, P undirected connected pairs, about half the edges); its size
for the benchmark graphs is in docs/results.md. The driver holds it (and, while building it, the edge rows,
28 bytes each, and a few sort permutations of them), and every Python worker holds one copy. That is fine up to
some 10^8 edges; beyond that the graph would have to be partitioned (e.g. by anchor neighbourhood) instead of broadcast.

Hubs are capped twice: a node offers at most ``hub_cap`` candidate neighbours (its own seeded weighted
sample, drawn once per node in :func:`~spark_jobs.graph.sampling.sampling_adjacency`), and a view holds at
most ``max_view_nodes`` nodes. Views where either cap, or a fan-out, dropped a candidate are marked
``truncated``. A node reached from several parents at one hop is kept once, with its smallest key, and
carries the truncation flags of the dropped copies; a node already in the view is never sampled again.

Structure (distances truncated at ``max_dist``, edge types) is computed per view on the subgraph induced
by the view's nodes. The induced edges are found from each member's list of pairs *oriented from the
lower-degree endpoint* (degree ordering, as in triangle listing, Chiba & Nishizeki 1985): each undirected
pair is stored once, at the endpoint with fewer neighbours, so a hub in thousands of views costs little.
The small per-view BFS is :func:`~spark_jobs.graph.structure.batch_structure`.

Nightly increments (what is recomputed and why). A view depends on (a) the weights of the edges of every
node it samples from, i.e. nodes within ``hops - 1`` of the anchor, and (b) which edges join its own nodes,
i.e. nodes within ``hops`` of the anchor. Efraimidis-Spirakis samples do not change when all of a node's
weights are multiplied by the same factor, and one more day of exponential decay does exactly that to a
node whose edges are all activity edges. So :func:`affected_anchors` takes as seeds the nodes whose
out-edges changed *other than by one common factor* (an edge added or removed, or unequal weight ratios,
which includes nodes that mix decayed activity edges with undecayed catalog edges), and marks every node
within ``hops`` hops of a seed (in the old or the new graph). Only those anchors, plus new entities, are
sampled again by :func:`update_views` (which still collects and broadcasts the whole graph once: the sampled
anchors need it); every other view is carried over with its node indices re-mapped to the new run's index
through the entity ids, and equals what a full recompute would produce (tested). How much this saves depends
on the graph: ads linked to campaigns by catalog edges are seeds every night, so in a catalog-heavy graph
most anchors near an ad are recomputed anyway.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.driver_collect import to_arrow
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.sampling import (
    NodeRows,
    PairRows,
    ViewGraph,
    build_view_batch,
    edges_among,
    oriented_pairs,
    sample_batch,
    sampling_adjacency,
)

log = logging.getLogger(__name__)

#: Column order of the ``graph_views`` table (contracts.py, "Graph tables").
VIEW_COLUMNS = ("anchor_idx", "anchor_id", "view", "nodes", "node_types", "dist", "edge_types", "truncated",
                "run_date")
_VIEW_SCHEMA = (
    "anchor_idx long, anchor_id string, view string, nodes array<long>, node_types array<tinyint>, "
    "dist binary, edge_types binary, truncated boolean"
)
_MEMBER_SCHEMA = "view string, anchor_idx long, node_idx long, pos int, trunc boolean"
#: Anchors per numpy batch inside a task. Bounds a worker's scratch memory (hop 2 of the broad view gathers
#: up to batch x 16 x hub_cap candidates) and one output Arrow batch (a broad view is up to ~18 KB).
ANCHOR_BATCH = 512


def collect_view_graph(nodes: DataFrame, edges: DataFrame, config: GraphConfig, pairs: bool = True) -> ViewGraph:
    """Collect the nodes and the raw edge rows to the driver (through Arrow) and build the CSR graph there.

    The sampling adjacency and the oriented pairs are computed in numpy
    (:func:`~spark_jobs.graph.sampling.sampling_adjacency`, :func:`~spark_jobs.graph.sampling.oriented_pairs`):
    from the collected rows that is a few sorts, where Spark needed a window and four joins over the edges.
    Edge rows naming a node missing from ``nodes`` are left out (``graph_edges``' blocking check reports them).

    Args:
        nodes: the ``graph_nodes`` table.
        edges: the ``graph_edges`` table (symmetric).
        config: ``hub_cap`` and ``seed`` of the sampling adjacency.
        pairs: also build the oriented pairs (needed for structure, not for sampling alone).

    Returns:
        The :class:`~spark_jobs.graph.sampling.ViewGraph` (see the module docstring for its size).
    """
    node_t = to_arrow(nodes.select(
        "node_idx", F.xxhash64("entity_id").alias("nh"), F.coalesce("node_type", F.lit(0)).alias("node_type")
    ), "graph_nodes rows")
    node_idx = node_t.column("node_idx").to_numpy()
    present = np.zeros(int(node_idx.max(initial=-1)) + 1, dtype=bool)
    present[node_idx] = True
    node_hash = np.zeros(len(present), dtype=np.int64)
    node_hash[node_idx] = node_t.column("nh").to_numpy()
    edge_t = to_arrow(edges.select("src_idx", "dst_idx", F.col("weight").cast("double"), "edge_type_id"),
                      "graph_edges rows")
    src, dst = edge_t.column("src_idx").to_numpy(), edge_t.column("dst_idx").to_numpy()
    known = edges_among(src, dst, present)
    if not known.all():
        log.warning("views: %d edge rows naming an unknown node are left out", (~known).sum())
    src, dst = src[known], dst[known]
    adjacency = sampling_adjacency(src, dst, edge_t.column("weight").to_numpy()[known], node_hash, config.hub_cap,
                                   config.seed)
    if pairs:
        pair_rows = oriented_pairs(src, dst, edge_t.column("edge_type_id").to_numpy(zero_copy_only=False)[known])
    else:
        pair_rows = PairRows(*[np.zeros(0, dtype=np.int64)] * 4)
    del edge_t, src, dst
    graph = ViewGraph.from_arrays(
        NodeRows(node_idx, node_t.column("nh").to_numpy(), node_t.column("node_type").to_numpy()), adjacency, pair_rows
    )
    log.info("views: collected graph of %d nodes, %d sampling entries, %d oriented pairs (%.1f MB)",
             graph.num_nodes, len(graph.adj_dst), len(graph.pair_dst), graph.nbytes / 2**20)
    return graph


def _anchor_frame(nodes: DataFrame, anchors: DataFrame | None) -> DataFrame:
    """``anchor_idx, anchor_id`` of the anchors (distinct, known nodes only), spread over the cluster."""
    if anchors is None:
        anchors = nodes.select(F.col("node_idx").alias("anchor_idx"))
    elif "anchor_idx" not in anchors.columns:
        anchors = anchors.select(F.col("node_idx").alias("anchor_idx"))
    ids = nodes.select(F.col("node_idx").alias("anchor_idx"), F.col("entity_id").alias("anchor_id"))
    parts = 4 * nodes.sparkSession.sparkContext.defaultParallelism
    return anchors.select("anchor_idx").distinct().join(ids, "anchor_idx").repartition(parts)


def _chunks(batches):
    """Arrow batches of anchors, re-cut to at most :data:`ANCHOR_BATCH` rows."""
    for pdf in batches:
        for lo in range(0, len(pdf), ANCHOR_BATCH):
            yield pdf.iloc[lo:lo + ANCHOR_BATCH]


def _view_batches(batches, graph_bc, config: GraphConfig):
    """``mapInPandas`` body: anchors -> their two views with structure (``_VIEW_SCHEMA``)."""
    graph: ViewGraph = graph_bc.value
    for part in _chunks(batches):
        anchors = part["anchor_idx"].to_numpy(np.int64)
        for name, fanout in config.views().items():
            rows = build_view_batch(graph, anchors, fanout, seed=config.seed, view=name,
                                    max_view_nodes=config.max_view_nodes, max_dist=config.max_dist)
            yield pd.DataFrame({
                "anchor_idx": anchors, "anchor_id": part["anchor_id"].to_numpy(), "view": name,
                "nodes": rows.nodes, "node_types": rows.node_types, "dist": rows.dist,
                "edge_types": rows.edge_types, "truncated": rows.truncated,
            })


def _member_batches(batches, graph_bc, config: GraphConfig):
    """``mapInPandas`` body: anchors -> one row per view member (``_MEMBER_SCHEMA``)."""
    graph: ViewGraph = graph_bc.value
    for part in _chunks(batches):
        anchors = part["anchor_idx"].to_numpy(np.int64)
        for name, fanout in config.views().items():
            got = sample_batch(graph, anchors, fanout, seed=config.seed, view=name,
                               max_view_nodes=config.max_view_nodes)
            size = np.diff(got.ptr)
            owner = np.repeat(np.arange(len(anchors)), size)
            yield pd.DataFrame({
                "view": name, "anchor_idx": anchors[owner], "node_idx": got.nodes,
                "pos": (np.arange(len(got.nodes)) - got.ptr[owner]).astype(np.int32), "trunc": got.trunc,
            })


def sample_views(
    nodes: DataFrame, edges: DataFrame, config: GraphConfig, anchors: DataFrame | None = None
) -> DataFrame:
    """Sampled view members, capped and ordered: ``view, anchor_idx, node_idx, pos, trunc``.

    ``pos`` is the node's position in the view: the anchor is 0, then nodes by (hop, key, node_idx). ``trunc``
    says a cap or fan-out dropped a candidate on the member's way in, or the view overflowed
    ``max_view_nodes``. The sampling runs as in :func:`build_views` (collect, broadcast, ``mapInPandas``).
    """
    graph_bc = nodes.sparkSession.sparkContext.broadcast(collect_view_graph(nodes, edges, config, pairs=False))
    return _anchor_frame(nodes, anchors).mapInPandas(
        lambda it: _member_batches(it, graph_bc, config), _MEMBER_SCHEMA
    )


def build_views(
    nodes: DataFrame,
    edges: DataFrame,
    run_date: dt.date,
    config: GraphConfig | None = None,
    anchors: DataFrame | None = None,
) -> DataFrame:
    """Build the ``graph_views`` table: a broad and a narrow view of every anchor, with their structure.

    Collects the graph to the driver and broadcasts it now (see the module docstring); the views themselves
    are computed when the returned DataFrame runs. The broadcast stays referenced by its plan.

    Args:
        nodes: the ``graph_nodes`` table.
        edges: the ``graph_edges`` table (symmetric).
        run_date: written to ``run_date``; sampling itself depends only on the graph and ``config.seed``.
        config: fan-outs, caps, ``max_dist`` and seed.
        anchors: the anchors to build views for (a column ``anchor_idx`` or ``node_idx``); all nodes when
            ``None``. Anchors with no neighbours get a one-node view.

    Returns:
        A DataFrame with the ``graph_views`` schema: ``nodes[0] == anchor_idx``, ``dist`` and
        ``edge_types`` are ``n * n`` row-major ``int8`` / ``uint8`` bytes.
    """
    config = config or GraphConfig()
    graph_bc = nodes.sparkSession.sparkContext.broadcast(collect_view_graph(nodes, edges, config))
    views = _anchor_frame(nodes, anchors).mapInPandas(lambda it: _view_batches(it, graph_bc, config), _VIEW_SCHEMA)
    return views.select(*VIEW_COLUMNS[:-1], F.lit(run_date).alias("run_date"))


def affected_anchors(edges_old: DataFrame, edges_new: DataFrame, hops: int, rtol: float = 1e-9) -> DataFrame:
    """Entities whose views may differ between two graphs (see the module docstring for why).

    A node is a *seed* when its out-edges changed other than by one common factor: an edge added or
    removed, or weight ratios ``new / old`` that differ between its edges (one more day of decay scales all
    activity edges alike, which no Efraimidis-Spirakis sample sees; a node mixing decayed activity edges
    with undecayed catalog edges is therefore a seed every night). Every node within ``hops`` hops of a seed,
    in the union of both graphs, is affected.

    Args:
        edges_old: the previous run's ``graph_edges``.
        edges_new: this run's ``graph_edges``.
        hops: hops of the deepest view (``max(config.broad_hops, config.narrow_hops)``).
        rtol: relative tolerance on the spread of the weight ratios of one node.

    Returns:
        ``entity_id`` of every affected anchor (distinct). Ids are used, not node indices, because the dense
        index shifts when entities are added.
    """
    key = ["src_id", "dst_id", "edge_type"]
    old = edges_old.groupBy(*key).agg(F.sum("weight").alias("w_old"))
    new = edges_new.groupBy(*key).agg(F.sum("weight").alias("w_new"))
    ratio = F.col("w_new") / F.col("w_old")
    per_node = old.join(new, key, "full_outer").groupBy(F.col("src_id").alias("entity_id")).agg(
        F.max(F.col("w_old").isNull() | F.col("w_new").isNull()).alias("_added_or_removed"),
        F.max(ratio).alias("_hi"),
        F.min(ratio).alias("_lo"),
    )
    reached = per_node.where(
        F.col("_added_or_removed") | ((F.col("_hi") - F.col("_lo")) > rtol * F.abs(F.col("_hi")))
    ).select("entity_id")
    graph = edges_old.select("src_id", "dst_id").unionByName(edges_new.select("src_id", "dst_id")).distinct()
    for _ in range(hops):
        step = reached.join(graph, reached["entity_id"] == graph["src_id"]).select(
            F.col("dst_id").alias("entity_id")
        )
        reached = reached.unionByName(step).distinct().localCheckpoint()
    return reached


def anchors_to_recompute(
    old_nodes: DataFrame,
    old_edges: DataFrame,
    nodes: DataFrame,
    edges: DataFrame,
    config: GraphConfig | None = None,
) -> DataFrame:
    """``entity_id`` of every anchor :func:`update_views` samples again: affected ones plus new entities.

    Args:
        old_nodes, old_edges: the previous run's graph tables.
        nodes, edges: this run's graph tables.
        config: the view settings (only the number of hops matters here).

    Returns:
        Distinct ``entity_id`` (it may name entities absent from ``nodes``; they get no view).
    """
    config = config or GraphConfig()
    hops = max(config.broad_hops, config.narrow_hops)
    affected = affected_anchors(old_edges, edges, hops)
    new_ids = nodes.select("entity_id").join(old_nodes.select("entity_id"), "entity_id", "left_anti")
    return affected.unionByName(new_ids).distinct()


@dataclass(frozen=True)
class GraphSnapshot:
    """The graph tables of one run date (lazy DataFrames).

    Attributes:
        run_date: the snapshot's run date.
        nodes: its ``graph_nodes`` rows.
        edges: its ``graph_edges`` rows.
        views: its ``graph_views`` rows (None where not needed).
    """

    run_date: dt.date
    nodes: DataFrame
    edges: DataFrame
    views: DataFrame | None = None


def update_views(
    previous: GraphSnapshot,
    nodes: DataFrame,
    edges: DataFrame,
    run_date: dt.date,
    config: GraphConfig | None = None,
    redo_ids: DataFrame | None = None,
) -> DataFrame:
    """Nightly increment of ``graph_views``: recompute affected and new anchors, carry the others over.

    Args:
        previous: the previous run's graph tables, views included (its run date is kept for the record; decay
            needs no correction, see :func:`affected_anchors`).
        nodes, edges: this run's graph tables.
        run_date: this run's date.
        config: the same :class:`GraphConfig` as the previous run (same seed, fan-outs, half life).
        redo_ids: :func:`anchors_to_recompute` of these tables when the caller already has it (e.g. to count
            it); computed here when ``None``.

    Returns:
        The full ``graph_views`` table of this run, equal to :func:`build_views` on ``nodes, edges``.
    """
    config = config or GraphConfig()
    if previous.views is None:
        raise ValueError(f"the snapshot of {previous.run_date} has no views to carry over")
    old_views, old_nodes, old_edges = previous.views, previous.nodes, previous.edges
    if redo_ids is None:
        redo_ids = anchors_to_recompute(old_nodes, old_edges, nodes, edges, config)
    redo = nodes.join(redo_ids, "entity_id").select(F.col("node_idx").alias("anchor_idx"))
    fresh = build_views(nodes, edges, run_date, config, anchors=redo)
    keep = old_views.join(redo_ids.withColumnRenamed("entity_id", "anchor_id"), "anchor_id", "left_anti").join(
        nodes.select(F.col("entity_id").alias("anchor_id")), "anchor_id"
    )
    # Re-map node indices old -> entity id -> new through the entity ids.
    old_map = old_nodes.select(F.col("node_idx").alias("old_idx"), "entity_id")
    new_map = nodes.select("entity_id", F.col("node_idx").alias("new_idx"))
    exploded = keep.select("anchor_id", "view", F.posexplode("nodes").alias("pos", "old_idx"))
    remapped = exploded.join(old_map, "old_idx").join(new_map, "entity_id").groupBy("anchor_id", "view").agg(
        F.sort_array(F.collect_list(F.struct("pos", "new_idx"))).alias("_m")
    ).select("anchor_id", "view", F.transform("_m", lambda m: m["new_idx"]).alias("nodes"))
    carried = keep.drop("nodes", "anchor_idx", "run_date").join(remapped, ["anchor_id", "view"]).select(
        F.element_at("nodes", 1).alias("anchor_idx"), "anchor_id", "view", "nodes", "node_types", "dist",
        "edge_types", "truncated", F.lit(run_date).alias("run_date"),
    )
    return fresh.unionByName(carried).select(*VIEW_COLUMNS)
