"""The run calendar: one partition per UTC day; a partition key is a run date."""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg

from hir_pipeline.settings import default_lake_root
from spark_jobs.ingestion.lake_source import recorded_lake_source

#: First run date of a lake that records none yet and of a deployment without ``HIR_PARTITIONS_START``.
FALLBACK_START = "2000-01-01"


def partitions_start() -> str:
    """The first run date: ``HIR_PARTITIONS_START``, else the first event date that the default lake (``HIR_LAKE``)
    recorded at its first ingestion (``spark_jobs.ingestion.lake_source``), else :data:`FALLBACK_START`.

    ``hir materialize`` sets ``HIR_PARTITIONS_START`` to its source's first event date when its lake records none.
    """
    if start := os.environ.get("HIR_PARTITIONS_START"):
        return start
    recorded = recorded_lake_source(f"{default_lake_root().rstrip('/')}/events")
    return recorded.first_event_date if recorded and recorded.first_event_date else FALLBACK_START


PARTITIONS_START = partitions_start()

#: The nightly schedule at 02:00 UTC runs the day that just ended (the last complete partition).
daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC")


def run_date(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> dt.date:
    """The run date of a partitioned run: never the wall clock."""
    key = context.partition_key if isinstance(context, dg.AssetExecutionContext) else _check_key(context)
    return dt.date.fromisoformat(key)


def _check_key(context: dg.AssetCheckExecutionContext) -> str:
    return context.op_execution_context.partition_key
