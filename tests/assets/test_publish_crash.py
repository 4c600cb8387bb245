"""Crash safety of a published-table write: a process killed while it writes a table leaves the previous
version intact and readable (Spark and deltalake), its data files orphaned outside the Delta log, and the
re-run completes. The whole-publication case (killed between tables) is in test_publish_assets.py. Killing a
writer process is slow; a write that fails inside Spark is the fast test of the same property.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from spark_jobs.delta_io import latest_version, read_table
from spark_jobs.publish import write_publication_table
from tests.assets.publish_fixtures import kill_when, spawn

DAY = dt.date(2024, 6, 30)

#: Child process: one Delta write of the same table, made slow (one row per task, each task sleeps) so that
#: data files land one by one long before the commit.
SLOW_WRITER = """
import datetime as dt, sys, time
from pyspark.sql import functions as F
from spark_jobs.publish import write_publication_table
from hir_pipeline.settings import cache_dir
from spark_jobs.session import build_spark_session, ensure_delta_jars

path, day, tasks = sys.argv[1], dt.date.fromisoformat(sys.argv[2]), int(sys.argv[3])
spark = build_spark_session(jars=ensure_delta_jars(cache_dir()), master="local[1]", app_name="slow-writer",
                            conf={"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"})
slow = F.udf(lambda i: (time.sleep(1.5), f"new-{i}")[1], "string")
df = spark.range(0, tasks, 1, tasks).select(F.col("id"), slow("id").alias("payload"), F.lit(day).alias("run_date"))
print("writing", flush=True)
write_publication_table(df, path, day, "2")
print("committed", flush=True)
"""


def _data_files(path: Path) -> set[Path]:
    return {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_failed_write_leaves_the_previous_version_whole(spark, tmp_path):
    path = str(tmp_path / "cluster_assignments")
    old = spark.createDataFrame([(i, f"old-{i}", DAY) for i in range(4)], "id long, payload string, run_date date")
    write_publication_table(old, path, DAY, "1")
    rows = spark.range(0, 4, 1, 4).select(
        "id",
        # one task fails; the others may already have written their data files
        F.when(F.col("id") == 3, F.raise_error(F.lit("task failed mid-write"))).otherwise(
            F.concat(F.lit("new-"), F.col("id").cast("string"))).alias("payload"),
        F.lit(DAY).alias("run_date"),
    )
    with pytest.raises(Exception, match="task failed mid-write"):
        write_publication_table(rows, path, DAY, "2")
    assert latest_version(spark, path) == 0
    assert sorted(r.payload for r in read_table(spark, path).collect()) == [f"old-{i}" for i in range(4)]
    assert DeltaTable(path).to_pyarrow_table().num_rows == 4


@pytest.mark.slow
def test_killed_mid_write_leaves_previous_version_readable_and_rerun_completes(spark, tmp_path):
    path = tmp_path / "cluster_assignments"
    old = spark.createDataFrame([(i, f"old-{i}", DAY) for i in range(50)], "id long, payload string, run_date date")
    write_publication_table(old, str(path), DAY, "1")
    assert latest_version(spark, str(path)) == 0
    before = _data_files(path)

    proc = spawn(["-c", SLOW_WRITER, str(path), str(DAY), "6"], tmp_path / "child.log")
    kill_when(proc, lambda: len(_data_files(path) - before) >= 1)
    orphans = _data_files(path) - before
    assert orphans, "the child was killed before it wrote any data file"

    # the commit never happened: version 0 is still the latest, whole and readable by both engines
    assert latest_version(spark, str(path)) == 0
    assert not (path / "_delta_log" / f"{1:020d}.json").exists()
    rows = read_table(spark, str(path)).collect()
    assert sorted(r.payload for r in rows) == sorted(f"old-{i}" for i in range(50))
    table = DeltaTable(str(path))
    assert table.version() == 0 and table.to_pyarrow_table().num_rows == 50
    referenced = {Path(u).name for u in table.file_uris()}
    assert not {p.name for p in orphans} & referenced  # the half-written files are not part of any version

    # the re-run completes and replaces the date's rows exactly once
    new = spark.createDataFrame([(i, f"new-{i}", DAY) for i in range(6)], "id long, payload string, run_date date")
    write_publication_table(new, str(path), DAY, "2")
    assert latest_version(spark, str(path)) == 1
    assert sorted(r.payload for r in read_table(spark, str(path)).collect()) == sorted(f"new-{i}" for i in range(6))
    assert read_table(spark, str(path), version=0).where(F.col("payload").startswith("old")).count() == 50
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 6
