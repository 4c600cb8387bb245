"""Delta Lake writes with the semantics the pipeline promises.

* :func:`replace_run_date` — re-running a date replaces that date's rows, never duplicates them; the commit
  records the run date (:func:`run_date_metadata` finds it), so a date written empty is told apart from one never
  written. :func:`replace_where` is the general form (any predicate, e.g. the ingestion's event window).
* :func:`replace_table` — a table holding one current snapshot is replaced whole.
* :func:`upsert` — catalog tables (entities, relations) are merged by key, so a nightly source that
  holds only part of the catalog adds to it instead of erasing it.
* :func:`roll_back` — a write whose checks failed is undone in one commit (write-audit-publish).
* :func:`delete_run_dates` — old run-date snapshots are deleted in one labelled commit (housekeeping).
Every write is one Delta commit: a run killed mid-write leaves the previous version readable. A write that loses a
commit race to a concurrent writer (another run, a backfill, a second ``hir`` process) is retried from the start
against the new table version (:class:`WriteRetry`); any other error is raised at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

# The import registers Delta's conversion of its Java commit-conflict exceptions into the Python classes below;
# without it they surface as generic Spark errors that cannot be told apart from real failures.
import delta.exceptions.captured  # noqa: F401
from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.session import temporary_conf

#: Partition column of every table that keeps one snapshot per run date.
RUN_DATE = "run_date"

#: Every commit conflict delta-spark's ``delta.exceptions`` exposes: a concurrent writer committed first. The
#: write is safe to repeat from the start against the new table version.
COMMIT_CONFLICTS: tuple[type[Exception], ...] = (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    MetadataChangedException,
    ConcurrentTransactionException,
    ProtocolChangedException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
)

#: Spark conf prefix of the :class:`WriteRetry` settings, and the key of each field under it.
CONF_PREFIX = "spark.hir.deltaWrite."
CONF_KEYS = {"attempts": "attempts", "backoff_s": "backoffSeconds", "max_backoff_s": "maxBackoffSeconds"}

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class WriteRetry:
    """How a Delta write that lost a commit race is retried (Delta's optimistic concurrency: the second of two
    overlapping writers fails at commit and must re-plan against the version the first one wrote).

    Every field can be set per Spark session under :data:`CONF_PREFIX` (e.g. the ``spark`` resource's
    ``conf: {"spark.hir.deltaWrite.attempts": "8"}``); :meth:`from_conf` reads them.

    Args:
        attempts: tries in all, the first included (1: never retry).
        backoff_s: wait before the first retry, doubled before each further one, up to ``max_backoff_s``; each
            wait is scaled by a random factor in [0.5, 1] so that two writers that conflicted do not retry in step.
        max_backoff_s: the longest wait between two tries.
    """

    attempts: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        if not 0 <= self.backoff_s <= self.max_backoff_s:
            raise ValueError("backoff_s must be >= 0 and <= max_backoff_s")

    @classmethod
    def from_conf(cls, spark: SparkSession) -> WriteRetry:
        """The defaults, overridden by the session's ``spark.hir.deltaWrite.*`` settings (:data:`CONF_KEYS`)."""
        values = {}
        for field in dataclasses.fields(cls):
            raw = spark.conf.get(CONF_PREFIX + CONF_KEYS[field.name], None)
            if raw is not None:
                values[field.name] = type(field.default)(raw)  # int or float, as the default
        return cls(**values)

    def delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1)) * random.uniform(0.5, 1.0)


def retry_on_conflict(write: Callable[[], T], path: str, retry: WriteRetry) -> T:
    """Run ``write`` (one whole Delta write, re-planned on every call) until it commits, retrying only commit
    conflicts (:data:`COMMIT_CONFLICTS`), at most ``retry.attempts`` tries; each retry is logged as a warning."""
    for attempt in range(1, retry.attempts + 1):
        try:
            return write()
        except COMMIT_CONFLICTS as exc:
            if attempt == retry.attempts:
                raise
            wait = retry.delay_s(attempt)
            log.warning("Delta write to %s lost a commit race (%s, try %d of %d): retrying in %.1fs",
                        path, type(exc).__name__, attempt, retry.attempts, wait)
            time.sleep(wait)
    raise AssertionError("unreachable: the last try returns or raises")


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
    *,
    retry: WriteRetry | None = None,
    add_columns: bool = False,
) -> None:
    """Atomically replace the rows matching ``predicate`` with ``df`` (whose rows must match it).

    Args:
        df: the new rows.
        path: the table's path (created when missing).
        predicate: SQL predicate of the rows replaced (Delta ``replaceWhere``).
        partition_by: partition columns of the table.
        user_metadata: JSON-able facts recorded as the commit's ``userMetadata`` (``DESCRIBE HISTORY``).
        retry: how commit conflicts are retried; default :meth:`WriteRetry.from_conf` of ``df``'s session.
        add_columns: columns of ``df`` that the table lacks are added to it (Delta ``mergeSchema``) instead of
            failing the write.
    """
    writer = df.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
    if add_columns:  # a table written by an older release gains the new columns; its older rows read null there
        writer = writer.option("mergeSchema", "true")
    if user_metadata is not None:
        writer = writer.option("userMetadata", json.dumps(dict(user_metadata), sort_keys=True))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    retry_on_conflict(lambda: writer.save(path), path, retry or WriteRetry.from_conf(df.sparkSession))


