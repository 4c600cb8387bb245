"""Delta housekeeping of the lake: compaction, time-travel retention, VACUUM and pruning of old graph snapshots.

What the lake promises (README "Housekeeping"): every table, as it stood at any moment of the last
``time_travel_days`` days, stays readable by Delta time travel (``versionAsOf`` / ``timestampAsOf``). A version
committed inside the window only needs files that were removed from the table after it, hence inside the window
too; so VACUUM with that retention, and log retention at least that long, keep every such version readable.
Older versions may go.

Per table (:func:`maintain_table`), in this order:

1. the table properties ``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration`` are set to the
   window (only when they differ: no empty commit every week), so log cleanup at checkpoints and a VACUUM without
   a retention (anyone's, e.g. from SQL) keep the promise too;
2. graph snapshots (``graph_edges``, ``graph_nodes``, ``graph_views``: one snapshot per run date) older than the
   newest ``keep_graph_run_dates`` run dates are deleted (:func:`spark_jobs.delta_io.delete_run_dates`; a
   metadata-only delete, the files stay readable by time travel until VACUUM). The newest run date is never
   deleted; no other table is pruned. Pruning comes before compaction so that no deleted snapshot is rewritten;
3. OPTIMIZE (bin-packing compaction of small files; partitions with one file are left alone);
4. VACUUM with the window as retention. Delta's ``retentionDurationCheck`` stays on.

Old graph snapshots are deterministic functions of the bronze tables and the graph settings: a pruned date is
rebuilt by re-running it (``require_snapshot`` then says it is missing instead of reading it empty).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from hir_pipeline.contracts import LAKE_TABLES
from spark_jobs.delta_io import (
    RUN_DATE,
    WriteRetry,
    delete_run_dates,
    latest_version,
    retry_on_conflict,
    table_exists,
)
from spark_jobs.graph.snapshots import GRAPH_TABLES

#: Delta's default ``delta.deletedFileRetentionDuration`` (7 days): the margin its VACUUM safety check keeps for
#: readers and writers still using files that a newer version removed. A shorter window needs
#: ``allow_short_retention``.
DELTA_SAFE_RETENTION_DAYS = 7
LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceSettings:
    """Delta housekeeping of every lake table: OPTIMIZE, time-travel retention, VACUUM, old graph snapshots pruned.

    Args:
        time_travel_days: the time-travel window: every table as it stood at any moment of the last this many
            days stays readable (versionAsOf / timestampAsOf). Set as the tables' delta.logRetentionDuration and
            delta.deletedFileRetentionDuration, and used as VACUUM's retention.
        allow_short_retention: allow a time_travel_days below 7, Delta's default deleted-file retention (a
            VACUUM that short can delete files a long-running reader or writer still uses).
        optimize: compact small files (Delta OPTIMIZE) before VACUUM.
        vacuum: delete the files no version inside the time-travel window needs (Delta VACUUM).
        prune_graph_snapshots: delete the run dates of graph_edges, graph_nodes and graph_views older than the
            newest keep_graph_run_dates (a re-run of a pruned date rebuilds it).
        keep_graph_run_dates: how many of the newest run dates each graph table keeps (at least 1: the newest is
            never pruned).
    """

    time_travel_days: int = 30
    allow_short_retention: bool = False
    optimize: bool = True
    vacuum: bool = True
    prune_graph_snapshots: bool = True
    keep_graph_run_dates: int = 14

    def __post_init__(self) -> None:
        if self.time_travel_days < 1:
            raise ValueError("time_travel_days must be >= 1")
        if self.time_travel_days < DELTA_SAFE_RETENTION_DAYS and not self.allow_short_retention:
            raise ValueError(f"time_travel_days={self.time_travel_days} is below Delta's safe retention of "
                             f"{DELTA_SAFE_RETENTION_DAYS} days: set allow_short_retention to allow it")
        if self.keep_graph_run_dates < 1:
            raise ValueError("keep_graph_run_dates must be >= 1 (the newest run date is never pruned)")

    @property
    def retention(self) -> str:
        """The window as a Delta table-property interval."""
        return f"interval {self.time_travel_days} days"


@dataclass
class TableReport:
    """What housekeeping did to one table.

    Args:
        table: the lake table's name.
        present: whether a Delta table exists at its path (an absent one is skipped).
        files_before, files_after: data files of the current version, before and after.
        bytes_before, bytes_after: their total size.
        version_before, version_after: the table's latest Delta version, before and after.
        properties_set: the retention properties changed (empty when they already matched).
        pruned_run_dates: graph snapshots deleted.
        kept_run_dates: graph snapshots kept (graph tables only).
        compacted: files removed by OPTIMIZE / files it added.
        seconds: time spent on the table.
    """

    table: str
    present: bool = True
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    version_before: int | None = None
    version_after: int | None = None
    properties_set: dict[str, str] = field(default_factory=dict)
    pruned_run_dates: list[str] = field(default_factory=list)
    kept_run_dates: list[str] = field(default_factory=list)
    compacted: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _files_and_bytes(spark: SparkSession, path: str) -> tuple[int, int]:
    detail = DeltaTable.forPath(spark, path).detail().select("numFiles", "sizeInBytes").first()
    return int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)


def set_retention(spark: SparkSession, path: str, settings: MaintenanceSettings) -> dict[str, str]:
    """Set the retention properties of the table at ``path`` to the window where they differ.

    Args:
        spark: the session.
        path: the table.
        settings: the window.

    Returns:
        The properties changed, with their new values (empty: nothing was committed).
    """
    current = DeltaTable.forPath(spark, path).detail().select("properties").first()["properties"] or {}
    wanted = {LOG_RETENTION: settings.retention, FILE_RETENTION: settings.retention}
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if changed:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in changed.items())
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({props})")
    return changed


def run_dates_to_prune(run_dates: Sequence[dt.date], keep: int) -> list[dt.date]:
    """The run dates older than the newest ``keep`` (never the newest one).

    Args:
        run_dates: the snapshots a table holds (any order, duplicates allowed).
        keep: how many of the newest to keep (>= 1).
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    return sorted(set(run_dates), reverse=True)[keep:][::-1]


