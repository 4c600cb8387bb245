"""Reading a source folder that follows the source contract (ARCHITECTURE.md "Source contract").

A source is a folder holding ``entities``, ``relations`` and ``events``, each a Delta table or a
folder (or single file) of Parquet. Schema problems stop the run with one line naming the table,
column and fix *before anything is written*; row-level problems are left for ingestion to quarantine.

Sources are read as users write them, e.g. with ``pandas.DataFrame.to_parquet()`` and its defaults:

* nanosecond timestamps, tz-naive (taken as UTC) or tz-aware: Spark cannot read them as timestamps, so the
  session reads them as epoch nanoseconds (``spark.sql.legacy.parquet.nanosAsLong``, set in
  ``spark_jobs.session.BASE_CONF``) and :func:`as_timestamp` converts integer epochs by magnitude;
* all-null columns (pyarrow's ``null`` type, which Spark sees as integers): in a local folder each Parquet file's
  footer is read first, files are grouped by schema and such a column becomes a typed null;
* integer or float identifiers: read as strings (``1`` and ``1.0`` are both ``"1"``);
* ``large_string``, dictionary-encoded strings, int32/int64 and float32/float64 numbers: read as they are;
* text that is not valid UTF-8: invalid bytes become U+FFFD, never a failed job.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from urllib.parse import urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from hir_pipeline.contracts import SOURCE_TABLES

#: Column carrying the row exactly as read (all source columns, extras included) as JSON.
RAW_COLUMN = "_raw"


class SourceError(ValueError):
    """The source as a whole breaks the contract (missing folder, table or column, wrong type)."""


def _is_local(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def _local_path(uri: str) -> Path:
    return Path(urlparse(uri).path if uri.startswith("file:") else uri)


def check_source_folder(root: str) -> None:
    """Raise :class:`SourceError` when ``root`` is a local folder that does not exist (no Spark needed: callers check
    this before starting a session, so a mistyped path fails in a moment). Remote URIs are checked when read."""
    if _is_local(root) and not _local_path(root).is_dir():
        raise SourceError(f"source folder {root} does not exist")


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


#: How to fix a column of the wrong type, per contract type.
_FIX = {
    "string": "write it as text (pandas: df[col].astype('string'))",
    "timestamp": "write it as a timestamp, a date, an ISO-8601 string or an integer epoch "
                 "(pandas: pd.to_datetime(df[col]))",
    "double": "write it as a number (pandas: pd.to_numeric(df[col]))",
}
_NUMBER_TYPES = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)


def check_schema(table: str, df: DataFrame) -> None:
    """Raise :class:`SourceError` if a contract column is missing (when required) or mistyped."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col in SOURCE_TABLES[table]:
        if col.name not in fields:
            if col.required:
                raise SourceError(f"{table}.{col.name}: required column is missing (add it; see the source "
                                  "contract in README 'Contracts')")
            continue
        found = fields[col.name].typeName()
        if found not in col.accepts:
            raise SourceError(f"{table}.{col.name}: expected {col.ddl}, found {found}; {_FIX[col.ddl]}")


def _identifier(c: Column, dtype) -> Column:
    """A numeric identifier as text: integral values without a fraction (``1.0`` -> ``"1"``)."""
    if isinstance(dtype, FloatType | DoubleType | DecimalType):
        # pandas writes integer IDs with gaps as float64 with NaN: NaN is a missing ID, 1.0 is "1"
        missing = F.isnan(c) if isinstance(dtype, FloatType | DoubleType) else F.lit(False)
        whole = c == F.floor(c)
        return (F.when(missing, F.lit(None).cast("string"))
                .when(whole & (F.abs(c) < 9e18), F.floor(c).cast("long").cast("string"))
                .otherwise(c.cast("string")))
    return c.cast("string")


