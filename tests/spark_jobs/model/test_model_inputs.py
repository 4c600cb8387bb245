"""spark_jobs.model.inputs: graph Delta frames -> ModelInputs, checked value by value against the Spark rows."""

from __future__ import annotations

import datetime as dt
import re

import numpy as np
import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import DEFAULT_FUNNEL, ENTITY_TYPES, EVENT_DATE_COLUMN, source_ddl
from hir_pipeline.model.batch import pack_views
from spark_jobs.content_embeddings import CONTENT_EMBEDDINGS_DDL
from spark_jobs.graph import GraphConfig, GraphSnapshot, build_edges, build_nodes, build_views
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN
from spark_jobs.model.inputs import collect_activity, default_engagement_weights, load_model_inputs

RUN = dt.date(2024, 4, 30)
CFG = GraphConfig(broad_fanout=(4, 2), narrow_fanout=(3,), max_view_nodes=8, max_dist=3, seed=3)
DIM = 5


def _ts(days_ago: int) -> dt.datetime:
    day = RUN - dt.timedelta(days=days_ago)
    return dt.datetime(day.year, day.month, day.day, 12)


@pytest.fixture(scope="module")
def graph(spark):
    ents = [(f"u{i}", "user") for i in range(4)] + [(f"p{i}", "product") for i in range(4)]
    ents += [("cat0", "category"), ("ad0", "ad"), ("u_cold", "user"), ("p_cold", "product")]
    entities = spark.createDataFrame([(i, t, *[None] * 6) for i, t in ents], source_ddl("entities"))
    relations = spark.createDataFrame(
        [(f"p{i}", "cat0", "product_in_category", None) for i in range(4)]
        + [("ad0", "p0", "ad_promotes_product", 1.0)],
        source_ddl("relations"),
    )
    ev = [("u0", "p0", "impression", 1), ("u0", "p0", "click", 1), ("u0", "p0", "conversion", 0),  # deepest: conv
          ("u1", "p1", "add_to_cart", 2), ("u1", "p2", "impression", 0),  # impression only: not engagement
          ("u2", "p2", "click", 3), ("u3", "ad0", "click", 0), ("u3", "p3", "impression", 5)]
    events = spark.createDataFrame(
        [(f"e{i}", u, e, t, _ts(d), None) for i, (u, e, t, d) in enumerate(ev)], source_ddl("events")
    ).withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts"))
    edges = build_edges(entities, relations, events, RUN, CFG).cache()
    nodes = build_nodes(entities, edges, RUN, CFG).cache()
    views = build_views(nodes, edges, RUN, CFG).cache()
    rng = np.random.default_rng(0)
    content_ids = [i for i, t in ents if t != "user" and i != "p_cold"]  # p_cold: a content type with no row
    vectors = {i: rng.normal(size=DIM).astype(np.float32).tolist() for i in content_ids}
    content = spark.createDataFrame(
        [(i, dict(ents)[i], "h", "m", None, None, None, None, vectors[i], None, None, RUN) for i in content_ids],
        CONTENT_EMBEDDINGS_DDL,
    )
    yield {"edges": edges, "nodes": nodes, "views": views, "content": content, "vectors": vectors}
    for df in (edges, nodes, views):
        df.unpersist()


def _load(g, views=None, content="default", **kw):
    graph = GraphSnapshot(RUN, g["nodes"], g["edges"], g["views"] if views is None else views)
    return load_model_inputs(graph, g["content"] if content == "default" else content, **kw)


def test_nodes_and_content_follow_node_idx(graph):
    inputs = _load(graph)
    rows = sorted(graph["nodes"].collect(), key=lambda r: r.node_idx)
    assert inputs.num_nodes == len(rows) == 12
    assert list(inputs.entity_ids) == [r.entity_id for r in rows]
    assert list(inputs.entity_types) == [r.entity_type for r in rows]
    assert inputs.node_type.tolist() == [ENTITY_TYPES.index(r.entity_type) for r in rows]
    assert inputs.degree_bucket.tolist() == [r.degree_bucket for r in rows]
    assert inputs.has_history.tolist() == [r.has_history for r in rows]
    assert inputs.content.shape == (12, DIM) and inputs.content.dtype == np.float32
    for i, eid in enumerate(inputs.entity_ids):
        if eid in graph["vectors"]:
            assert inputs.has_content[i]
            np.testing.assert_array_equal(inputs.content[i], np.asarray(graph["vectors"][eid], dtype=np.float32))
        else:  # users and the product without a content row
            assert not inputs.has_content[i] and not inputs.content[i].any()
    feats = inputs.features(32)
    assert feats.num_nodes == 12 and feats.content.shape == (12, DIM)
    assert feats.has_content.tolist() == inputs.has_content.tolist()