def prune_snapshots(spark: SparkSession, path: str, keep: int) -> tuple[list[dt.date], list[dt.date]]:
    """Delete the run-date snapshots of the table at ``path`` older than its newest ``keep``.

    Args:
        spark: the session.
        path: a run-date-partitioned table.
        keep: how many of the newest run dates stay.

    Returns:
        ``(pruned, kept)`` run dates, oldest first.
    """
    present = [r[0] for r in DeltaTable.forPath(spark, path).toDF().select(RUN_DATE).distinct().collect()]
    pruned = run_dates_to_prune(present, keep)
    delete_run_dates(spark, path, pruned)
    return pruned, sorted(set(present) - set(pruned))


def compact(spark: SparkSession, path: str) -> dict[str, int]:
    """OPTIMIZE the table at ``path`` (retried on commit conflicts); returns files removed and added."""
    def run():
        return DeltaTable.forPath(spark, path).optimize().executeCompaction()

    metrics = retry_on_conflict(run, path, WriteRetry.from_conf(spark)).select("metrics").first()["metrics"]
    return {"files_removed": int(metrics["numFilesRemoved"]), "files_added": int(metrics["numFilesAdded"])}


def maintain_table(spark: SparkSession, table: str, path: str, settings: MaintenanceSettings) -> TableReport:
    """Housekeeping of one table (see the module docstring for the steps and their order).

    Args:
        spark: the session.
        table: the lake table's name (graph tables are pruned).
        path: its path.
        settings: what to do.
    """
    import time

    start = time.monotonic()
    if not table_exists(spark, path):
        return TableReport(table, present=False)
    report = TableReport(table, version_before=latest_version(spark, path))
    report.files_before, report.bytes_before = _files_and_bytes(spark, path)
    report.properties_set = set_retention(spark, path, settings)
    if settings.prune_graph_snapshots and table in GRAPH_TABLES:
        pruned, kept = prune_snapshots(spark, path, settings.keep_graph_run_dates)
        report.pruned_run_dates, report.kept_run_dates = [str(d) for d in pruned], [str(d) for d in kept]
    if settings.optimize:
        report.compacted = compact(spark, path)
    if settings.vacuum:
        # The safety check compares with the table's deletedFileRetentionDuration, set to the window above.
        DeltaTable.forPath(spark, path).vacuum(settings.time_travel_days * 24.0)
    report.version_after = latest_version(spark, path)
    report.files_after, report.bytes_after = _files_and_bytes(spark, path)
    report.seconds = round(time.monotonic() - start, 2)
    log.info("housekeeping %s: %d -> %d files, versions %s -> %s, pruned %s", table, report.files_before,
             report.files_after, report.version_before, report.version_after, report.pruned_run_dates or "nothing")
    return report


def maintain_lake(spark: SparkSession, path: Callable[[str], str], settings: MaintenanceSettings | None = None,
                  tables: Sequence[str] = LAKE_TABLES) -> list[TableReport]:
    """Housekeeping of every Delta table of the lake; tables not written yet are reported absent.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        settings: what to do (default :class:`MaintenanceSettings`'s defaults).
        tables: the lake tables to maintain (default every table the lake knows).
    """
    settings = settings or MaintenanceSettings()
    return [maintain_table(spark, table, path(table), settings) for table in tables]


def totals(reports: Sequence[TableReport]) -> dict[str, int]:
    """Sums over the present tables: tables, files and bytes before/after, snapshots pruned."""
    present = [r for r in reports if r.present]
    return {
        "tables": len(present),
        "files_before": sum(r.files_before for r in present),
        "files_after": sum(r.files_after for r in present),
        "bytes_before": sum(r.bytes_before for r in present),
        "bytes_after": sum(r.bytes_after for r in present),
        "run_dates_pruned": sum(len(r.pruned_run_dates) for r in present),
    }


__all__ = ["MaintenanceSettings", "TableReport", "maintain_lake", "maintain_table", "run_dates_to_prune", "totals"]
