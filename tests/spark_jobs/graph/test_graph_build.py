"""End-to-end tests of edges, nodes, views and checks on a small crafted source (real local Spark)."""

from __future__ import annotations

import datetime as dt

import networkx as nx
import numpy as np
import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import ENTITY_TYPES, EVENT_DATE_COLUMN, source_ddl
from spark_jobs.graph import GraphConfig, GraphSnapshot, build_edges, build_nodes, build_views, update_views
from spark_jobs.graph import checks as C

RUN = dt.date(2024, 3, 31)
CFG = GraphConfig(broad_fanout=(4, 2), narrow_fanout=(3,), hub_cap=8, max_view_nodes=12, max_dist=3, seed=7)


def _entities(spark, extra=()):
    rows = [(f"u{i}", "user") for i in range(6)] + [(f"a{i:03d}", "ad") for i in range(40)]
    rows += [("c0", "campaign"), ("c1", "campaign"), ("p_iso", "product"), ("hub", "user"), *extra]
    return spark.createDataFrame([(i, t, *[None] * 6) for i, t in rows], source_ddl("entities"))


def _relations(spark):
    rows = [("a000", "c0", "ad_of_campaign", None), ("a001", "c0", "ad_of_campaign", 2.0),
            ("a002", "c1", "ad_of_campaign", 1.0),
            ("c1", "c1", "self_ref", 1.0),  # self-loop
            ("a001", "c0", "ad_alt", 1.0)]  # second edge type on the same pair (multi-edge)
    return spark.createDataFrame(rows, source_ddl("relations"))


def _events(spark, rows):
    df = spark.createDataFrame(
        [(f"e{i}", u, e, t, ts, None) for i, (u, e, t, ts) in enumerate(rows)], source_ddl("events")
    )
    return df.withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts"))


def _ts(day: dt.date, hour: int = 12) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hour)


def _event_rows():
    d = RUN
    rows = [
        ("u0", "a000", "impression", _ts(d)), ("u0", "a000", "click", _ts(d - dt.timedelta(days=30))),
        ("u0", "a000", "impression", _ts(d + dt.timedelta(days=2))),  # after the run date: ignored
        ("u1", "a001", "add_to_cart", _ts(d)), ("u1", "a001", "impression", _ts(d)),
        ("u1", "a002", "conversion", _ts(d - dt.timedelta(days=60))),
        ("u2", "a002", "click", _ts(d)), ("u2", "a000", "impression", _ts(d)),
        ("u3", "a010", "click", _ts(d)), ("u4", "a010", "impression", _ts(d)),  # separate component
        ("u5", "a020", "click", _ts(d)),
    ]
    # A hub user: 2000 events over 30 ads, as a bot or a very active account would produce.
    rows += [("hub", f"a{10 + i % 30:03d}", "impression", _ts(d - dt.timedelta(days=i % 5))) for i in range(2000)]
    return rows


@pytest.fixture(scope="module")
def graph(spark):
    ents, rels, evs = _entities(spark), _relations(spark), _events(spark, _event_rows())
    edges = build_edges(ents, rels, evs, RUN, CFG).cache()
    nodes = build_nodes(ents, edges, RUN, CFG).cache()
    views = build_views(nodes, edges, RUN, CFG).cache()
    yield {"ents": ents, "rels": rels, "evs": evs, "edges": edges, "nodes": nodes, "views": views}
    for df in (edges, nodes, views):
        df.unpersist()


def _edge(edges, src, dst):
    return {r.edge_type: r for r in edges.where((F.col("src_id") == src) & (F.col("dst_id") == dst)).collect()}


@pytest.mark.slow
def test_edges_typed_by_deepest_stage_decayed_to_run_date(graph):
    edges = graph["edges"]
    (e,) = _edge(edges, "u0", "a000").values()
    # click 30 days ago (1.0 * 2^-1) + impression today (0.1); the impression after the run date is ignored.
    assert e.edge_type == "click" and e.n_events == 2
    assert e.weight == pytest.approx(0.5 + 0.1)
    assert _edge(edges, "u1", "a001")["add_to_cart"].weight == pytest.approx(3.0 + 0.1)
    assert _edge(edges, "u1", "a002")["conversion"].weight == pytest.approx(10.0 * 0.25)
    assert e.run_date == RUN
    # the latest event up to the run date (not the one after it), whatever its stage
    assert e.last_event_ts == _ts(RUN)
    assert _edge(edges, "u1", "a002")["conversion"].last_event_ts == _ts(RUN - dt.timedelta(days=60))


