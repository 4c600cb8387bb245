"""One lake per source: a lake records the source its first ingestion read, and refuses to ingest another one.

Two sources in one lake would mix their entities, events and models without a trace (the same IDs meaning different
things, a night of one source replacing a day of the other). The first ingestion into a lake records, as properties
of its ``events`` Delta table, the identity of the source (:meth:`SourceSpec.identity`) and the first event date in
the lake (where the run calendar starts, ``assets.partitions``). Every later ingestion compares its source with the
recorded one before writing anything. A lake written before these properties existed adopts the source of its next
ingestion.

The properties live in the Delta log, so they travel with the table (any store Delta supports) and are read back
without Spark by ``deltalake`` (:func:`recorded_lake_source`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.delta_io import table_exists

#: Table properties of ``events`` holding the lake's source and its first event date.
SOURCE_PROPERTY, FIRST_EVENT_DATE_PROPERTY = "hir.source", "hir.first_event_date"


class LakeSourceMismatch(ValueError):
    """The lake was built from another source (the message says which, and what to do)."""


@dataclass(frozen=True)
class LakeSource:
    """What a lake records of the source it was built from.

    Args:
        source: the source's identity (:meth:`spark_jobs.ingestion.sources.spec.SourceSpec.identity`).
        first_event_date: the earliest event date in the lake after its first ingestion (``YYYY-MM-DD``).
    """

    source: str
    first_event_date: str


def _properties(spark: SparkSession, events_path: str) -> dict[str, str]:
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.`{events_path}`").collect()
    return {r["key"]: r["value"] for r in rows}


def lake_source(spark: SparkSession, events_path: str) -> LakeSource | None:
    """The source recorded on the lake's ``events`` table, or ``None`` (no table yet, or none recorded)."""
    if not table_exists(spark, events_path):
        return None
    props = _properties(spark, events_path)
    if SOURCE_PROPERTY not in props:
        return None
    return LakeSource(props[SOURCE_PROPERTY], props.get(FIRST_EVENT_DATE_PROPERTY, ""))


def refuse_other_source(spark: SparkSession, events_path: str, source: str, lake_root: str) -> LakeSource | None:
    """Raise :class:`LakeSourceMismatch` when the lake recorded a source other than ``source``; else return what the
    lake records (``None``: nothing yet).

    Args:
        spark: the session.
        events_path: the lake's ``events`` table.
        source: identity of the source this run reads.
        lake_root: the lake, for the message.
    """
    recorded = lake_source(spark, events_path)
    if recorded is not None and recorded.source != source:
        raise LakeSourceMismatch(
            f"lake {lake_root} was built from source {recorded.source}; this run reads {source}. Give each source "
            "its own lake (hir --lake DIR, HIR_LAKE, or the lake resource's root), or delete this lake to rebuild "
            "it from the new source")
    return recorded


def record_source(spark: SparkSession, events_path: str, source: str, event_date_column: str) -> LakeSource:
    """Record ``source`` and the lake's first event date on ``events`` unless a source is recorded already.

    Args:
        spark: the session.
        events_path: the lake's ``events`` table (written by this run).
        source: identity of the source this run read.
        event_date_column: the table's event date column.

    Returns:
        What the lake records now.
    """
    recorded = lake_source(spark, events_path)
    if recorded is not None:
        return recorded
    first = spark.read.format("delta").load(events_path).agg(F.min(event_date_column)).first()[0]
    recorded = LakeSource(source, first.isoformat() if first is not None else "")
    escaped = {k: v.replace("'", "\\'") for k, v in
               {SOURCE_PROPERTY: recorded.source, FIRST_EVENT_DATE_PROPERTY: recorded.first_event_date}.items()}
    spark.sql(f"ALTER TABLE delta.`{events_path}` SET TBLPROPERTIES ("
              + ", ".join(f"'{k}' = '{v}'" for k, v in escaped.items()) + ")")
    return recorded


def recorded_lake_source(events_path: str) -> LakeSource | None:
    """:func:`lake_source` without Spark (``deltalake``), for readers that have no session; ``None`` when the table
    cannot be read or records nothing."""
    try:
        import deltalake

        config = deltalake.DeltaTable(events_path).metadata().configuration
    except Exception:  # no lake yet, or a store that needs credentials this reader was not given
        return None
    if SOURCE_PROPERTY not in config:
        return None
    return LakeSource(config[SOURCE_PROPERTY], config.get(FIRST_EVENT_DATE_PROPERTY, ""))