def replace_table(df: DataFrame, path: str, *, retry: WriteRetry | None = None, add_columns: bool = False) -> None:
    """Atomically replace the whole table at ``path`` with ``df``; earlier versions stay readable (time travel).

    ``df`` may be computed from the table it replaces: Delta reads the version it planned against, and the
    overwrite only marks that version's files removed. ``retry``: as in :func:`replace_where`. ``add_columns``:
    columns of ``df`` that the table lacks are added to it (Delta ``mergeSchema``) instead of failing the write.
    """
    writer = df.write.format("delta").mode("overwrite")
    if add_columns:
        writer = writer.option("mergeSchema", "true")
    retry_on_conflict(lambda: writer.save(path), path, retry or WriteRetry.from_conf(df.sparkSession))


def replace_run_date(
    df: DataFrame,
    path: str,
    day: dt.date,
    user_metadata: Mapping[str, Any] | None = None,
    *,
    retry: WriteRetry | None = None,
    add_columns: bool = False,
) -> None:
    """Replace the ``run_date = day`` partition of a run-date-partitioned table with ``df``, in one Delta commit.

    The commit's ``userMetadata`` records ``{"run_date": day, **user_metadata}``, so :func:`run_date_metadata`
    tells a snapshot that was written empty from one never written.

    Args:
        df: the run's rows (all with ``run_date = day``).
        path: the table's path (created, partitioned by ``run_date``, when missing).
        day: the run date replaced.
        user_metadata: more JSON-able facts about the snapshot (e.g. the settings it was built with).
        retry, add_columns: as in :func:`replace_where`.
    """
    replace_where(df, path, f"{RUN_DATE} = '{day}'", [RUN_DATE], {**(user_metadata or {}), RUN_DATE: str(day)},
                  retry=retry, add_columns=add_columns)


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
               .orderBy(F.col("version").desc()).select("version", "userMetadata").collect())
    undone: set[int] = set()  # commits a later :func:`roll_back` undid: their snapshot is not in the table
    for row in history:
        try:
            meta = json.loads(row["userMetadata"])
        except (TypeError, ValueError):
            continue
        if not isinstance(meta, dict) or row["version"] in undone:
            continue
        undone.update(meta.get(ROLLED_BACK, ()))
        if str(day) in meta.get(PRUNED, ()):  # deleted by :func:`delete_run_dates` after any write of it
            return None
        if meta.get(RUN_DATE) == str(day):
            return meta
    return None


#: ``userMetadata`` key of a :func:`roll_back` commit: the versions it undid.
ROLLED_BACK = "rolled_back"
#: ``userMetadata`` key of a :func:`delete_run_dates` commit: the run dates it deleted.
PRUNED = "pruned_run_dates"
#: Spark conf Delta records as the next commit's ``userMetadata`` (the only way to label RESTORE and DELETE).
_COMMIT_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def _labelled(spark: SparkSession, meta: Mapping[str, Any], action: Callable[[], T]) -> T:
    """Run ``action`` (one Delta command) with ``meta`` recorded as its commit's ``userMetadata``."""
    with temporary_conf(spark, _COMMIT_METADATA_CONF, json.dumps(dict(meta), sort_keys=True)):
        return action()


