"""Real ``materialize`` of the graph assets over the bronze tables of the tiny synthetic source (slow), and the rule
that decides when the views may be carried over from the previous date (fast)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
from pyspark.sql import functions as F

from assets.graph import (
    CHECK_ANCHOR,
    CHECK_DANGLING,
    CHECK_DISTANCES,
    CHECK_WEIGHTS,
    graph_edges,
    graph_nodes,
    graph_views,
)
from hir_pipeline.contracts import EVENT_DATE_COLUMN
from resources import GraphSettingsResource
from spark_jobs.delta_io import latest_version, read_run_date, read_table
from spark_jobs.graph import GraphConfig
from spark_jobs.graph.snapshots import increment_blocker, views_fingerprint
from tests.assets.conftest import RUN_DATE, SMALL_STRUCTURE, make_resources

GRAPH_ASSETS = [graph_edges, graph_nodes, graph_views]
GRAPH_TABLES = ("graph_edges", "graph_nodes", "graph_views")
NEXT_DATE = (dt.date.fromisoformat(RUN_DATE) + dt.timedelta(days=1)).isoformat()
#: Small fan-outs keep the views job quick on 2 cores; every code path is the same as with the defaults. The half
#: life is so long that one more day of decay is the same factor on every edge: with the default half life every
#: node that mixes decayed activity edges with undecayed catalog edges is re-sampled every night (see
#: spark_jobs.graph.views), which in this catalog-heavy synthetic graph is nearly every anchor, so the increment
#: would recompute almost everything and prove little.
GRAPH_CONFIG = {"broad_fanout": [6, 3], "narrow_fanout": [4], "max_view_nodes": 24, "hub_cap": 12, "seed": 3,
                "half_life_days": 1e12, **SMALL_STRUCTURE}
GRAPH_SETTINGS = GraphSettingsResource(**GRAPH_CONFIG)


def run_config(assets, incremental: bool = True) -> dg.RunConfig:
    """Run behaviour only (the graph settings are the ``graph_settings`` resource)."""
    names = {a.key.path[-1] for a in assets}
    return dg.RunConfig(ops={"graph_views": {"config": {"incremental": incremental}}} if "graph_views" in names else {})


def copy_lake(resources: dict, spark, dest: Path) -> dict:
    """A private copy of a lake (Delta logs hold relative paths), so tests never change a shared one."""
    shutil.copytree(resources["lake"].root, dest)
    return make_resources(spark, dest, resources["source"].location, dest.parent / "mlflow", graph=GRAPH_SETTINGS)


def materialize(resources: dict, partition: str, assets=GRAPH_ASSETS, instance: dg.DagsterInstance | None = None,
                **run) -> dg.ExecuteInProcessResult:
    return dg.materialize(assets, partition_key=partition, resources=resources, instance=instance,
                          run_config=run_config(assets, **run), raise_on_error=False)


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key.path[-1] == asset]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def snapshot(spark, resources: dict, table: str, day: str):
    return read_table(spark, resources["lake"].path(table)).where(F.col("run_date") == F.lit(day))


def view_rows(spark, resources: dict, day: str) -> list[tuple]:
    cols = ["anchor_id", "view", "nodes", "node_types", "dist", "edge_types", "truncated"]
    rows = snapshot(spark, resources, "graph_views", day).select(*cols).collect()
    return sorted((r[0], r[1], tuple(r[2]), tuple(r[3]), bytes(r[4]), bytes(r[5]), r[6]) for r in rows)


def test_views_fingerprint_follows_the_view_settings_only():
    base = GraphConfig()
    assert views_fingerprint(GraphConfig()) == views_fingerprint(base)
    for change in ({"broad_fanout": (8, 4)}, {"narrow_fanout": (4,)}, {"max_dist": 3}, {"max_view_nodes": 64},
                   {"hub_cap": 16}, {"seed": 1}):
        assert views_fingerprint(dataclasses.replace(base, **change)) != views_fingerprint(base), change
    # edge-level settings reach the views through the edges, which the increment diffs itself
    for change in ({"half_life_days": 7.0}, {"lookback_days": 30}, {"stage_weights": (1.0, 1.0, 1.0, 1.0)}):
        assert views_fingerprint(dataclasses.replace(base, **change)) == views_fingerprint(base), change


@pytest.fixture(scope="module")
def built(ingested_lake, spark, tmp_path_factory) -> SimpleNamespace:
    """The ingested lake, copied, with the graph of RUN_DATE built once (full build: no earlier snapshot)."""
    resources = copy_lake(ingested_lake, spark, tmp_path_factory.mktemp("graph") / "lake")
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(resources, RUN_DATE, instance=instance)
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    return SimpleNamespace(resources=resources, result=result, logs=logs)


@pytest.fixture(scope="module")
def lake(built) -> dict:
    assert built.result.success
    return built.resources


@pytest.mark.slow
def test_full_build_writes_tables_and_checks_pass(spark, lake, built):
    result = built.result
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {CHECK_WEIGHTS: True, CHECK_DANGLING: True, CHECK_ANCHOR: True, CHECK_DISTANCES: True}
    counts = {t: snapshot(spark, lake, t, RUN_DATE).count() for t in GRAPH_TABLES}
    entities = read_table(spark, lake["lake"].path("entities")).count()
    assert counts["graph_nodes"] == entities
    assert counts["graph_views"] == 2 * entities  # a broad and a narrow view of every node
    assert counts["graph_edges"] > 0
    for table in GRAPH_TABLES:
        meta = metadata(result, table)
        assert meta["dagster/row_count"] == counts[table]
        assert meta["delta_version"] == latest_version(spark, lake["lake"].path(table))
        assert meta["run_date"] == RUN_DATE and set(meta["stage_seconds"])
        # the run log says the same: rows written and the Delta version, per table
        said = f"{table}: wrote {counts[table]:,} rows for {RUN_DATE}, Delta version {meta['delta_version']}"
        assert any(m.startswith(said) for m in built.logs), f"no log line {said!r}"
    views = metadata(result, "graph_views")
    assert views["mode"] == "full" and views["recomputed_anchors"] == entities and views["reused_anchors"] == 0
    assert "no earlier snapshot" in views["full_build_reason"]
    # the view settings are the graph_settings resource's (no run config carries them any more)
    assert views["caps"] == {"hub_cap": 12, "max_view_nodes": 24, "broad_fanout": [6, 3], "narrow_fanout": [4]}


def _add_next_day_events(spark, resources: dict, user: str, entity: str) -> None:
    """Append a day of activity (one user, one entity) to the bronze events, as a nightly ingestion would."""
    events = read_table(spark, resources["lake"].path("events"))
    ts = dt.datetime.fromisoformat(NEXT_DATE) + dt.timedelta(hours=9)
    rows = [(f"next-{i}", user, entity, stage, ts, None) for i, stage in enumerate(("impression", "click"))]
    new = spark.createDataFrame(rows, "event_id string, user_id string, entity_id string, event_type string, "
                                      "event_ts timestamp, value double")
    new = new.withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts")).select(*events.columns)
    new.write.format("delta").mode("append").save(resources["lake"].path("events"))


@pytest.fixture(scope="module")
def next_day(lake, spark, tmp_path_factory) -> SimpleNamespace:
    """A copy of the lake with one more day of activity (one user clicks one entity), graph built incrementally."""
    resources = copy_lake(lake, spark, tmp_path_factory.mktemp("next_day") / "lake")
    events = read_table(spark, resources["lake"].path("events"))
    pair = events.where(F.col("event_type") == "click").select("user_id", "entity_id").orderBy("user_id").first()
    _add_next_day_events(spark, resources, pair["user_id"], pair["entity_id"])
    return SimpleNamespace(resources=resources, result=materialize(resources, NEXT_DATE))


@pytest.mark.slow
def test_next_day_recomputes_only_affected_anchors(spark, next_day):
    result, resources = next_day.result, next_day.resources
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    meta = metadata(result, "graph_views")
    assert meta["mode"] == "incremental" and meta["previous_run_date"] == RUN_DATE
    assert meta["recomputed_anchors"] + meta["reused_anchors"] == meta["anchors"]
    assert 0 < meta["recomputed_anchors"] < meta["anchors"] / 2
    assert snapshot(spark, resources, "graph_views", NEXT_DATE).count() == 2 * meta["anchors"]
    assert snapshot(spark, resources, "graph_views", RUN_DATE).count() > 0  # the previous snapshot is kept


@pytest.mark.slow
def test_rerun_of_a_date_replaces_it_and_equals_a_full_build(spark, next_day):
    resources = next_day.resources
    counts = {t: read_table(spark, resources["lake"].path(t)).count() for t in GRAPH_TABLES}
    versions = {t: latest_version(spark, resources["lake"].path(t)) for t in GRAPH_TABLES}
    incremental = view_rows(spark, resources, NEXT_DATE)
    previous_day = view_rows(spark, resources, RUN_DATE)

    result = materialize(resources, NEXT_DATE, incremental=False)
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    assert metadata(result, "graph_views")["mode"] == "full"
    for table in GRAPH_TABLES:
        assert read_table(spark, resources["lake"].path(table)).count() == counts[table]  # replaced, not appended
        assert latest_version(spark, resources["lake"].path(table)) > versions[table]
    assert view_rows(spark, resources, NEXT_DATE) == incremental  # the increment equals a full rebuild
    assert view_rows(spark, resources, RUN_DATE) == previous_day  # other dates untouched


@pytest.mark.slow
def test_other_view_settings_block_the_increment(spark, next_day, monkeypatch):
    lake, day, prev = next_day.resources["lake"], dt.date.fromisoformat(NEXT_DATE), dt.date.fromisoformat(RUN_DATE)
    nodes, edges = (read_run_date(spark, lake.path(t), day) for t in ("graph_nodes", "graph_edges"))
    same = GRAPH_SETTINGS.graph_config()
    assert increment_blocker(spark, lake.path, prev, same, nodes, edges) is None
    reseeded = GraphSettingsResource(**{**GRAPH_CONFIG, "seed": 4}).graph_config()
    assert "view settings" in increment_blocker(spark, lake.path, prev, reseeded, nodes, edges)
    # Views drawn by another version of the sampler are never mixed with fresh ones.
    monkeypatch.setattr("spark_jobs.graph.sampling.SAMPLER_VERSION", "an-older-sampler")
    assert "view settings" in increment_blocker(spark, lake.path, prev, same, nodes, edges)
    monkeypatch.undo()
    # Edge-level settings do not block: their effect is in the edges, which the increment diffs.
    faster_decay = GraphSettingsResource(**{**GRAPH_CONFIG, "half_life_days": 7.0}).graph_config()
    assert increment_blocker(spark, lake.path, prev, faster_decay, nodes, edges) is None


@pytest.mark.slow
def test_failed_blocking_check_stops_downstream(spark, lake, tmp_path):
    resources = copy_lake(lake, spark, tmp_path / "lake")
    path = resources["lake"].path("graph_edges")
    one_edge = snapshot(spark, resources, "graph_edges", RUN_DATE).limit(1)
    dangling = one_edge.withColumn("dst_idx", F.lit(10**9).cast("long"))
    dangling.write.format("delta").mode("append").save(path)
    nodes_before = sorted(snapshot(spark, resources, "graph_nodes", RUN_DATE).collect())
    assert nodes_before, "the copied lake holds the date's nodes"
    result = materialize(resources, RUN_DATE, [graph_nodes, graph_views])
    assert not result.success
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == CHECK_DANGLING and not check.passed
    assert check.metadata["dangling_endpoints"].value == 1
    [event] = result.get_asset_materialization_events()
    assert event.asset_key.path[-1] == "graph_nodes"
    # write-audit-publish: the rebuilt nodes that failed the check are rolled back, readers see those of before
    rolled = event.materialization.metadata["rolled_back"].value["graph_nodes"]
    assert rolled["rollback_version"] == rolled["to_version"] + 2  # the failed write, then its rollback
    assert sorted(snapshot(spark, resources, "graph_nodes", RUN_DATE).collect()) == nodes_before


@pytest.mark.slow
def test_views_without_nodes_of_the_date_fail_clearly(lake):
    result = materialize(lake, "2024-01-01", [graph_views])
    assert not result.success
    failure = result.failure_data_for_node("graph_views")
    assert "graph_nodes has no snapshot for run date 2024-01-01" in str(failure.error)