@pytest.mark.slow
def test_reverse_edges_and_type_ids(graph):
    edges = graph["edges"]
    fwd = _edge(edges, "u0", "a000")["click"]
    rev = _edge(edges, "a000", "u0")["rev_click"]
    assert rev.weight == fwd.weight and rev.edge_type_id == fwd.edge_type_id + 1
    assert rev.last_event_ts == fwd.last_event_ts is not None
    assert (rev.src_idx, rev.dst_idx) == (fwd.dst_idx, fwd.src_idx)
    # vocabulary: funnel (1..8) then sorted relations: ad_alt 9/10, ad_of_campaign 11/12, self_ref 13/14
    multi = _edge(edges, "a001", "c0")
    assert {k: v.edge_type_id for k, v in multi.items()} == {"ad_alt": 9, "ad_of_campaign": 11}
    assert all(v.last_event_ts is None for v in multi.values())  # catalog edges have no events
    assert edges.count() == 2 * edges.where(~F.col("edge_type").startswith("rev_")).count()


@pytest.mark.slow
def test_rerunning_an_old_date_gives_the_same_edges(spark, graph):
    later = _event_rows() + [("u5", "a021", "conversion", _ts(RUN + dt.timedelta(days=5)))]
    again = build_edges(graph["ents"], graph["rels"], _events(spark, later), RUN, CFG)
    cols = ["src_idx", "dst_idx", "edge_type", "weight", "n_events"]
    assert sorted(again.select(cols).collect()) == sorted(graph["edges"].select(cols).collect())


@pytest.mark.slow
def test_lookback_window_drops_old_events(spark, graph):
    cfg = GraphConfig(lookback_days=10)
    edges = build_edges(graph["ents"], graph["rels"], graph["evs"], RUN, cfg)
    (e,) = _edge(edges, "u0", "a000").values()
    assert e.edge_type == "impression" and e.n_events == 1
    assert not _edge(edges, "u1", "a002")


@pytest.mark.slow
def test_nodes_dense_sorted_index_and_degrees(graph):
    nodes = {r.entity_id: r for r in graph["nodes"].collect()}
    ids = sorted(nodes)
    assert [nodes[i].node_idx for i in ids] == list(range(len(ids)))
    iso = nodes["p_iso"]
    assert (iso.degree, iso.has_history, iso.degree_bucket, iso.weighted_degree) == (0, False, 0, 0.0)
    assert iso.node_type == ENTITY_TYPES.index("product")
    hub = nodes["hub"]
    assert hub.degree == 30 and hub.degree_by_type == {"impression": 30} and hub.degree_bucket == 4
    assert nodes["c0"].has_history is False and nodes["c0"].degree == 3  # a000, a001 (x2 types)
    assert max(r.centrality_bucket for r in nodes.values()) == CFG.centrality_buckets - 1


def _decode(row):
    n = len(row.nodes)
    return (np.frombuffer(row.dist, np.int8).reshape(n, n), np.frombuffer(row.edge_types, np.uint8).reshape(n, n))


@pytest.mark.slow
def test_views_structure_matches_networkx_on_induced_subgraph(graph):
    edges = graph["edges"].select("src_idx", "dst_idx", "edge_type_id").collect()
    types: dict[tuple[int, int], int] = {}
    for e in edges:
        if e.src_idx != e.dst_idx:
            types[(e.src_idx, e.dst_idx)] = max(types.get((e.src_idx, e.dst_idx), 0), e.edge_type_id)
    views = graph["views"].collect()
    n_nodes = graph["nodes"].count()
    assert len(views) == 2 * n_nodes
    for row in views:
        dist, et = _decode(row)
        nodes = list(row.nodes)
        assert nodes[0] == row.anchor_idx and len(set(nodes)) == len(nodes) <= CFG.max_view_nodes
        sub = nx.Graph()
        sub.add_nodes_from(nodes)
        sub.add_edges_from((a, b) for a, b in types if a in sub and b in sub)
        lengths = dict(nx.all_pairs_shortest_path_length(sub, cutoff=CFG.max_dist))
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                assert dist[i, j] == lengths[a].get(b, CFG.max_dist + 1)
                assert et[i, j] == (0 if i == j else types.get((a, b), 0))


@pytest.mark.slow
def test_isolated_hub_and_selfloop_views(graph):
    views = {(r.anchor_id, r.view): r for r in graph["views"].collect()}
    iso = views[("p_iso", "broad")]
    assert list(iso.nodes) == [iso.anchor_idx] and iso.dist == b"\x00" and iso.truncated is False
    hub = views[("hub", "broad")]
    assert hub.truncated is True and len(hub.nodes) <= CFG.max_view_nodes
    assert len(views[("hub", "narrow")].nodes) == 1 + CFG.narrow_fanout[0]
    c1 = views[("c1", "broad")]
    assert c1.anchor_idx not in list(c1.nodes)[1:]  # the self-loop is never sampled
    u5 = views[("u5", "broad")]  # u5 -> a020 -> hub: nothing capped on that path
    assert u5.truncated is False and list(u5.nodes)[2] == hub.anchor_idx and len(u5.nodes) == 3


