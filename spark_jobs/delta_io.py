"""Delta Lake writes with the semantics the pipeline promises.

* :func:`replace_where` — re-running a date replaces that date's rows, never duplicates them.
* :func:`upsert` — catalog tables (entities, relations) are merged by key, so a nightly source that
  holds only part of the catalog adds to it instead of erasing it.
Every write is one Delta commit: a run killed mid-write leaves the previous version readable.
"""

from __future__ import annotations

from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession


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
    df: DataFrame, path: str, predicate: str, partition_by: Sequence[str] = ()
) -> None:
    """Atomically replace the rows matching ``predicate`` with ``df`` (whose rows must match it)."""
    writer = df.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)


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
