"""The run calendar: one partition per UTC day; a partition key is a run date."""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg

#: First day a partition exists for (``HIR_PARTITIONS_START``); MovieLens-100k starts in 1997.
PARTITIONS_START = os.environ.get("HIR_PARTITIONS_START", "1997-01-01")

#: The nightly schedule at 02:00 UTC runs the day that just ended (the last complete partition).
daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC")


def run_date(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> dt.date:
    """The run date of a partitioned run: never the wall clock."""
    key = context.partition_key if isinstance(context, dg.AssetExecutionContext) else _check_key(context)
    return dt.date.fromisoformat(key)


def _check_key(context: dg.AssetCheckExecutionContext) -> str:
    return context.op_execution_context.partition_key