def conform(table: str, df: DataFrame) -> DataFrame:
    """Keep the contract columns (absent optional ones as null) plus the raw row as JSON.

    Text is made valid UTF-8 and numeric identifiers become text; other types stay as read (ingestion
    types them).
    """
    text = {f.name for f in df.schema.fields if isinstance(f.dataType, StringType)}
    df = df.select(*[F.make_valid_utf8(F.col(f"`{c}`")).alias(c) if c in text else F.col(f"`{c}`")
                     for c in df.columns])
    raw = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
    types = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for c in SOURCE_TABLES[table]:
        if c.name not in types:
            cols.append(F.lit(None).alias(c.name))
        elif c.ddl == "string" and isinstance(types[c.name], _NUMBER_TYPES):
            cols.append(_identifier(F.col(c.name), types[c.name]).alias(c.name))
        else:
            cols.append(F.col(c.name))
    return df.select(*cols, raw.alias(RAW_COLUMN))


def _parquet_files(path: Path) -> list[Path]:
    """The data files of a local Parquet table (a file, or a folder's files, hidden and ``_`` ones skipped)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not any(
        part.startswith((".", "_")) for part in p.relative_to(path).parts) and not p.name.endswith(".crc"))


def _group_column(df: DataFrame, c: str, nulls: set[str], kinds: dict[str, set[str]], as_text: set[str],
                  ddl: dict[str, str]) -> Column:
    """Column ``c`` of one group of files, made ready to union with the other groups (see the caller)."""
    if c in nulls:  # null where another group has values (the union takes that type), else the contract's type
        return (F.lit(None) if c in kinds else F.lit(None).cast(ddl.get(c, "string"))).alias(c)
    col, dtype = F.col(f"`{c}`"), df.schema[c].dataType
    if c in as_text:
        numeric_id = ddl.get(c) == "string" and isinstance(dtype, _NUMBER_TYPES)
        return (_identifier(col, dtype) if numeric_id else col.cast("string")).alias(c)
    return col


def _read_local_parquet(spark: SparkSession, table: str, path: str) -> DataFrame:
    """A local Parquet table, its files grouped by footer schema so that all-null columns read as typed nulls.

    pyarrow writes an all-null column (``null`` type) as integers with an "unknown" annotation: Spark reads it
    as ``int``, and cannot read it together with files where the column holds text. Each group of files with
    one schema is read on its own, such columns replaced by nulls of the contract type (text for others),
    and the groups are unioned by name.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = Path(path)
    # one group per footer schema: Spark reads a group with one schema, and unionByName widens between groups
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for file in _parquet_files(base):
        try:
            schema = pq.read_schema(file)
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"{table}: {file} is not a readable Parquet file ({exc}); remove or rewrite it") \
                from exc
        groups.setdefault(tuple((f.name, str(f.type)) for f in schema), []).append(str(file))
    if not groups:
        raise SourceError(f"{table}: {path} holds no Parquet files")
    ddl = {c.name: c.ddl for c in SOURCE_TABLES[table]}
    reader = spark.read.format("parquet")
    if base.is_dir():
        reader = reader.option("basePath", str(base))  # keeps partition columns (key=value folders)
    kinds: dict[str, set[str]] = {}
    for fields in groups:
        for name, kind in fields:
            if kind != "null":
                kinds.setdefault(name, set()).add(kind)
    # files that disagree on a column's type (other than numbers of different widths, which the union widens) are
    # read as text, which the labelling parses as it parses text from any source (identifiers: 7 -> "7")
    numeric = re.compile(r"^(u?int\d+|float|double|halffloat|decimal.*)$")
    as_text = {c for c, k in kinds.items() if len(k) > 1 and not all(numeric.match(x) for x in k)}
    frames = []
    for fields, files in groups.items():
        nulls = {name for name, kind in fields if kind == "null"}
        df = reader.load(files)
        frames.append(df.select(*[_group_column(df, c, nulls, kinds, as_text, ddl) for c in df.columns]))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df, allowMissingColumns=True)
    return out


