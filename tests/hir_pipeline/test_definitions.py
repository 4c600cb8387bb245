"""The code location loads, with every group, the nightly job and its schedule."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from hir_pipeline.definitions import NIGHTLY_JOB, build_definitions, defs


def test_definitions_load_and_validate():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    groups = {graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert "ingestion" in groups
    assert {"entities", "relations", "events", "quarantine"} <= {k.path[-1] for k in graph.get_all_asset_keys()}
    assert defs.get_job_def(NIGHTLY_JOB).partitions_def is not None


def test_resources_follow_arguments(tmp_path):
    custom = build_definitions(lake_root=str(tmp_path / "lake"), source="synthetic")
    resources = custom.resources
    assert resources["lake"].root == str(tmp_path / "lake")
    assert resources["source"].location == "synthetic"


def test_nightly_schedule_runs_yesterdays_partition():
    schedule = defs.get_schedule_def(f"{NIGHTLY_JOB}_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    tick = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-12-02"]
