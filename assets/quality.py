"""Great Expectations 1.x suites, run inside Dagster asset checks.

dagster-ge only supports GX 0.x, so the checks call GX 1.x directly: an ephemeral context, a
Spark data source over the DataFrame, one suite per table. The validation result becomes the
check's metadata, so a failed expectation is visible in the UI next to the asset.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from typing import Any

import dagster as dg

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


@functools.cache
def _context():
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    return context


def validate(
    df,
    suite_name: str,
    expectations: Sequence[Any],
    *,
    asset_key: str | None = None,
    check_name: str | None = None,
) -> dg.AssetCheckResult:
    """Validate a Spark DataFrame against ``expectations``; the result is an ERROR-severity check.

    Args:
        df: the Spark DataFrame to validate (typically the Delta table just written).
        suite_name: unique name of the suite (shown in metadata).
        expectations: ``great_expectations.expectations`` instances.
        asset_key: asset the check belongs to (needed when one step yields several checks).
        check_name: name of the check (idem).
    """
    import great_expectations as gx

    context = _context()
    source = context.data_sources.add_or_update_spark(f"spark_{suite_name}")
    asset = source.add_dataframe_asset(f"df_{suite_name}")
    batch = asset.add_batch_definition_whole_dataframe(f"batch_{suite_name}")
    suite = gx.ExpectationSuite(name=suite_name, expectations=list(expectations))
    result = batch.get_batch(batch_parameters={"dataframe": df}).validate(suite)
    stats = result.statistics
    failed = [
        {
            "expectation": r.expectation_config.type,
            "kwargs": _plain(r.expectation_config.kwargs),
            "result": _plain(r.result),
        }
        for r in result.results
        if not r.success
    ]
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=check_name,
        passed=bool(result.success),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "suite": suite_name,
            "evaluated": int(stats["evaluated_expectations"]),
            "successful": int(stats["successful_expectations"]),
            "success_percent": float(stats["success_percent"] or 0.0),
            "failed_expectations": dg.MetadataValue.json(failed),
        },
    )


def _plain(value: Any) -> Any:
    """JSON-safe copy of a GX result fragment."""
    return json.loads(json.dumps(value, default=str))