def test_views_equal_the_spark_rows_and_pack(graph):
    inputs = _load(graph, views=graph["views"].repartition(3))  # several Arrow batches
    by_view = {(r.view, r.anchor_idx): r for r in graph["views"].collect()}
    assert len(inputs.broad_views) == len(inputs.narrow_views) == 12
    for name, views in (("broad", inputs.broad_views), ("narrow", inputs.narrow_views)):
        for v in views:
            row = by_view[(name, v["anchor_idx"])]
            assert v["nodes"].tolist() == list(row.nodes)
            assert v["node_types"].tolist() == list(row.node_types)
            assert v["dist"].tobytes() == bytes(row.dist)
            assert v["edge_types"].tobytes() == bytes(row.edge_types)
    batch = pack_views(inputs.broad_views, pad_to=16, max_dist=CFG.max_dist)
    assert batch.num_views == 12 and int(batch.token_mask.sum()) == sum(len(v["nodes"]) for v in inputs.broad_views)
    assert inputs.max_edge_type == max(max(bytes(r.edge_types), default=0) for r in by_view.values()) > 0


def test_engagement_pairs_are_funnel_weighted(graph):
    inputs = _load(graph)
    idx = {e: i for i, e in enumerate(inputs.entity_ids)}
    users, items, weights = inputs.engagement
    got = {(inputs.entity_ids[u], inputs.entity_ids[i]): float(w) for u, i, w in zip(users, items, weights,
                                                                                      strict=True)}
    # default weights, aligned with deep-funnel targets: impression 0 (seen, not engaged), click 1, then geometric
    # up to conversion 10
    assert default_engagement_weights(DEFAULT_FUNNEL) == pytest.approx((0.0, 1.0, 10 ** 0.5, 10.0))
    assert got == pytest.approx({("u0", "p0"): 10.0, ("u1", "p1"): 10 ** 0.5, ("u2", "p2"): 1.0, ("u3", "ad0"): 1.0})
    assert list(zip(users, items, strict=True)) == sorted(zip(users, items, strict=True))
    # the impression-only pairs are kept apart, for cross-entity distillation only
    seen_users, seen_items = inputs.seen_pairs
    assert sorted((inputs.entity_ids[u], inputs.entity_ids[i]) for u, i in zip(seen_users, seen_items, strict=True)
                  ) == [("u1", "p2"), ("u3", "p3")]
    assert inputs.summary()["num_seen_pairs"] == 2
    custom = _load(graph, engagement_weights=(0.5, 1.0, 3.0, 10.0)).engagement
    assert dict(zip(zip(custom[0], custom[1], strict=True), custom[2].tolist(), strict=True))[
        (idx["u3"], idx["p3"])] == 0.5
    with pytest.raises(ValueError, match="engagement weights"):
        _load(graph, engagement_weights=(1.0, 2.0))


def test_recency_ranks_follow_each_users_latest_engaged_items(spark, graph):
    ents = [("u0", "user"), ("u1", "user")] + [(f"p{i}", "product") for i in range(4)]
    entities = spark.createDataFrame([(i, t, *[None] * 6) for i, t in ents], source_ddl("entities"))
    relations = spark.createDataFrame([("p0", "p1", "similar", None)], source_ddl("relations"))
    ev = [("u0", "p0", "click", 5), ("u0", "p1", "conversion", 1), ("u0", "p2", "click", 1),  # p1, p2: same time
          ("u0", "p3", "impression", 0),  # the latest, but only seen: not among the engaged pairs
          ("u1", "p0", "add_to_cart", 3), ("u1", "p0", "impression", 0), ("u1", "p2", "click", 2)]
    events = spark.createDataFrame(
        [(f"e{i}", u, e, t, _ts(d), None) for i, (u, e, t, d) in enumerate(ev)], source_ddl("events")
    ).withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts"))
    edges = build_edges(entities, relations, events, RUN, CFG)
    weights = default_engagement_weights(DEFAULT_FUNNEL)
    (users, items, _), _, recency = collect_activity(edges, DEFAULT_FUNNEL, weights)
    ids = {r.src_idx: r.src_id for r in edges.select("src_idx", "src_id").distinct().collect()}
    got = {(ids[u], ids[i]): int(r) for u, i, r in zip(users, items, recency, strict=True)}
    # u1's add_to_cart on p0 has a later impression: the pair's latest event counts, whatever its stage
    assert got == {("u0", "p1"): 0, ("u0", "p2"): 0, ("u0", "p0"): 2, ("u1", "p0"): 0, ("u1", "p2"): 1}
    # a graph_edges snapshot written before the column existed: no ranks, no recency weighting
    assert collect_activity(edges.drop("last_event_ts"), DEFAULT_FUNNEL, weights)[2] is None
    inputs = _load(graph)
    assert inputs.engagement_recency is not None and len(inputs.engagement_recency) == len(inputs.engagement[0])