def read_source(spark: SparkSession, root: str) -> dict[str, DataFrame]:
    """Read and schema-check the three source tables of ``root`` (a folder or any Spark URI).

    Args:
        spark: the session to read with.
        root: the source folder; a local path, ``file:`` URI or any URI Spark can read.

    Returns:
        ``{"entities": df, "relations": df, "events": df}``, each conformed by :func:`conform`.
    """
    check_source_folder(root)
    tables: dict[str, DataFrame] = {}
    for table in SOURCE_TABLES:
        fmt, path = _locate(spark, root, table)
        try:
            if fmt == "parquet" and _is_local(path):
                df = _read_local_parquet(spark, table, path)
            else:
                df = spark.read.format(fmt).load(path)
        except AnalysisException as exc:
            raise SourceError(f"source {root}: cannot read table '{table}' at {path}: {exc.getMessage()}") from exc
        check_schema(table, df)
        tables[table] = conform(table, df)
    return tables


#: Formats tried, in order, for text that is not ISO-8601 (which is tried first).
_TEXT_FORMATS = ("yyyy/M/d H:mm:ss", "yyyy/M/d H:mm", "yyyy/M/d")


def _from_epoch(c: Column) -> Column:
    """An integer epoch as a timestamp, its unit told by magnitude (see :func:`as_timestamp`)."""
    n = c.try_cast("long")  # text beyond the long range is null, not an error
    size = F.abs(n.cast("double"))
    micros = (F.when(size < 1e11, n * 1_000_000)
              .when(size < 1e14, n * 1_000)
              .when(size < 1e17, n)
              .otherwise(F.call_function("div", n, F.lit(1000))))  # integral division, exact
    return F.timestamp_micros(micros)


def as_timestamp(df: DataFrame, name: str) -> Column:
    """The column as a UTC timestamp; what cannot be read becomes null (never an error), and is quarantined.

    * timestamps and dates as they are (tz-naive ones are UTC: the session's time zone);
    * integers are epochs whose unit is told by magnitude (what a timestamp from 1973 to 5138 needs): below
      1e11 seconds, below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds (pandas' timestamps,
      read as epoch nanoseconds);
    * text: ISO-8601 (``2024-03-01``, ``2024-03-01 10:00:00``, ``2024-03-01T10:00:00.123+02:00``, ``...Z``),
      then ``yyyy/M/d[ H:mm[:ss]]``, ``yyyyMMdd``, and digits as an epoch. Day-first or month-first dates
      (``03/01/2024``) are ambiguous and not read.
    """
    dtype = df.schema[name].dataType
    c = F.col(name)
    if isinstance(dtype, StringType):
        text = F.trim(c)
        return F.coalesce(
            F.try_to_timestamp(text),
            *[F.try_to_timestamp(text, F.lit(fmt)) for fmt in _TEXT_FORMATS],
            F.when(text.rlike(r"^\d{8}$"), F.try_to_timestamp(text, F.lit("yyyyMMdd"))),
            F.when(text.rlike(r"^-?\d{9,19}$"), _from_epoch(text)),
        )
    if isinstance(dtype, IntegerType | LongType):
        return _from_epoch(c)
    return c.cast("timestamp")


def event_date_span(events: DataFrame, not_after: dt.datetime) -> tuple[dt.date, dt.date] | None:
    """UTC dates of the earliest and the latest plausible ``event_ts`` (a backfill runs *as of* the latest; a lake's
    run calendar starts at the earliest), in one pass; ``None`` without any.

    Args:
        events: conformed source events.
        not_after: UTC wall clock plus the allowed skew (``IngestConfig.bounds(...).latest``): later events
            are quarantined, never a run date. The latest date returned is never after today (UTC) either: a run
            date is never in the future.
    """
    ts = as_timestamp(events, "event_ts")
    plausible = F.when(ts <= F.lit(not_after), F.to_date(ts))
    row = events.select(F.min(plausible).alias("first"), F.max(plausible).alias("last")).first()
    if row is None or row["last"] is None:
        return None
    today = dt.datetime.now(dt.UTC).date()
    return min(row["first"], today), min(row["last"], today)
