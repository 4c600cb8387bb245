"""The Dagster code location: every asset, check, resource, job and schedule of the pipeline.

Kept thin on purpose: assets live in ``assets/``, resources in ``resources/``. ``dagster dev`` and
``hir materialize`` both load :data:`defs` from here (``[tool.dagster]`` in pyproject.toml).
"""

from __future__ import annotations

import dagster as dg

from assets import ASSET_MODULES
from assets.automation import upstream_refresh_sensor, with_upstream_refresh
from hir_pipeline.settings import (
    default_lake_root,
    default_mlflow_artifact_root,
    default_mlflow_tracking_uri,
    default_spark_master,
)
from resources import (
    GraphSettingsResource,
    LakeResource,
    MLflowResource,
    ModelSettingsResource,
    SourceResource,
    SparkResource,
)

NIGHTLY_JOB = "hir_nightly"
#: Delta housekeeping (``assets/maintenance.py``): its own job and weekly schedule, never part of the nightly job.
MAINTENANCE_JOB = "hir_maintenance"
MAINTENANCE_GROUP = "maintenance"
#: Sundays 04:00 UTC: after the night's 02:00 run has usually finished, once a week (compaction is rarely urgent).
MAINTENANCE_CRON = "0 4 * * 0"
#: Longest a nightly run may take, in seconds, unless ``HIR_NIGHTLY_MAX_RUNTIME_S`` says otherwise (0: no limit). Run
#: monitoring fails a run that takes longer and ``run_retries`` retries it once: a run and its retry fit in the day
#: before the next night's run.
NIGHTLY_MAX_RUNTIME_S = 8 * 3600


def nightly_run_tags() -> dict[str, str]:
    """Tags of the runs the nightly schedule starts: ``dagster/max_runtime`` for run monitoring (retries inherit it).

    On the schedule's runs only, not on the job: ``hir materialize`` runs the job in-process on the same instance,
    and a backfill of years must not be cut by the daemon.
    """
    import os

    raw = os.environ.get("HIR_NIGHTLY_MAX_RUNTIME_S", str(NIGHTLY_MAX_RUNTIME_S))
    try:
        seconds = int(raw)
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise ValueError(f"HIR_NIGHTLY_MAX_RUNTIME_S={raw!r}: a whole number of seconds >= 0 (0: no limit)")
    return {dg.MAX_RUNTIME_SECONDS_TAG: str(seconds)} if seconds else {}


def default_resources(lake_root: str | None = None, source: str | None = None,
                      profile: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """Embedded defaults (local Spark, a local lake, SQLite MLflow, the default graph settings, the model settings
    of the machine's profile).

    Each is overridable by environment where it says so, and by the ``resources:`` section of a run config.

    Args:
        lake_root: Delta lake root; default ``HIR_LAKE`` or ``.hir/lake``.
        source: ``movielens``, ``synthetic`` or a source folder; default ``HIR_SOURCE`` or ``movielens``.
        profile: ``cpu``, ``gpu`` or ``auto`` (:func:`hir_pipeline.profiles.choose_profile`; default ``HIR_PROFILE``,
            else by the device found).
    """
    import os

    from hir_pipeline.profiles import choose_profile, profile_model_settings

    return {
        "spark": SparkResource(master=default_spark_master()),
        "lake": LakeResource(root=lake_root or default_lake_root()),
        "mlflow": MLflowResource(
            tracking_uri=default_mlflow_tracking_uri(), artifact_location=default_mlflow_artifact_root()
        ),
        "source": SourceResource(location=source or os.environ.get("HIR_SOURCE", "movielens")),
        # one set of graph settings (funnel, max_dist, ...) for ingestion, the graph, the model and the evaluation
        "graph_settings": GraphSettingsResource(),
        # one set of model and training settings for interest_model and the evaluation's fallback: the profile's
        "model_settings": ModelSettingsResource(**profile_model_settings(choose_profile(profile))),
    }


def build_definitions(lake_root: str | None = None, source: str | None = None,
                      profile: str | None = None) -> dg.Definitions:
    """All definitions, with resources pointing at ``lake_root`` and ``source``, and the model settings of
    ``profile`` (:func:`default_resources`)."""
    # Downstream partitions re-run when an upstream partition of the same date changes (sensor, daemon).
    assets = with_upstream_refresh(dg.load_assets_from_modules(ASSET_MODULES))
    checks = dg.load_asset_checks_from_modules(ASSET_MODULES)
    # Its partitions (daily run dates) come from the selected assets; the schedule resolves them with the job.
    maintenance_assets = dg.AssetSelection.groups(MAINTENANCE_GROUP)
    nightly = dg.define_asset_job(
        NIGHTLY_JOB,
        selection=dg.AssetSelection.all() - maintenance_assets,
        description="Ingest the day's activity, rebuild graph and embeddings, retrain, publish, evaluate.",
    )
    schedule = dg.build_schedule_from_partitioned_job(nightly, hour_of_day=2, minute_of_hour=0,
                                                      tags=nightly_run_tags())
    maintenance = dg.define_asset_job(
        MAINTENANCE_JOB,
        selection=maintenance_assets,
        description="Delta housekeeping: retention matching the time-travel window, old graph snapshots pruned, "
                    "OPTIMIZE, VACUUM.",
    )
    maintenance_schedule = dg.ScheduleDefinition(job=maintenance, cron_schedule=MAINTENANCE_CRON,
                                                  execution_timezone="UTC")
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[nightly, maintenance],
        schedules=[schedule, maintenance_schedule],
        sensors=[upstream_refresh_sensor],
        resources=default_resources(lake_root, source, profile),
        executor=dg.in_process_executor,
    )


defs = build_definitions()
