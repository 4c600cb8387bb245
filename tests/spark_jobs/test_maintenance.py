"""Delta housekeeping on a real lake: after it runs, the promised time travel still works, small files are
compacted, graph snapshots beyond the policy are gone (and read as never built), the kept ones are intact, and the
retention properties are set; commits aged past the window are vacuumed, the window's are not."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.delta_io import (
    latest_version,
    read_run_date,
    read_table,
    replace_run_date,
    run_date_metadata,
)
from spark_jobs.maintenance import (
    FILE_RETENTION,
    LOG_RETENTION,
    MaintenanceSettings,
    maintain_lake,
    run_dates_to_prune,
    totals,
)

DAYS = [dt.date(2024, 6, d) for d in (26, 27, 28, 29, 30)]


def test_policy_keeps_the_newest_run_dates_and_settings_guard_the_retention():
    days = [DAYS[2], DAYS[0], DAYS[4], DAYS[1], DAYS[4], DAYS[3]]
    assert run_dates_to_prune(days, keep=2) == DAYS[:3]
    assert run_dates_to_prune(days, keep=5) == [] == run_dates_to_prune([], keep=1)
    assert run_dates_to_prune([DAYS[0]], keep=1) == []  # the newest is never pruned
    with pytest.raises(ValueError, match="keep"):
        run_dates_to_prune(days, keep=0)
    with pytest.raises(ValueError, match="keep_graph_run_dates"):
        MaintenanceSettings(keep_graph_run_dates=0)
    with pytest.raises(ValueError, match="allow_short_retention"):
        MaintenanceSettings(time_travel_days=1)
    assert MaintenanceSettings(time_travel_days=1, allow_short_retention=True).retention == "interval 1 days"
    assert MaintenanceSettings().time_travel_days == 30


# --- a small real lake --------------------------------------------------------------------------------------------


def _lake(root: Path):
    return lambda table: str(root / table)


def _edges(spark: SparkSession, day: dt.date, n: int = 40) -> DataFrame:
    return (spark.range(n).select(F.concat(F.lit("u"), F.col("id").cast("string")).alias("src_id"),
                                  F.concat(F.lit("p"), (F.col("id") % 7).cast("string")).alias("dst_id"),
                                  (F.col("id") + 1.0).alias("weight"))
            .withColumn("run_date", F.lit(day)))


def write_small_lake(spark: SparkSession, root: Path) -> None:
    """``events`` in many small appends; ``graph_edges`` and ``node_embeddings`` one snapshot per run date, each
    written twice (a re-run), so every table has several versions and several small files per partition."""
    path = _lake(root)
    for i in range(6):
        (spark.range(i * 10, i * 10 + 10).withColumn("event_date", F.lit(DAYS[i % 2])).repartition(2)
         .write.format("delta").mode("append").partitionBy("event_date").save(path("events")))
    for day in DAYS:
        for _ in range(2):
            replace_run_date(_edges(spark, day).repartition(3), path("graph_edges"), day)
    for day in DAYS[-2:]:
        emb = spark.range(20).select(F.col("id").cast("string").alias("entity_id"),
                                     F.array(F.lit(1.0)).alias("embedding"), F.lit(day).alias("run_date"))
        replace_run_date(emb.repartition(4), path("node_embeddings"), day)


def snapshot_reads(spark: SparkSession, path: str) -> dict[int, list]:
    """Every version of the table -> its rows, sorted (what time travel must keep returning)."""
    return {v: sorted(tuple(r) for r in read_table(spark, path, v).collect())
            for v in range(latest_version(spark, path) + 1)}


@pytest.mark.slow
def test_after_housekeeping_every_version_in_the_window_reads_files_are_compacted_and_old_snapshots_are_gone(
        spark, tmp_path):
    root = tmp_path / "lake"
    write_small_lake(spark, root)
    path = _lake(root)
    tables = ("events", "graph_edges", "node_embeddings")
    before = {t: snapshot_reads(spark, path(t)) for t in tables}
    kept_rows = {d: read_run_date(spark, path("graph_edges"), d).count() for d in DAYS}

    reports = {r.table: r for r in maintain_lake(spark, path, MaintenanceSettings(keep_graph_run_dates=2))}

    # (a) every version written (all inside the 30-day window) still reads, with the same rows
    for t in tables:
        for version, rows in before[t].items():
            assert sorted(tuple(r) for r in read_table(spark, path(t), version).collect()) == rows, (t, version)
    # (b) compacted: one file per partition, fewer than before
    events = reports["events"]
    assert events.files_after == 2 < events.files_before and events.compacted["files_added"] == 2
    assert reports["node_embeddings"].files_after == 2 < reports["node_embeddings"].files_before
    assert read_table(spark, path("events")).count() == 60
    # (c) graph snapshots beyond the policy are gone and read as never built; the kept ones are intact
    edges = reports["graph_edges"]
    assert edges.pruned_run_dates == [str(d) for d in DAYS[:3]]
    assert edges.kept_run_dates == [str(d) for d in DAYS[3:]]
    assert reports["events"].pruned_run_dates == [] == reports["node_embeddings"].pruned_run_dates
    assert {r[0] for r in read_table(spark, path("graph_edges")).select("run_date").distinct().collect()} == set(
        DAYS[3:])
    for day in DAYS:
        pruned = day in DAYS[:3]
        assert (run_date_metadata(spark, path("graph_edges"), day) is None) == pruned, day
        assert read_run_date(spark, path("graph_edges"), day).count() == (0 if pruned else kept_rows[day])
    # (d) the retention properties match the window
    for t in tables:
        props = spark.sql(f"SHOW TBLPROPERTIES delta.`{path(t)}`").collect()
        props = {r["key"]: r["value"] for r in props}
        assert props[LOG_RETENTION] == props[FILE_RETENTION] == "interval 30 days", t
    # absent tables are reported, not created; a second run changes no property and prunes nothing
    assert not reports["quarantine"].present and not os.path.exists(path("quarantine"))
    assert totals(reports.values())["run_dates_pruned"] == 3
    again = {r.table: r for r in maintain_lake(spark, path, MaintenanceSettings(keep_graph_run_dates=2))}
    assert again["graph_edges"].properties_set == {} and again["graph_edges"].pruned_run_dates == []
    # a re-run of a pruned date rebuilds it: it is found again
    replace_run_date(_edges(spark, DAYS[0]), path("graph_edges"), DAYS[0])
    assert run_date_metadata(spark, path("graph_edges"), DAYS[0]) is not None


# --- commits aged past the window ---------------------------------------------------------------------------------


def age_commits(spark: SparkSession, path: str, versions: range, days_ago: float) -> None:
    """Make the commits ``versions`` of the table look ``days_ago`` old, as if written then: their log files'
    timestamps (commit time), the deletion time of the files they removed, and the data files they added.

    Delta judges age by exactly these: a version's time by its commit, VACUUM by a removed file's deletion time
    and, for safety, the data file's own modification time.
    """
    stamp = time.time() - days_ago * 86400
    ms = int(stamp * 1000)
    log_dir = Path(path) / "_delta_log"
    for version in versions:
        commit = log_dir / f"{version:020d}.json"
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] = ms
            if "commitInfo" in action:
                action["commitInfo"]["timestamp"] = ms
                if "inCommitTimestamp" in action["commitInfo"]:
                    action["commitInfo"]["inCommitTimestamp"] = ms
            if "add" in action:
                os.utime(Path(path) / action["add"]["path"], (stamp, stamp))
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
        (log_dir / f".{commit.name}.crc").unlink(missing_ok=True)  # the local file system's checksum of the old text
        os.utime(commit, (stamp, stamp))
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the cached table state predates the edit


@pytest.mark.slow
def test_vacuum_removes_what_only_versions_older_than_the_window_need(spark, tmp_path):
    path = str(tmp_path / "lake" / "events")
    for i in range(4):  # versions 0..3: each replaces the table
        spark.range(i, i + 5).write.format("delta").mode("overwrite").save(path)
    age_commits(spark, path, range(0, 2), days_ago=60)  # v0, v1 committed (and v0's files removed) 60 days ago
    age_commits(spark, path, range(2, 3), days_ago=20)  # v2 inside the window: v1's files removed 20 days ago
    assert [r[0] for r in read_table(spark, path, 0).collect()]  # readable before housekeeping

    [report] = maintain_lake(spark, lambda t: path, MaintenanceSettings(time_travel_days=30), tables=["events"])

    assert report.present and report.version_after > report.version_before
    # the table as it stood 30 days ago was v1 (committed 60 days ago, replaced 20 days ago): still readable,
    # as is every version since; v0, replaced 60 days ago, is outside the window and its files are gone
    for version in range(1, report.version_after + 1):
        assert read_table(spark, path, version).count() == 5, version
    assert sorted(r[0] for r in read_table(spark, path, 1).collect()) == [1, 2, 3, 4, 5]
    month_ago = (dt.datetime.now() - dt.timedelta(days=29)).strftime("%Y-%m-%d %H:%M:%S")
    as_of = spark.read.format("delta").option("timestampAsOf", month_ago).load(path)
    assert sorted(r[0] for r in as_of.collect()) == [1, 2, 3, 4, 5]
    with pytest.raises(Exception, match="(?i)not found|FileNotFound|does not exist"):
        read_table(spark, path, 0).collect()
