"""The code location loads, with every group, the nightly job and its schedule, the weekly maintenance job and its
schedule; the CPU sample config is valid."""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

import dagster as dg
import pytest

from assets.partitions import daily_partitions
from hir_pipeline.cli import load_run_config
from hir_pipeline.definitions import NIGHTLY_JOB, build_definitions, defs

SAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "config" / "cpu_sample.yaml"


def test_definitions_load_and_validate():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    groups = {graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert "ingestion" in groups
    assert {"entities", "relations", "events", "quarantine"} <= {k.path[-1] for k in graph.get_all_asset_keys()}
    assert defs.resolve_job_def(NIGHTLY_JOB).partitions_def == daily_partitions  # inferred from the assets


def test_resources_follow_arguments(tmp_path):
    custom = build_definitions(lake_root=str(tmp_path / "lake"), source="synthetic")
    resources = custom.resources
    assert resources["lake"].root == str(tmp_path / "lake")
    assert resources["source"].location == "synthetic"


def test_nightly_schedule_runs_yesterdays_partition():
    schedule = defs.resolve_schedule_def(f"{NIGHTLY_JOB}_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    tick = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-12-02"]


def test_maintenance_runs_weekly_on_its_own_and_not_in_the_nightly_job():
    from hir_pipeline.definitions import MAINTENANCE_GROUP, MAINTENANCE_JOB

    graph = defs.resolve_asset_graph()
    housekeeping = {k for k in graph.get_all_asset_keys() if graph.get(k).group_name == MAINTENANCE_GROUP}
    assert housekeeping == {dg.AssetKey("lake_maintenance")}
    nightly = defs.resolve_job_def(NIGHTLY_JOB).asset_layer.executable_asset_keys
    assert not nightly & housekeeping and nightly | housekeeping == set(graph.get_all_asset_keys())
    schedule = defs.resolve_schedule_def(f"{MAINTENANCE_JOB}_schedule")
    tick = dt.datetime(2026, 12, 6, 4, 0, tzinfo=dt.UTC)  # a Sunday
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        [request] = schedule.evaluate_tick(context).run_requests
    assert request.partition_key is None and schedule.cron_schedule == "0 4 * * 0"


def _nightly_tags(**env: str) -> dict[str, str]:
    """Tags of the run the nightly schedule requests at a tick, with the code location built under ``env``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("HIR_NIGHTLY_MAX_RUNTIME_S", raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        schedule = build_definitions().resolve_schedule_def(f"{NIGHTLY_JOB}_schedule")
    tick = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        [request] = schedule.evaluate_tick(context).run_requests
    return dict(request.tags)


def test_nightly_runs_carry_the_maximum_runtime_that_run_monitoring_enforces():
    from hir_pipeline.definitions import NIGHTLY_MAX_RUNTIME_S

    assert _nightly_tags()[dg.MAX_RUNTIME_SECONDS_TAG] == str(NIGHTLY_MAX_RUNTIME_S) == "28800"
    assert _nightly_tags(HIR_NIGHTLY_MAX_RUNTIME_S="600")[dg.MAX_RUNTIME_SECONDS_TAG] == "600"
    assert dg.MAX_RUNTIME_SECONDS_TAG not in _nightly_tags(HIR_NIGHTLY_MAX_RUNTIME_S="0")  # no limit
    for bad in ("8h", "-1"):
        with pytest.raises(ValueError, match="HIR_NIGHTLY_MAX_RUNTIME_S"):
            _nightly_tags(HIR_NIGHTLY_MAX_RUNTIME_S=bad)
    # on the schedule's runs only: `hir materialize` runs the job itself, in-process, without a limit
    assert dg.MAX_RUNTIME_SECONDS_TAG not in defs.resolve_job_def(NIGHTLY_JOB).tags


GRAPH_USERS = ("entities", "graph_edges", "graph_nodes", "graph_views", "interest_model", "evaluation_report")
MODEL_USERS = ("interest_model", "evaluation_report")


def test_graph_settings_are_one_resource_shared_by_the_graph_assets_and_the_evaluation():
    for name in GRAPH_USERS:
        assert "graph_settings" in defs.get_assets_def(dg.AssetKey(name)).required_resource_keys, name
    for name in MODEL_USERS:
        assert "model_settings" in defs.get_assets_def(dg.AssetKey(name)).required_resource_keys, name
    job = defs.resolve_job_def(NIGHTLY_JOB)
    override = {"resources": {"graph_settings": {"config": {"half_life_days": 7.0, "broad_fanout": [8, 2]}}},
                "ops": {"graph_views": {"config": {"incremental": False}}}}
    assert dg.validate_run_config(job, override)
    # the old per-asset copies of shared settings are rejected, not silently ignored
    for stale in ({"graph_edges": {"config": {"seed": 1}}},
                  {"evaluation_report": {"config": {"graph": {"seed": 1}}}},
                  {"evaluation_report": {"config": {"training": {"epochs": 1}}}},
                  {"evaluation_report": {"config": {"stage_weights": [1.0, 1.0, 1.0, 1.0]}}},
                  {"interest_model": {"config": {"max_dist": 3}}},
                  {"interest_model": {"config": {"funnel": ["click"]}}},
                  {"bronze_tables": {"config": {"funnel": ["click"]}}}):
        with pytest.raises(dg.DagsterInvalidConfigError):
            dg.validate_run_config(job, {"ops": stale})


def test_cpu_sample_config_validates_against_the_nightly_job():
    """config/cpu_sample.yaml, loaded as ``hir materialize --config`` loads it, is valid run config of the nightly
    job; its HIR settings are stated once, in the model_settings resource (the evaluation falls back to it); it
    publishes the student, and a value other than student / teacher is rejected at launch."""
    job = defs.resolve_job_def(NIGHTLY_JOB)
    config = load_run_config(str(SAMPLE_CONFIG), job)
    assert config["ops"] == {} and set(config["resources"]) == {"model_settings"}
    assert dg.validate_run_config(job, config)
    train = config["resources"]["model_settings"]["config"]["train"]
    assert train["published_encoder"] == "student"
    train["published_encoder"] = "teacher"
    assert dg.validate_run_config(job, config)
    train["published_encoder"] = "ema"
    with pytest.raises(dg.DagsterInvalidConfigError, match="published_encoder"):
        dg.validate_run_config(job, config)


def test_definitions_use_no_deprecated_dagster_api():
    """Building the code location and resolving its job and schedule warn of nothing deprecated.

    ``define_asset_job(partitions_def=...)`` (a ``DeprecationWarning``: partitions are inferred from the assets) and
    ``Definitions.get_job_def`` / ``get_schedule_def`` (``UserWarning``s: ``resolve_*`` since dagster 1.11) did.
    Dagster's ``BetaWarning`` / ``PreviewWarning`` flag young APIs, not deprecated ones, and are allowed.
    """
    # Imports above may have called logging.captureWarnings; recording inside the block still sees everything.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build_definitions()
        dg.Definitions.validate_loadable(built)
        job = built.resolve_job_def(NIGHTLY_JOB)
        built.resolve_schedule_def(f"{NIGHTLY_JOB}_schedule")
    assert job.partitions_def == daily_partitions
    bad = [f"{w.category.__name__} {w.filename}:{w.lineno}: {w.message}" for w in caught
           if not issubclass(w.category, dg.BetaWarning | dg.PreviewWarning)]
    assert not bad, "\n".join(bad)


def test_code_location_loads_without_the_heavy_libraries():
    """Every Dagster process (webserver, daemon, run worker, ``hir``) loads the code location first; torch, MLflow and
    Great Expectations take seconds each to import, so they are imported by the assets that use them, not at load
    (PyAV, ``av``, only when a batch of content holds a video clip)."""
    import subprocess
    import sys

    probe = ("import sys, hir_pipeline.definitions; "
             "print(sorted(m for m in ('torch', 'mlflow', 'great_expectations', 'transformers', 'implicit', "
             "'torch_geometric', 'av') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
