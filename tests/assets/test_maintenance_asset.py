"""``lake_maintenance``: its own weekly job, outside the nightly one, unpartitioned and never automated; a real
``dg.materialize`` over a small lake reports what it did, and time travel within the window still reads."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest
from pyspark.sql import functions as F

from assets.maintenance import GROUP, MaintenanceConfig, lake_maintenance
from hir_pipeline.definitions import MAINTENANCE_JOB, NIGHTLY_JOB, defs
from spark_jobs.delta_io import latest_version, read_table, replace_run_date
from spark_jobs.maintenance import MaintenanceSettings
from tests.assets.conftest import make_resources

DAYS = [dt.date(2024, 6, d) for d in (28, 29, 30)]


def test_maintenance_is_its_own_weekly_unpartitioned_job_and_never_automated():
    key = dg.AssetKey("lake_maintenance")
    asset = defs.get_assets_def(key)
    assert asset.partitions_def is None and asset.group_names_by_key[key] == GROUP
    assert asset.automation_conditions_by_key.get(key) is None  # no upstream: the refresh sensor never runs it
    assert key not in defs.resolve_job_def(NIGHTLY_JOB).asset_layer.executable_asset_keys
    assert defs.resolve_job_def(MAINTENANCE_JOB).asset_layer.executable_asset_keys == {key}
    schedule = defs.resolve_schedule_def(f"{MAINTENANCE_JOB}_schedule")
    assert schedule.cron_schedule == "0 4 * * 0" and schedule.execution_timezone == "UTC"
    # the config is the settings dataclass, defaults and validation included
    assert MaintenanceConfig().to_dataclass() == MaintenanceSettings()
    with pytest.raises(ValueError, match="allow_short_retention"):
        MaintenanceConfig(time_travel_days=2)


@pytest.mark.slow
def test_materialize_maintains_the_lake_and_keeps_time_travel(spark, tmp_path):
    root = tmp_path / "lake"
    resources = make_resources(spark, root, "synthetic")
    path = resources["lake"].path
    for day in DAYS:
        rows = spark.range(12).select(F.col("id").cast("string").alias("src_id"), F.lit(day).alias("run_date"))
        replace_run_date(rows.repartition(3), path("graph_edges"), day)
    versions = {v: read_table(spark, path("graph_edges"), v).count() for v in range(latest_version(
        spark, path("graph_edges")) + 1)}

    result = dg.materialize([lake_maintenance], resources=resources, run_config=dg.RunConfig(
        ops={"lake_maintenance": MaintenanceConfig(keep_graph_run_dates=1)}))

    assert result.success
    [mat] = result.asset_materializations_for_node("lake_maintenance")
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["tables"] == 1 and meta["run_dates_pruned"] == 2 and meta["time_travel_days"] == 30
    assert meta["files_after"] == 1 < meta["files_before"]
    [report] = meta["report"]
    assert report["table"] == "graph_edges" and report["kept_run_dates"] == [str(DAYS[-1])]
    assert "graph_nodes" in meta["tables_absent"]
    for version, count in versions.items():
        assert read_table(spark, path("graph_edges"), version).count() == count
    assert read_table(spark, path("graph_edges")).count() == 12
