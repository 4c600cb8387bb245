"""Automation: downstream assets re-run, for the same run date, when their upstream data changes.

The nightly schedule materializes the whole graph for the day that ended. Between nights a data engineer often
re-materializes part of it for one date from the UI: re-ingests a corrected day, rebuilds ``graph_edges`` with
other weights, re-embeds content. Everything downstream of that date is then stale. :func:`upstream_changed`
marks such partitions, and :data:`upstream_refresh_sensor` (evaluated by the Dagster daemon) launches them, so
the graph converges again without anyone clicking through it.

Why this condition and not ``AutomationCondition.eager()``: ``eager`` only looks at the latest time partition
(yesterday), but corrections are made to older dates too; and ``eager`` also fills *missing* partitions, which
on a calendar starting in 1997 would launch thousands of runs the first time the sensor is turned on. This
condition only reacts to an upstream partition that was *updated* after the downstream partition was last
handled, whatever its date. A full nightly run does not trigger anything: dependencies updated by a run that
also updated the asset itself are ignored (``any_deps_updated`` excludes them), and so are updates older than
the sensor's first tick.

Wiring (in ``hir_pipeline/definitions.py``)::

    from assets.automation import upstream_refresh_sensor, with_upstream_refresh

    assets = with_upstream_refresh(dg.load_assets_from_modules(ASSET_MODULES))
    ...
    return dg.Definitions(..., sensors=[upstream_refresh_sensor])
"""

from collections.abc import Iterable

import dagster as dg

#: Label of the condition in the UI's automation history.
LABEL = "upstream_changed"

#: Name of the sensor in the UI (Automation tab).
SENSOR_NAME = "upstream_refresh_sensor"


def upstream_changed() -> dg.AutomationCondition:
    """True for a partition whose dependencies (same run date) were updated since it was last requested or updated.

    Not while any dependency of that date is missing or in progress, nor while the partition itself is in
    progress: a half-finished upstream run never triggers a downstream one, and a run is never requested twice.
    Not while a blocking check of a dependency's partition failed its latest evaluation either: that write was
    rolled back (:mod:`assets.write_audit`) and waits for a fix; the next update whose checks pass triggers the
    refresh. (Not ``all_deps_blocking_checks_passed``: a dependency materialized before its checks existed, or by
    a run that skipped them, has no passed evaluation and would block its downstream for ever.) Dependencies that
    will be requested on the same tick count as updated, so one tick requests the whole downstream chain of a
    date in one run.
    """
    blocking_check_failed = dg.AutomationCondition.any_checks_match(
        dg.AutomationCondition.check_failed(), blocking_only=True).with_label("blocking_check_failed")
    return (
        dg.AutomationCondition.any_deps_updated().since_last_handled()
        & ~dg.AutomationCondition.any_deps_missing()
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.any_deps_match(blocking_check_failed)
        & ~dg.AutomationCondition.in_progress()
    ).with_label(LABEL)


def with_upstream_refresh(
    assets: Iterable[dg.AssetsDefinition | dg.AssetSpec | dg.SourceAsset],
    condition: dg.AutomationCondition | None = None,
) -> list:
    """Give every asset that has upstream dependencies ``condition`` (default :func:`upstream_changed`).

    Root assets (ingestion) keep no condition: new source data arrives on the nightly schedule. An asset whose
    author already set an automation condition keeps it.

    Args:
        assets: what ``dg.load_assets_from_modules`` returns; anything that is not an ``AssetsDefinition`` passes
            through unchanged.
        condition: the condition to apply instead of :func:`upstream_changed`.
    """
    condition = condition or upstream_changed()

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        if not spec.deps or spec.automation_condition is not None:
            return spec
        return spec.replace_attributes(automation_condition=condition)

    return [a.map_asset_specs(apply) if isinstance(a, dg.AssetsDefinition) else a for a in assets]


#: Evaluates the conditions of every asset every ``minimum_interval_seconds`` in the daemon (``dagster dev`` or
#: ``dagster-daemon run``). Running by default: stale partitions are refreshed without anyone turning it on; stop
#: it from the UI's Automation tab to pause. Launched runs queue behind the nightly run (one run at a time).
upstream_refresh_sensor = dg.AutomationConditionSensorDefinition(
    SENSOR_NAME,
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
    description="Re-runs, for the same run date, every asset whose upstream data changed since it last ran.",
)
