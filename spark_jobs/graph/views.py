"""Sampled neighbourhood views of every anchor, with their shortest-path and edge-type structure.

Each anchor gets a *broad* view (teacher) and a *narrow* view (student), the two "crops" of DINO-style
self-distillation (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021),
drawn as hop-by-hop weight-biased neighbour samples in the spirit of GraphSAGE (Hamilton et al., NeurIPS
2017). At each hop every frontier node keeps its ``fanout`` neighbours with the smallest
Efraimidis-Spirakis key ``-ln(u) / w`` (Efraimidis & Spirakis, "Weighted random sampling with a
reservoir", IPL 2006): a weighted sample without replacement. ``u`` is a hash of
``(seed, view, anchor, hop, neighbour)`` over *entity ids*, so a sample depends neither on partitioning
nor on the node index of a run, and scaling every weight by the same factor (one more day of decay)
leaves it unchanged. Everything is Spark joins and windows, hop by hop; nothing is collected. Each hop's
sample is materialised with ``localCheckpoint`` (executor storage, no driver collect) to cut the plan.

Hubs are capped twice: a node offers at most ``hub_cap`` candidate neighbours (its own seeded weighted
sample, drawn once per node), and a view holds at most ``max_view_nodes`` nodes. Views where either cap,
or a fan-out, dropped a candidate are marked ``truncated``.

Structure (distances truncated at ``max_dist``, edge types) is computed per view on the subgraph induced
by the view's nodes. The induced edges are found by joining view members with the edge list *oriented from
the lower-degree endpoint* (degree ordering, as in triangle listing, Chiba & Nishizeki 1985): each
undirected pair is looked up once, from the endpoint with fewer neighbours, so a hub in thousands of views
costs little. The small per-view BFS runs in numpy inside ``mapInPandas`` over one row per view.

Nightly increments (what is recomputed and why). A view depends on (a) the weights of the edges of every
node it samples from, i.e. nodes within ``hops - 1`` of the anchor, and (b) which edges join its own nodes,
i.e. nodes within ``hops`` of the anchor. Efraimidis-Spirakis samples do not change when all of a node's
weights are multiplied by the same factor, and one more day of exponential decay does exactly that to a
node whose edges are all activity edges. So :func:`affected_anchors` takes as seeds the nodes whose
out-edges changed *other than by one common factor* (an edge added or removed, or unequal weight ratios,
which includes nodes that mix decayed activity edges with undecayed catalog edges), and marks every node
within ``hops`` hops of a seed (in the old or the new graph). Only those anchors, plus new entities, are
sampled again by :func:`update_views`; every other view is carried over with its node indices re-mapped
to the new run's index through the entity ids, and equals what a full recompute would produce (tested).
How much this saves depends on the graph: ads linked to campaigns by catalog edges are seeds every
night, so in a catalog-heavy graph most anchors near an ad are recomputed anyway.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from hir_pipeline.contracts import VIEW_BROAD, VIEW_NARROW
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.structure import view_structure

#: Column order of the ``graph_views`` table (contracts.py, "Graph tables").
VIEW_COLUMNS = ("anchor_idx", "anchor_id", "view", "nodes", "node_types", "dist", "edge_types", "truncated",
                "run_date")
_STRUCT_SCHEMA = (
    "view string, anchor_idx long, nodes array<long>, node_types array<tinyint>, truncated boolean, "
    "dist binary, edge_types binary"
)


def _unit(*cols: Column) -> Column:
    """A uniform number in (0, 1) from a 64-bit hash of ``cols`` (53 high bits, centred)."""
    return (F.shiftrightunsigned(F.xxhash64(*cols), 11).cast("double") + 0.5) / float(2**53)


def _node_hashes(nodes: DataFrame) -> DataFrame:
    return nodes.select("node_idx", F.xxhash64("entity_id").alias("nh"))


def sampling_adjacency(nodes: DataFrame, edges: DataFrame, config: GraphConfig) -> DataFrame:
    """Candidate neighbours of every node: at most ``hub_cap``, chosen by a seeded weighted sample.

    Multi-edges between a pair are merged (weights add up); self-loops are dropped (a node never samples
    itself).

    Returns:
        ``src_idx, dst_idx, dst_h (hash of the neighbour's entity id), w, capped (src had more than
        hub_cap neighbours)``.
    """
    pairs = edges.where(F.col("src_idx") != F.col("dst_idx")).groupBy("src_idx", "dst_idx").agg(
        F.sum("weight").alias("w")
    )
    h = _node_hashes(nodes)
    pairs = pairs.join(h.select(F.col("node_idx").alias("src_idx"), F.col("nh").alias("src_h")), "src_idx").join(
        h.select(F.col("node_idx").alias("dst_idx"), F.col("nh").alias("dst_h")), "dst_idx"
    )
    key = -F.log(_unit(F.lit(config.seed), F.lit("pool"), "src_h", "dst_h")) / F.col("w")
    by_src = Window.partitionBy("src_idx")
    pairs = pairs.withColumn("_key", key).withColumns({
        "_rn": F.row_number().over(by_src.orderBy("_key", "dst_idx")),
        "_deg": F.count(F.lit(1)).over(by_src),
    })
    return pairs.where(F.col("_rn") <= config.hub_cap).select(
        "src_idx", "dst_idx", "dst_h", "w", (F.col("_deg") > config.hub_cap).alias("capped")
    )


def _sample(anchors: DataFrame, adj: DataFrame, view: str, fanout: tuple[int, ...], seed: int) -> DataFrame:
    """Hop-by-hop weighted sampling for one view.

    Args:
        anchors: ``anchor_idx, anchor_h``.
        adj: :func:`sampling_adjacency`.
        view: view name, part of the hash so the two views are independent samples.
        fanout: neighbours kept per frontier node at each hop.
        seed: sampling seed.

    Returns:
        ``view, anchor_idx, node_idx, hop, key, trunc`` with the anchor itself at hop 0, key 0.
    """
    members = anchors.select(
        "anchor_idx", F.col("anchor_idx").alias("node_idx"), F.lit(0).alias("hop"), F.lit(0.0).alias("key"),
        F.lit(False).alias("trunc"),
    )
    frontier = anchors.select("anchor_idx", "anchor_h", F.col("anchor_idx").alias("node_idx"))
    visited = members.select("anchor_idx", "node_idx")
    for hop, k in enumerate(fanout, start=1):
        cand = frontier.join(adj, frontier["node_idx"] == adj["src_idx"]).select(
            "anchor_idx", "anchor_h", F.col("src_idx").alias("parent"), F.col("dst_idx").alias("node_idx"),
            "dst_h", "w", "capped",
        )
        if hop == 1:
            cand = cand.where(F.col("node_idx") != F.col("anchor_idx"))
        else:  # never sample back into the view: a wasted slot, and the node's hop would be ambiguous
            cand = cand.join(visited, ["anchor_idx", "node_idx"], "left_anti")
        key = -F.log(_unit(F.lit(seed), F.lit(view), "anchor_h", F.lit(hop), "dst_h")) / F.col("w")
        group = Window.partitionBy("anchor_idx", "parent")
        cand = cand.withColumn("key", key).withColumns({
            "_rn": F.row_number().over(group.orderBy("key", "node_idx")),
            "_n": F.count(F.lit(1)).over(group),
        })
        chosen = cand.where(F.col("_rn") <= k).withColumn("trunc", (F.col("_n") > k) | F.col("capped"))
        # A node reached from several parents is kept once, with its smallest key; the truncation flags
        # of the dropped copies move onto the kept one.
        same = Window.partitionBy("anchor_idx", "node_idx")
        chosen = chosen.withColumns({
            "_first": F.row_number().over(same.orderBy("key", "parent")),
            "trunc": F.max("trunc").over(same),
        }).where(F.col("_first") == 1)
        # Materialised once per hop: members, frontier and visited all read it, and without a cut the plan of
        # hop h nests hop h-1 three times (plan size and recomputation grow exponentially with hops).
        new = chosen.select(
            "anchor_idx", "anchor_h", "node_idx", F.lit(hop).alias("hop"), "key", "trunc"
        ).localCheckpoint()
        members = members.unionByName(new.drop("anchor_h"))
        frontier = new.select("anchor_idx", "anchor_h", "node_idx")
        visited = visited.unionByName(new.select("anchor_idx", "node_idx"))
    return members.withColumn("view", F.lit(view))


def oriented_pairs(nodes: DataFrame, edges: DataFrame) -> DataFrame:
    """Each undirected connected pair once, oriented from the endpoint of lower (degree, node_idx).

    Returns:
        ``o_src, o_dst, t_fwd, t_bwd``: the highest edge type id ``o_src -> o_dst`` and back (0 if absent).
    """
    s, d = F.col("src_idx"), F.col("dst_idx")
    und = edges.where(s != d).groupBy(F.least(s, d).alias("lo"), F.greatest(s, d).alias("hi")).agg(
        F.coalesce(F.max(F.when(s < d, F.col("edge_type_id"))), F.lit(0)).alias("t_lohi"),
        F.coalesce(F.max(F.when(s > d, F.col("edge_type_id"))), F.lit(0)).alias("t_hilo"),
    )
    deg = nodes.select("node_idx", "degree")
    und = und.join(deg.toDF("lo", "deg_lo"), "lo").join(deg.toDF("hi", "deg_hi"), "hi")
    lo_first = (F.col("deg_lo") < F.col("deg_hi")) | (F.col("deg_lo") == F.col("deg_hi"))  # ties: lo < hi
    return und.select(
        F.when(lo_first, F.col("lo")).otherwise(F.col("hi")).alias("o_src"),
        F.when(lo_first, F.col("hi")).otherwise(F.col("lo")).alias("o_dst"),
        F.when(lo_first, F.col("t_lohi")).otherwise(F.col("t_hilo")).alias("t_fwd"),
        F.when(lo_first, F.col("t_hilo")).otherwise(F.col("t_lohi")).alias("t_bwd"),
    )


def _structure_batches(batches, max_dist: int):
    """``mapInPandas`` body: one view per row -> ``dist`` and ``edge_types`` bytes."""
    for pdf in batches:
        dist, types = [], []
        for n, p1, p2, tf, tb in zip(pdf["n"], pdf["e_src"], pdf["e_dst"], pdf["e_fwd"], pdf["e_bwd"], strict=True):
            if p1 is None:
                p1 = p2 = tf = tb = np.zeros(0, dtype=np.int64)
            d, t = view_structure(int(n), p1, p2, tf, tb, max_dist)
            dist.append(d.tobytes())
            types.append(t.tobytes())
        yield pd.DataFrame({
            "view": pdf["view"], "anchor_idx": pdf["anchor_idx"], "nodes": pdf["nodes"],
            "node_types": pdf["node_types"], "truncated": pdf["truncated"], "dist": dist, "edge_types": types,
        })


def sample_views(
    nodes: DataFrame, edges: DataFrame, config: GraphConfig, anchors: DataFrame | None = None
) -> DataFrame:
    """Sampled view members, capped and ordered: ``view, anchor_idx, node_idx, pos, trunc``.

    ``pos`` is the node's position in the view: the anchor is 0, then nodes by (hop, key, node_idx).
    """
    if anchors is None:
        anchors = nodes.select(F.col("node_idx").alias("anchor_idx"))
    elif "anchor_idx" not in anchors.columns:
        anchors = anchors.select(F.col("node_idx").alias("anchor_idx"))
    anchors = anchors.select("anchor_idx").distinct().join(
        _node_hashes(nodes).toDF("anchor_idx", "anchor_h"), "anchor_idx"
    )
    adj = sampling_adjacency(nodes, edges, config).localCheckpoint()
    views = config.views()
    members = None
    for name in (VIEW_BROAD, VIEW_NARROW):
        part = _sample(anchors, adj, name, views[name], config.seed)
        members = part if members is None else members.unionByName(part)
    view = Window.partitionBy("view", "anchor_idx")
    members = members.withColumns({
        "pos": F.row_number().over(view.orderBy("hop", "key", "node_idx")) - 1,
        "_size": F.count(F.lit(1)).over(view),
    })
    return members.where(F.col("pos") < config.max_view_nodes).select(
        "view", "anchor_idx", "node_idx", F.col("pos").cast("int").alias("pos"),
        (F.col("trunc") | (F.col("_size") > config.max_view_nodes)).alias("trunc"),
    )


def build_views(
    nodes: DataFrame,
    edges: DataFrame,
    run_date: dt.date,
    config: GraphConfig | None = None,
    anchors: DataFrame | None = None,
) -> DataFrame:
    """Build the ``graph_views`` table: a broad and a narrow view of every anchor, with their structure.

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
    members = sample_views(nodes, edges, config, anchors).localCheckpoint()
    types = nodes.select("node_idx", F.col("node_type").cast("tinyint").alias("node_type"))
    per_view = members.join(types, "node_idx").groupBy("view", "anchor_idx").agg(
        F.sort_array(F.collect_list(F.struct("pos", "node_idx", "node_type"))).alias("_m"),
        F.max("trunc").alias("truncated"),
    ).select(
        "view", "anchor_idx", "truncated", F.size("_m").alias("n"),
        F.transform("_m", lambda m: m["node_idx"]).alias("nodes"),
        F.transform("_m", lambda m: m["node_type"]).alias("node_types"),
    )
    pairs = oriented_pairs(nodes, edges)
    m1 = members.select("view", "anchor_idx", F.col("node_idx").alias("o_src"), F.col("pos").alias("p1"))
    m2 = members.select("view", "anchor_idx", F.col("node_idx").alias("o_dst"), F.col("pos").alias("p2"))
    induced = m1.join(pairs, "o_src").join(m2, ["view", "anchor_idx", "o_dst"]).groupBy("view", "anchor_idx").agg(
        F.collect_list(F.struct("p1", "p2", "t_fwd", "t_bwd")).alias("_e")
    ).select(
        "view", "anchor_idx",
        F.transform("_e", lambda e: e["p1"]).alias("e_src"),
        F.transform("_e", lambda e: e["p2"]).alias("e_dst"),
        F.transform("_e", lambda e: e["t_fwd"]).alias("e_fwd"),
        F.transform("_e", lambda e: e["t_bwd"]).alias("e_bwd"),
    )
    max_dist = config.max_dist
    structured = per_view.join(induced, ["view", "anchor_idx"], "left").mapInPandas(
        lambda it: _structure_batches(it, max_dist), _STRUCT_SCHEMA
    )
    ids = nodes.select(F.col("node_idx").alias("anchor_idx"), F.col("entity_id").alias("anchor_id"))
    return structured.join(ids, "anchor_idx").select(
        "anchor_idx", "anchor_id", "view", "nodes", "node_types", "dist", "edge_types", "truncated",
        F.lit(run_date).alias("run_date"),
    )


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


def update_views(
    old_views: DataFrame,
    old_nodes: DataFrame,
    old_edges: DataFrame,
    nodes: DataFrame,
    edges: DataFrame,
    old_run_date: dt.date,
    run_date: dt.date,
    config: GraphConfig | None = None,
    redo_ids: DataFrame | None = None,
) -> DataFrame:
    """Nightly increment of ``graph_views``: recompute affected and new anchors, carry the others over.

    Args:
        old_views, old_nodes, old_edges: the previous run's graph tables.
        nodes, edges: this run's graph tables.
        old_run_date: the previous run's date (kept for the record; decay needs no correction, see
            :func:`affected_anchors`).
        run_date: this run's date.
        config: the same :class:`GraphConfig` as the previous run (same seed, fan-outs, half life).
        redo_ids: :func:`anchors_to_recompute` of these tables when the caller already has it (e.g. to count
            it); computed here when ``None``.

    Returns:
        The full ``graph_views`` table of this run, equal to :func:`build_views` on ``nodes, edges``.
    """
    config = config or GraphConfig()
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
