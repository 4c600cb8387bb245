"""Delta Lake writes with the semantics the pipeline promises.

* :func:`replace_run_date` — re-running a date replaces that date's rows, never duplicates them; the commit
  records the run date (:func:`run_date_metadata` finds it), so a date written empty is told apart from one never
  written. :func:`replace_where` is the general form (any predicate, e.g. the ingestion's event window).
* :func:`replace_table` — a table holding one current snapshot is replaced whole.
* :func:`upsert` — catalog tables (entities, relations) are merged by key, so a nightly source that
  holds only part of the catalog adds to it instead of erasing it.
Every write is one Delta commit: a run killed mid-write leaves the previous version readable.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

#: Partition column of every table that keeps one snapshot per run date.
RUN_DATE = "run_date"


class MissingInput(LookupError):
    """An upstream table has nothing for the run date (the message says what to materialize first)."""


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def latest_version(spark: SparkSession, path: str) -> int | None:
    """Current Delta version of the table at ``path`` (None if there is no table)."""
    if not table_exists(spark, path):
        return None
    return DeltaTable.forPath(spark, path).history(1).select("version").first()[0]


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def replace_where(
    df: DataFrame,
    path: str,
    predicate: str,
    partition_by: Sequence[str] = (),
    user_metadata: Mapping[str, Any] | None = None,
) -> None:
    """Atomically replace the rows matching ``predicate`` with ``df`` (whose rows must match it).

    Args:
        df: the new rows.
        path: the table's path (created when missing).
        predicate: SQL predicate of the rows replaced (Delta ``replaceWhere``).
        partition_by: partition columns of the table.
        user_metadata: JSON-able facts recorded as the commit's ``userMetadata`` (``DESCRIBE HISTORY``).
    """
    writer = df.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
    if user_metadata is not None:
        writer = writer.option("userMetadata", json.dumps(dict(user_metadata), sort_keys=True))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)


def replace_table(df: DataFrame, path: str) -> None:
    """Atomically replace the whole table at ``path`` with ``df``; earlier versions stay readable (time travel).

    ``df`` may be computed from the table it replaces: Delta reads the version it planned against, and the
    overwrite only marks that version's files removed.
    """
    df.write.format("delta").mode("overwrite").save(path)


def replace_run_date(
    df: DataFrame, path: str, day: dt.date, user_metadata: Mapping[str, Any] | None = None
) -> None:
    """Replace the ``run_date = day`` partition of a run-date-partitioned table with ``df``, in one Delta commit.

    The commit's ``userMetadata`` records ``{"run_date": day, **user_metadata}``, so :func:`run_date_metadata`
    tells a snapshot that was written empty from one never written.

    Args:
        df: the run's rows (all with ``run_date = day``).
        path: the table's path (created, partitioned by ``run_date``, when missing).
        day: the run date replaced.
        user_metadata: more JSON-able facts about the snapshot (e.g. the settings it was built with).
    """
    replace_where(df, path, f"{RUN_DATE} = '{day}'", [RUN_DATE], {**(user_metadata or {}), RUN_DATE: str(day)})


def read_run_date(spark: SparkSession, path: str, day: dt.date, version: int | None = None) -> DataFrame:
    """The ``run_date = day`` rows of the table at ``path`` (at Delta ``version``, default the latest)."""
    return read_table(spark, path, version).where(F.col(RUN_DATE) == F.lit(day))


def run_date_metadata(spark: SparkSession, path: str, day: dt.date) -> dict | None:
    """``userMetadata`` of the latest commit that wrote the ``run_date = day`` snapshot (:func:`replace_run_date`).

    Returns:
        The recorded facts, or None when no commit of the table recorded that run date (or there is no table).
    """
    if not table_exists(spark, path):
        return None
    history = (DeltaTable.forPath(spark, path).history().where(F.col("userMetadata").isNotNull())
               .orderBy(F.col("version").desc()).select("userMetadata").collect())
    for row in history:
        try:
            meta = json.loads(row["userMetadata"])
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get(RUN_DATE) == str(day):
            return meta
    return None


def upsert(spark: SparkSession, df: DataFrame, path: str, keys: Sequence[str]) -> None:
    """Merge ``df`` into the table by ``keys``: changed rows are updated, new ones inserted."""
    if not table_exists(spark, path):
        df.write.format("delta").mode("overwrite").save(path)
        return
    cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    changed = " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in df.columns if c not in keys) or "false"
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(df.alias("s"), cond)
        .whenMatchedUpdateAll(condition=changed)
        .whenNotMatchedInsertAll()
        .execute()
    )
