"""Reading a source folder that follows the source contract (ARCHITECTURE.md "Source contract").

A source is a folder holding ``entities``, ``relations`` and ``events``, each a Delta table or a
folder (or single file) of Parquet. Schema problems stop the run with one line naming the table and
column *before anything is written*; row-level problems are left for ingestion to quarantine.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from urllib.parse import urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType

from hir_pipeline.contracts import SOURCE_TABLES

#: Column carrying the row exactly as read (all source columns, extras included) as JSON.
RAW_COLUMN = "_raw"


class SourceError(ValueError):
    """The source as a whole breaks the contract (missing folder, table or column, wrong type)."""


def _is_local(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def _local_path(uri: str) -> Path:
    return Path(urlparse(uri).path if uri.startswith("file:") else uri)


def _locate(spark: SparkSession, root: str, table: str) -> tuple[str, str]:
    """Return (format, path) of one source table."""
    if _is_local(root):
        base = _local_path(root)
        for candidate in (base / table, base / f"{table}.parquet"):
            if (candidate / "_delta_log").is_dir():
                return "delta", str(candidate)
            if candidate.exists():
                return "parquet", str(candidate)
        raise SourceError(f"source {root}: missing table '{table}' (expected {table}/ as Delta or Parquet)")
    path = f"{root.rstrip('/')}/{table}"
    try:
        spark.read.format("delta").load(path).schema  # noqa: B018 - probe only
        return "delta", path
    except AnalysisException:
        return "parquet", path


def check_schema(table: str, df: DataFrame) -> None:
    """Raise :class:`SourceError` if a contract column is missing (when required) or mistyped."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col in SOURCE_TABLES[table]:
        if col.name not in fields:
            if col.required:
                raise SourceError(f"{table}.{col.name}: required column is missing")
            continue
        found = fields[col.name].typeName()
        if found not in col.accepts:
            raise SourceError(f"{table}.{col.name}: expected {col.ddl}, found {found}")


def conform(table: str, df: DataFrame) -> DataFrame:
    """Keep the contract columns (absent optional ones as null) plus the raw row as JSON."""
    raw = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
    present = set(df.columns)
    cols = [
        F.col(c.name) if c.name in present else F.lit(None).alias(c.name) for c in SOURCE_TABLES[table]
    ]
    return df.select(*cols, raw.alias(RAW_COLUMN))


def read_source(spark: SparkSession, root: str) -> dict[str, DataFrame]:
    """Read and schema-check the three source tables of ``root`` (a folder or any Spark URI).

    Args:
        spark: the session to read with.
        root: the source folder; a local path, ``file:`` URI or any URI Spark can read.

    Returns:
        ``{"entities": df, "relations": df, "events": df}``, each conformed by :func:`conform`.
    """
    if _is_local(root) and not _local_path(root).is_dir():
        raise SourceError(f"source folder {root} does not exist")
    tables: dict[str, DataFrame] = {}
    for table in SOURCE_TABLES:
        fmt, path = _locate(spark, root, table)
        try:
            df = spark.read.format(fmt).load(path)
        except AnalysisException as exc:
            raise SourceError(f"source {root}: cannot read table '{table}' at {path}: {exc.getMessage()}") from exc
        check_schema(table, df)
        tables[table] = conform(table, df)
    return tables


def as_timestamp(df: DataFrame, name: str) -> Column:
    """The column as a UTC timestamp; unparseable strings become null (never an error)."""
    dtype = df.schema[name].dataType
    if isinstance(dtype, StringType):
        return F.try_to_timestamp(F.col(name))
    if isinstance(dtype, DateType):
        return F.col(name).cast("timestamp")
    return F.col(name).cast("timestamp")


def latest_event_date(events: DataFrame) -> dt.date | None:
    """The UTC date of the latest parseable ``event_ts`` (what a backfill runs *as of*), or None."""
    row = events.select(F.max(F.to_date(as_timestamp(events, "event_ts"))).alias("d")).first()
    return None if row is None else row["d"]