def test_fingerprint_and_no_content(graph):
    a, b = _load(graph), _load(graph, views=graph["views"].repartition(2))
    assert a.fingerprint() == b.fingerprint()
    bare = _load(graph, content=None)
    assert bare.content.shape == (12, 0) and not bare.has_content.any()
    assert bare.fingerprint() != a.fingerprint()
    assert a.summary()["nodes_with_content"] == len(graph["vectors"]) and a.summary()["num_engagement_pairs"] == 4


def test_inconsistent_tables_are_refused(graph):
    with pytest.raises(ValueError, match="node_idx"):  # views of a bigger graph
        _load(graph, views=graph["views"].withColumn("nodes", F.transform("nodes", lambda x: x + 100))
              .withColumn("anchor_idx", F.col("anchor_idx") + 100))
    with pytest.raises(ValueError, match="more than one row"):
        _load(graph, content=graph["content"].unionByName(graph["content"]))
    with pytest.raises(ValueError, match="dense"):
        _load(graph.copy() | {"nodes": graph["nodes"].unionByName(graph["nodes"])})


def test_each_collected_part_is_reported_to_progress(graph):
    lines: list[str] = []
    inputs = _load(graph, progress=lines.append)
    assert [line.split(" in ")[0] for line in lines] == [
        "collected 12 nodes", f"collected structure embeddings of 10 nodes (dim {GraphConfig().structure_dim})",
        "collected 12 broad and 12 narrow views",
        f"collected content vectors of {len(graph['vectors'])} nodes (dim {DIM})",
        "collected 4 engagement pairs and 2 seen-only pairs"]
    assert all(re.search(r" in \d+\.\ds$", line) for line in lines), lines
    assert inputs.num_nodes == 12


def test_structure_embedding_follows_node_idx(graph):
    inputs = _load(graph)
    rows = sorted(graph["nodes"].collect(), key=lambda r: r.node_idx)
    assert inputs.structure.shape == (12, CFG.structure_dim) and inputs.structure.dtype == np.float32
    for i, row in enumerate(rows):
        if row[STRUCTURE_COLUMN] is None:  # no edge: a zero row
            assert row.degree == 0 and not inputs.structure[i].any()
        else:
            np.testing.assert_array_equal(inputs.structure[i], np.asarray(row[STRUCTURE_COLUMN], dtype=np.float32))
    assert sum(r[STRUCTURE_COLUMN] is None for r in rows) == 2  # u_cold and p_cold
    np.testing.assert_array_equal(inputs.features(32).structure.numpy(), inputs.structure)
    assert inputs.summary()["structure_dim"] == CFG.structure_dim


def test_no_structure_column_or_all_null_means_no_structure(graph):
    old = _load(graph.copy() | {"nodes": graph["nodes"].drop(STRUCTURE_COLUMN)})  # a snapshot written before it
    off = _load(graph.copy() | {"nodes": graph["nodes"].withColumn(STRUCTURE_COLUMN,
                                                                   F.lit(None).cast("array<float>"))})
    for inputs in (old, off):
        assert inputs.structure is None and inputs.structure_dim == 0
        assert inputs.features(32).structure.shape == (12, 0)
    with pytest.raises(ValueError, match="widths"):
        _load(graph.copy() | {"nodes": graph["nodes"].withColumn(STRUCTURE_COLUMN, F.when(
            F.col("node_idx") == 0, F.array(F.lit(1.0).cast("float"))).otherwise(F.col(STRUCTURE_COLUMN)))})
