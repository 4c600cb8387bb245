"""Row-level validation of source tables into accepted (bronze) rows and quarantined rows.

Each ``label_*`` function returns the conformed source rows with two extra columns, ``_reason``
(null when the row is accepted, else a :class:`~hir_pipeline.contracts.QuarantineReason`) and
``_detail`` (a human-readable explanation). :func:`accepted` and :func:`quarantined` split the
labelled frame, so accepted + quarantined = read by construction; the asset check re-counts it.
Reasons are checked in a fixed order and a row gets the first that applies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from hir_pipeline.contracts import (
    DEFAULT_FUNNEL,
    ENTITY_TYPES,
    EVENT_DATE_COLUMN,
    SOURCE_TABLES,
    QuarantineReason,
)
from spark_jobs.delta_io import read_run_date, read_table
from spark_jobs.ingestion.reader import RAW_COLUMN, as_timestamp

R = QuarantineReason
REASON, DETAIL = "_reason", "_detail"
#: Column of the bronze catalog tables (entities, relations): the run date whose ingestion last changed the row. It
#: orders the versions of a catalog row, so re-running an old date never replaces a newer row with an older one.
INGESTED_FOR = "ingested_for"


@dataclass(frozen=True)
class IngestConfig:
    """What ingestion accepts (the accepted event types are the graph's funnel, ``GraphConfig.funnel``).

    Args:
        entity_types: accepted ``entity_type`` values, a subset of ``contracts.ENTITY_TYPES``; an entity of
            another type is quarantined.
        future_skew_hours: an event later than the end of the run date, or than the wall clock if that is later,
            by more than this is quarantined as ``future_timestamp`` (no run could ever place it); it is also
            never taken as a backfill's run date. Allows for clocks and time zones of the event producers.
        horizon_days: an event older than this many days before the run date is quarantined as
            ``timestamp_before_horizon`` (e.g. epoch 0 written for a missing time); ``None`` keeps all history.
    """

    entity_types: tuple[str, ...] = ENTITY_TYPES
    future_skew_hours: float = 24.0
    horizon_days: int | None = 3650

    def __post_init__(self) -> None:
        unknown = sorted(set(self.entity_types) - set(ENTITY_TYPES))
        if unknown:
            raise ValueError(f"entity_types {unknown} are not in the contract's {ENTITY_TYPES}")
        if not self.future_skew_hours >= 0:
            raise ValueError("future_skew_hours must be >= 0")
        if self.horizon_days is not None and self.horizon_days < 1:
            raise ValueError("horizon_days must be >= 1 (or None for no horizon)")

    def bounds(self, run_date: dt.date, now: dt.datetime | None = None) -> TimeBounds:
        """The plausible event times of a run of ``run_date`` (``now``: the wall clock, UTC, default now)."""
        now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
        end_of_day = dt.datetime.combine(run_date + dt.timedelta(days=1), dt.time())
        latest = max(end_of_day, now) + dt.timedelta(hours=self.future_skew_hours)
        earliest = None if self.horizon_days is None else run_date - dt.timedelta(days=self.horizon_days)
        return TimeBounds(latest=latest, earliest=earliest)


@dataclass(frozen=True)
class TimeBounds:
    """Event times a run accepts (:meth:`IngestConfig.bounds`).

    Args:
        latest: UTC timestamp; later events are quarantined as ``future_timestamp`` by every run.
        earliest: first accepted event date, or ``None``.
    """

    latest: dt.datetime
    earliest: dt.date | None = None

    def future(self, ts: Column) -> Column:
        return ts > F.lit(self.latest)


@dataclass(frozen=True)
class EventWindow:
    """Which event dates a run reads: one day (nightly) or everything up to a date (backfill).

    Args:
        end: the run date; events after it are not read by this run.
        start: first date read; ``None`` reads all history (a backfill).
    """

    end: dt.date
    start: dt.date | None = None

    @classmethod
    def day(cls, day: dt.date) -> EventWindow:
        return cls(end=day, start=day)

    @classmethod
    def of(cls, kind: str, day: dt.date) -> EventWindow:
        """``day``: that day's events (the nightly increment); ``all``: every event up to it (a backfill)."""
        if kind not in ("day", "all"):
            raise ValueError(f"unknown ingestion window {kind!r}: 'day' or 'all'")
        return cls.day(day) if kind == "day" else cls(end=day)

    def contains(self, date: Column) -> Column:
        """Whether the date column falls in the window."""
        inside = date <= F.lit(self.end)
        return inside if self.start is None else inside & (date >= F.lit(self.start))

    def predicate(self) -> str:
        """Delta ``replaceWhere`` predicate on ``event_date`` covering exactly the dates of the window."""
        pred = f"{EVENT_DATE_COLUMN} <= '{self.end}'"
        return pred if self.start is None else f"{pred} AND {EVENT_DATE_COLUMN} >= '{self.start}'"


def _read_mask(ts: Column, window: EventWindow, bounds: TimeBounds) -> Column:
    """Rows a run reads: those of its dates, plus every row no run can place on a day (a missing, unparseable or
    future timestamp), which every run reads and quarantines."""
    return ts.isNull() | bounds.future(ts) | window.contains(F.to_date(ts))


def events_read(raw: DataFrame, window: EventWindow, bounds: TimeBounds) -> DataFrame:
    """The source event rows a run with ``window`` reads (see :func:`_read_mask`)."""
    return raw.where(_read_mask(as_timestamp(raw, "event_ts"), window, bounds))


def events_outside(raw: DataFrame, window: EventWindow, bounds: TimeBounds) -> dict[str, int]:
    """Source events this run does not read because they belong to other run dates: ``before`` and ``after``
    its window (reported per run, so nothing is left unread without a count)."""
    ts = as_timestamp(raw, "event_ts")
    day = F.to_date(ts)
    unread = ~_read_mask(ts, window, bounds)
    before = day < F.lit(window.start) if window.start is not None else F.lit(False)
    row = raw.select(F.sum((unread & before).cast("long")).alias("before"),
                     F.sum((unread & ~before).cast("long")).alias("after")).first()
    return {"before": int(row["before"] or 0), "after": int(row["after"] or 0)}


def _first_missing(table: str) -> Column:
    """Name of the first required column that is null, or null."""
    required = [c.name for c in SOURCE_TABLES[table] if c.required]
    return F.coalesce(*[F.when(F.col(c).isNull(), F.lit(c)) for c in required])


def _bad_number(col: str) -> Column:
    c = F.col(col).cast("double")
    return F.isnan(c) | (F.abs(c) == float("inf"))


def _label(df: DataFrame, rules: list[tuple[Column, str, Column]]) -> DataFrame:
    """Apply ``(condition, reason, detail)`` rules in order to rows not yet labelled."""
    reason, detail = F.col(REASON), F.col(DETAIL)
    for cond, why, text in rules:
        hit = reason.isNull() & F.coalesce(cond, F.lit(False))
        df = df.withColumn(DETAIL, F.when(hit, text).otherwise(detail))
        df = df.withColumn(REASON, F.when(hit, F.lit(why)).otherwise(reason))
    return df


def _start(df: DataFrame) -> DataFrame:
    return df.withColumn(REASON, F.lit(None).cast("string")).withColumn(DETAIL, F.lit(None).cast("string"))


def row_hash(*cols: str) -> Column:
    """SHA-256 over the given columns (nulls distinguished from empty strings)."""
    return F.sha2(F.concat_ws("\u0001", *[F.coalesce(F.col(c).cast("string"), F.lit("\u0000")) for c in cols]), 256)


def label_entities(raw: DataFrame, entity_types: tuple[str, ...] = ENTITY_TYPES) -> DataFrame:
    """Label entity rows. An ``entity_id`` seen more than once keeps one row (the latest
    ``created_at``): exact copies go to quarantine as ``duplicate_entity_id``, conflicting ones as
    ``duplicate_entity_id_conflict``."""
    df = _start(raw.withColumn("_created", as_timestamp(raw, "created_at")))
    missing = _first_missing("entities")
    attrs = F.trim(F.col("attributes"))
    df = _label(df, [
        (missing.isNotNull(), R.MISSING_REQUIRED_FIELD, F.concat(F.lit("missing "), missing)),
        (~F.col("entity_type").isin(*entity_types), R.UNKNOWN_ENTITY_TYPE,
         F.concat(F.lit("entity_type '"), F.col("entity_type"), F.lit("' is not one of " + ",".join(entity_types)))),
        (F.col("created_at").isNotNull() & F.col("_created").isNull(), R.UNPARSEABLE_TIMESTAMP,
         F.concat(F.lit("created_at '"), F.col("created_at").cast("string"), F.lit("'"))),
        (F.col("attributes").isNotNull() & (~attrs.startswith("{") | F.get_json_object(attrs, "$").isNull()),
         R.INVALID_VALUE, F.lit("attributes is not a JSON object")),
    ])
    df = df.withColumn("_hash", row_hash("entity_type", "title", "description", "image_uri", "video_uri", "attributes"))
    valid = F.col(REASON).isNull()
    by_id = Window.partitionBy("entity_id", valid)
    rank = F.row_number().over(by_id.orderBy(F.col("_created").desc_nulls_last(), F.col("_hash").desc()))
    variants = F.size(F.collect_set("_hash").over(by_id))
    df = df.withColumn("_rank", rank).withColumn("_variants", variants)
    df = _label(df, [
        ((F.col("_rank") > 1) & (F.col("_variants") > 1), R.DUPLICATE_ENTITY_ID_CONFLICT,
         F.concat(F.lit("conflicts with the kept row of "), F.col("entity_id"), F.lit(" (latest created_at wins)"))),
        (F.col("_rank") > 1, R.DUPLICATE_ENTITY_ID, F.lit("exact copy of another row")),
    ])
    return df.withColumn("created_at", F.col("_created")).drop("_created", "_hash", "_rank", "_variants")


def label_relations(raw: DataFrame, known_ids: DataFrame) -> DataFrame:
    """Label relation rows against ``known_ids`` (one column ``entity_id``: every accepted entity)."""
    df = _start(raw.withColumn("weight", F.coalesce(F.col("weight").cast("double"), F.lit(1.0))))
    ids = known_ids.select(F.col("entity_id").alias("_id")).distinct()
    df = (
        df.join(ids.withColumn("_src_ok", F.lit(True)), F.col("src_id") == F.col("_id"), "left").drop("_id")
        .join(ids.withColumn("_dst_ok", F.lit(True)), F.col("dst_id") == F.col("_id"), "left").drop("_id")
    )
    missing = _first_missing("relations")
    df = _label(df, [
        (missing.isNotNull(), R.MISSING_REQUIRED_FIELD, F.concat(F.lit("missing "), missing)),
        (F.col("_src_ok").isNull(), R.DANGLING_REFERENCE,
         F.concat(F.lit("src_id '"), F.col("src_id"), F.lit("' is not an entity"))),
        (F.col("_dst_ok").isNull(), R.DANGLING_REFERENCE,
         F.concat(F.lit("dst_id '"), F.col("dst_id"), F.lit("' is not an entity"))),
        (_bad_number("weight") | (F.col("weight") <= 0), R.INVALID_VALUE,
         F.concat(F.lit("weight "), F.col("weight").cast("string"), F.lit(" is not finite and positive"))),
    ])
    valid = F.col(REASON).isNull()
    rank = F.row_number().over(
        Window.partitionBy("src_id", "dst_id", "relation", valid).orderBy(F.col(RAW_COLUMN))
    )
    df = _label(df.withColumn("_rank", rank), [
        (F.col("_rank") > 1, R.DUPLICATE_RELATION, F.lit("same (src_id, dst_id, relation) as an earlier row")),
    ])
    return df.drop("_src_ok", "_dst_ok", "_rank")


def label_events(
    raw: DataFrame,
    entities: DataFrame,
    window: EventWindow,
    bounds: TimeBounds,
    funnel: tuple[str, ...] = DEFAULT_FUNNEL,
    accepted_before: DataFrame | None = None,
) -> DataFrame:
    """Label the event rows this run reads.

    Args:
        raw: conformed source events.
        entities: every accepted entity (``entity_id``, ``entity_type``).
        window: the dates this run reads. Rows with a parseable timestamp outside it are not read
            (they belong to another run); rows whose timestamp is missing, unparseable or in the future
            cannot be placed on a day, so every run reads and quarantines them.
        bounds: the plausible event times (future and horizon limits, :meth:`IngestConfig.bounds`).
        funnel: accepted event types, shallow to deep.
        accepted_before: ``event_id`` of the events already accepted on dates before the window (bronze): a
            repeat of one is a duplicate, so nightly increments accept what a backfill accepts (the earliest).
    """
    ts = as_timestamp(raw, "event_ts")
    df = raw.withColumn("_ts", ts).withColumn(EVENT_DATE_COLUMN, F.to_date(F.col("_ts")))
    df = _start(df.where(_read_mask(F.col("_ts"), window, bounds)))
    users = entities.where(F.col("entity_type") == "user").select(F.col("entity_id").alias("_u"))
    items = entities.where(F.col("entity_type") != "user").select(F.col("entity_id").alias("_i"))
    df = (
        df.join(users.withColumn("_user_ok", F.lit(True)), F.col("user_id") == F.col("_u"), "left").drop("_u")
        .join(items.withColumn("_item_ok", F.lit(True)), F.col("entity_id") == F.col("_i"), "left").drop("_i")
    )
    too_old = (F.col(EVENT_DATE_COLUMN) < F.lit(bounds.earliest)) if bounds.earliest is not None else F.lit(False)
    missing = _first_missing("events")
    df = _label(df, [
        (missing.isNotNull(), R.MISSING_REQUIRED_FIELD, F.concat(F.lit("missing "), missing)),
        (~F.col("event_type").isin(*funnel), R.UNKNOWN_EVENT_TYPE,
         F.concat(F.lit("event_type '"), F.col("event_type"), F.lit("' is not one of " + ",".join(funnel)))),
        (F.col("_ts").isNull(), R.UNPARSEABLE_TIMESTAMP,
         F.concat(F.lit("event_ts '"), F.col("event_ts").cast("string"), F.lit("'"))),
        (bounds.future(F.col("_ts")), R.FUTURE_TIMESTAMP,
         F.concat(F.lit("event_ts "), F.col("_ts").cast("string"), F.lit(f" is after {bounds.latest} UTC"))),
        (too_old, R.TIMESTAMP_BEFORE_HORIZON,
         F.concat(F.lit("event_ts "), F.col("_ts").cast("string"), F.lit(f" is before the horizon {bounds.earliest}"))),
        (F.col("value").isNotNull() & _bad_number("value"), R.INVALID_VALUE, F.lit("value is not finite")),
        (F.col("_user_ok").isNull(), R.DANGLING_REFERENCE,
         F.concat(F.lit("user_id '"), F.col("user_id"), F.lit("' is not an entity of type user"))),
        (F.col("_item_ok").isNull(), R.DANGLING_REFERENCE,
         F.concat(F.lit("entity_id '"), F.col("entity_id"), F.lit("' is not a non-user entity"))),
    ])
    derived_id = F.concat(F.lit("derived:"), row_hash("user_id", "entity_id", "event_type", "_ts", "value"))
    df = df.withColumn("event_id", F.coalesce(F.col("event_id"), derived_id))
    if accepted_before is not None:
        seen = accepted_before.select(F.col("event_id").alias("_seen_id")).distinct().withColumn("_seen", F.lit(True))
        df = df.join(seen, F.col("event_id") == F.col("_seen_id"), "left").drop("_seen_id")
    else:
        df = df.withColumn("_seen", F.lit(None).cast("boolean"))
    df = _label(df, [
        (F.col("_seen").isNotNull(), R.DUPLICATE_EVENT_ID,
         F.concat(F.lit("event_id '"), F.col("event_id"), F.lit("' already accepted on an earlier date"))),
    ])
    valid = F.col(REASON).isNull()
    # the earliest copy wins, as a backfill of all dates would keep it
    rank = F.row_number().over(Window.partitionBy("event_id", valid).orderBy(F.col("_ts"), F.col(RAW_COLUMN)))
    df = _label(df.withColumn("_rank", rank), [
        (F.col("_rank") > 1, R.DUPLICATE_EVENT_ID,
         F.concat(F.lit("event_id '"), F.col("event_id"), F.lit("' already accepted"))),
    ])
    return (
        df.withColumn("event_ts", F.col("_ts"))
        .withColumn("value", F.col("value").cast("double"))
        .drop("_ts", "_user_ok", "_item_ok", "_rank", "_seen")
    )


def accepted(labelled: DataFrame, table: str) -> DataFrame:
    """Accepted rows with the bronze schema (contract columns, typed; events add ``event_date``)."""
    cols = [F.col(c.name).cast(c.ddl).alias(c.name) for c in SOURCE_TABLES[table]]
    if table == "events":
        cols.append(F.col(EVENT_DATE_COLUMN))
    return labelled.where(F.col(REASON).isNull()).select(*cols)


def catalog_rows(labelled: DataFrame, table: str, run_date: dt.date) -> DataFrame:
    """Accepted ``entities`` or ``relations`` rows in the bronze schema, stamped with the run date that ingests them
    (:data:`INGESTED_FOR`, the ``newer`` column of their merge into the catalog)."""
    if table not in ("entities", "relations"):
        raise ValueError(f"{table!r} is not a catalog table (entities, relations)")
    return accepted(labelled, table).withColumn(INGESTED_FOR, F.lit(run_date))


def quarantined(labelled: DataFrame, table: str, run_date: dt.date) -> DataFrame:
    """Quarantined rows in the ``quarantine`` table's schema: ``source_table, reason, detail, raw, run_date``."""
    return labelled.where(F.col(REASON).isNotNull()).select(
        F.lit(table).alias("source_table"),
        F.col(REASON).alias("reason"),
        F.col(DETAIL).alias("detail"),
        F.col(RAW_COLUMN).alias("raw"),
        F.lit(run_date).alias("run_date"),
    )


def split_counts(labelled: DataFrame) -> tuple[int, int]:
    """(accepted, quarantined) rows of a labelled frame, in one Spark action."""
    rows = labelled.groupBy(F.col(REASON).isNull().alias("ok")).count().collect()
    by = {r["ok"]: r["count"] for r in rows}
    return by.get(True, 0), by.get(False, 0)


def recount(spark: SparkSession, path: Callable[[str], str], day: dt.date, window: EventWindow
            ) -> tuple[dict[str, int], int]:
    """What a run wrote, re-read from the tables: quarantined rows per source table, and the window's events.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        day: the run date (the ``quarantine`` partition).
        window: the run's event window.
    """
    written = read_run_date(spark, path("quarantine"), day).groupBy("source_table").count().collect()
    events_now = read_table(spark, path("events")).where(window.predicate()).count()
    return {r["source_table"]: r["count"] for r in written}, events_now