@pytest.mark.slow
def test_views_deterministic_and_seeded(graph):
    cols = ["anchor_idx", "view", "nodes", "dist", "edge_types", "truncated"]
    first = sorted(tuple(r) for r in graph["views"].select(cols).collect())
    again = build_views(graph["nodes"], graph["edges"], RUN, CFG).select(cols).collect()
    assert first == sorted(tuple(r) for r in again)
    other = GraphConfig(**{**CFG.__dict__, "seed": 8})
    hub = graph["nodes"].where("entity_id = 'hub'").select(F.col("node_idx").alias("anchor_idx"))
    a = graph["views"].join(hub, "anchor_idx").where("view = 'broad'").first().nodes
    b = build_views(graph["nodes"], graph["edges"], RUN, other, anchors=hub).where("view = 'broad'").first().nodes
    assert a[0] == b[0] and list(a) != list(b)


@pytest.mark.slow
def test_sample_views_members_match_build_views(graph):
    from spark_jobs.graph.views import sample_views

    members: dict[tuple[str, int], list] = {}
    for r in sample_views(graph["nodes"], graph["edges"], CFG).collect():
        members.setdefault((r.view, r.anchor_idx), []).append((r.pos, r.node_idx, r.trunc))
    views = graph["views"].collect()
    assert len(members) == len(views)
    for row in views:
        got = sorted(members[(row.view, row.anchor_idx)])
        assert [p for p, _, _ in got] == list(range(len(got)))
        assert [n for _, n, _ in got] == list(row.nodes) and any(t for *_, t in got) == row.truncated


@pytest.mark.slow
def test_checks_pass_on_good_data_and_fail_on_bad(spark, graph):
    nodes, edges, views = graph["nodes"], graph["edges"], graph["views"]
    results = {
        "no_dangling_edges": C.check_no_dangling_edges(nodes, edges),
        "weights_finite_positive": C.check_weights_finite_positive(edges),
        "anchor_first": C.check_anchor_first(views),
        "distance_matrices": C.check_distance_matrices(views),
    }
    assert all(ok for ok, _ in results.values()), results
    dangling = edges.limit(1).withColumn("dst_idx", F.lit(10_000).cast("long"))
    ok, meta = C.check_no_dangling_edges(nodes, edges.unionByName(dangling))
    assert not ok and meta["dangling_endpoints"] == 1
    for bad_w in (0.0, -1.0, float("nan"), float("inf")):
        ok, _ = C.check_weights_finite_positive(edges.limit(2).withColumn("weight", F.lit(bad_w)))
        assert not ok
    row = spark.createDataFrame(
        [(5, [6, 5], bytes([0, 1, 2, 0])), (5, [5, 6], bytes([0, 1, 1])), (5, [5, 6], bytes([0, 1, 1, 1]))],
        "anchor_idx long, nodes array<long>, dist binary",
    )
    assert not C.check_anchor_first(row)[0]
    ok, meta = C.check_distance_matrices(row)
    assert not ok and meta == {"not_square": 1, "not_symmetric": 1, "nonzero_diagonal": 1}


@pytest.mark.slow
def test_nightly_increment_equals_full_recompute(spark, graph):
    day = RUN + dt.timedelta(days=1)
    ents = _entities(spark, extra=[("u_new", "user")])
    rows = _event_rows() + [("u3", "a011", "conversion", _ts(day)), ("u_new", "a005", "click", _ts(day))]
    evs = _events(spark, rows)
    edges = build_edges(ents, graph["rels"], evs, day, CFG).cache()
    nodes = build_nodes(ents, edges, day, CFG).cache()
    inc = update_views(GraphSnapshot(RUN, graph["nodes"], graph["edges"], graph["views"]), nodes, edges, day, CFG)
    full = build_views(nodes, edges, day, CFG)
    cols = ["anchor_idx", "anchor_id", "view", "nodes", "node_types", "dist", "edge_types", "truncated", "run_date"]
    assert sorted(tuple(r) for r in inc.select(cols).collect()) == sorted(tuple(r) for r in full.select(cols).collect())
    # Seeds: u3 and a011 (new edge), a000/a001/a002/c0/c1 (decayed activity next to undecayed catalog
    # edges). u5 is 3 hops from a011 and its path only decays uniformly: carried over.
    from spark_jobs.graph.views import affected_anchors

    affected = {r.entity_id for r in affected_anchors(graph["edges"], edges, 2).collect()}
    assert {"u3", "a011", "hub", "a020", "u0", "c1"} <= affected
    assert "u_new" in affected and not affected & {"u5", "p_iso"}


def test_a_very_old_event_keeps_a_positive_weight(spark):
    from spark_jobs.graph.edges import activity_edges

    old = _events(spark, [("u0", "a000", "click", _ts(RUN - dt.timedelta(days=40_000)))])
    (edge,) = activity_edges(old, RUN, GraphConfig(half_life_days=1.0)).collect()
    assert 0 < edge.weight < 1e-300  # 2 ** -40000 underflows to 0.0 without the floor