def delete_run_dates(spark: SparkSession, path: str, days: Sequence[dt.date], *,
                     retry: WriteRetry | None = None) -> None:
    """Delete the ``run_date`` snapshots ``days`` of the table at ``path``, in one labelled Delta commit.

    On a table partitioned by ``run_date`` the delete only drops files from the log (no data is rewritten); the
    files stay readable by time travel until VACUUM removes them. The commit records ``{"pruned_run_dates":
    [days]}``, so :func:`run_date_metadata` no longer finds them (a deleted date reads as never written, not as
    written empty) until a later write of the date.

    Args:
        spark: the session.
        path: the table (run-date partitioned).
        days: the run dates deleted; nothing happens when empty.
        retry: as in :func:`replace_where`; default :meth:`WriteRetry.from_conf` of ``spark``.
    """
    if not days:
        return
    dates = sorted({str(d) for d in days})
    predicate = F.col(RUN_DATE).isin([dt.date.fromisoformat(d) for d in dates])
    retry_on_conflict(lambda: _labelled(spark, {PRUNED: dates}, lambda: DeltaTable.forPath(spark, path)
                                        .delete(predicate)), path, retry or WriteRetry.from_conf(spark))


class WrittenSince(RuntimeError):
    """Another writer committed to a table after the commits that were to be rolled back."""


def roll_back(spark: SparkSession, path: str, before: int | None, written: int) -> int:
    """Undo the commits ``before + 1 .. written`` of the table at ``path``, in one new commit.

    The table returns to version ``before`` (Delta ``RESTORE``); a table that did not exist before (``before`` is
    None) is emptied. The commit records ``{"rolled_back": [versions]}``, so :func:`run_date_metadata` no longer
    finds the run dates those commits wrote. Earlier versions stay readable (time travel).

    Args:
        spark: the session.
        path: the table.
        before: its version before the commits to undo (None: there was no table).
        written: the last commit to undo; it must still be the table's latest version.

    Returns:
        The version of the rollback commit.

    Raises:
        WrittenSince: another writer committed after ``written``; nothing is changed, since restoring would also
            undo that writer's commit.
    """
    current = latest_version(spark, path)
    if current != written:
        raise WrittenSince(f"{path}: version {current} was committed after version {written}, which was to be "
                           f"rolled back; nothing was rolled back")
    undone = list(range(0 if before is None else before + 1, written + 1))
    table = DeltaTable.forPath(spark, path)
    _labelled(spark, {ROLLED_BACK: undone}, table.delete if before is None else lambda: table.restoreToVersion(before))
    return latest_version(spark, path)


def upsert(
    spark: SparkSession,
    df: DataFrame,
    path: str,
    keys: Sequence[str],
    *,
    newer: str | None = None,
    retry: WriteRetry | None = None,
) -> None:
    """Merge ``df`` into the table by ``keys``: changed rows are updated, new ones inserted.

    Args:
        spark: the session.
        df: the incoming rows (one per key).
        path: the table's path (created from ``df`` when missing).
        keys: the columns identifying a row.
        newer: a column ordering the versions of a row (e.g. the run date that wrote it). A stored row is replaced
            only by an incoming one whose value is >= its own (or when it has none), so re-running an old date never
            brings back an older version; new keys are inserted whatever their value. The column alone is no
            change: an unchanged row keeps the value of the write that last changed it and is not rewritten.
        retry: as in :func:`replace_where` (a conflict repeats the whole upsert, the existence check included).

    Columns of ``df`` that the table lacks are added to it (null in the rows already there).
    """
    retry_on_conflict(lambda: _merge(spark, df, path, keys, newer), path, retry or WriteRetry.from_conf(spark))


def _merge(spark: SparkSession, df: DataFrame, path: str, keys: Sequence[str], newer: str | None) -> None:
    """One try of :func:`upsert`: create the table, or merge into it."""
    if not table_exists(spark, path):
        df.write.format("delta").mode("overwrite").save(path)
        return
    target = DeltaTable.forPath(spark, path)
    stored = set(target.toDF().columns)
    added = [c for c in df.columns if c not in stored]
    compared = [c for c in df.columns if c in stored and c not in keys and c != newer]
    changed = ("true" if set(added) - {newer} else
               " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in compared) or "false")
    if newer is not None and newer in stored:
        changed = f"({changed}) AND (t.`{newer}` IS NULL OR s.`{newer}` >= t.`{newer}`)"
    merge = target.alias("t").merge(df.alias("s"), " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys))
    if added:
        merge = merge.withSchemaEvolution()  # without it, Delta drops the source's extra columns silently
    merge.whenMatchedUpdateAll(condition=changed).whenNotMatchedInsertAll().execute()
