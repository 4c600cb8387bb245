"""Maintenance: Delta housekeeping of the whole lake, on its own weekly schedule (not part of the nightly job).

``lake_maintenance`` wraps :func:`spark_jobs.maintenance.maintain_lake`: every table of the lake gets the
time-travel window's retention properties, OPTIMIZE and VACUUM; the graph tables keep their newest run dates only.
See that module for what is promised and in which order it is done.

Not partitioned: it acts on every table and every run date at once, and its result (the lake's state) is not the
output of one run date. It has no upstream assets, so the refresh sensor never launches it (no automation
condition); ``hir_maintenance_schedule`` (``hir_pipeline/definitions.py``) runs it weekly, and the UI can run it
any time. It is safe beside a nightly run: OPTIMIZE and the snapshot delete retry commit conflicts, and VACUUM
only deletes files no version of the last ``time_travel_days`` days needs.
"""

import dagster as dg

from resources import LakeResource, SparkResource
from resources.config_schema import config_class
from spark_jobs.maintenance import MaintenanceSettings, maintain_lake, totals

GROUP = "maintenance"


class MaintenanceConfig(config_class(MaintenanceSettings, name="MaintenanceFields")):
    """What housekeeping does (the fields of :class:`spark_jobs.maintenance.MaintenanceSettings`, derived from it)."""


@dg.asset(
    name="lake_maintenance",
    group_name=GROUP,
    compute_kind="delta",
    description="Delta housekeeping of every lake table: retention properties matching the time-travel window, "
                "old graph snapshots pruned, OPTIMIZE, VACUUM.",
)
def lake_maintenance(
    context: dg.AssetExecutionContext,
    config: MaintenanceConfig,
    spark: SparkResource,
    lake: LakeResource,
) -> dg.MaterializeResult:
    settings = config.to_dataclass()
    reports = maintain_lake(spark.get_session(), lake.path, settings)
    for r in reports:
        if r.present:
            context.log.info(f"{r.table}: {r.files_before} -> {r.files_after} files, Delta version "
                             f"{r.version_before} -> {r.version_after}, pruned run dates: "
                             f"{', '.join(r.pruned_run_dates) or 'none'}")
    total = totals(reports)
    return dg.MaterializeResult(metadata={
        **total,
        "time_travel_days": settings.time_travel_days,
        "tables_absent": dg.MetadataValue.json(sorted(r.table for r in reports if not r.present)),
        "report": dg.MetadataValue.json([r.as_dict() for r in reports if r.present]),
    })
