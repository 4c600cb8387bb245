"""Delta write, read, time travel, partition replacement and upsert through a real session."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import functions as F

from spark_jobs.delta_io import (
    latest_version,
    read_run_date,
    read_table,
    replace_run_date,
    replace_table,
    replace_where,
    run_date_metadata,
    upsert,
)


def test_write_read_time_travel(spark, tmp_path):
    path = str(tmp_path / "t")
    assert latest_version(spark, path) is None
    spark.range(3).write.format("delta").save(path)
    spark.range(10).write.format("delta").mode("overwrite").save(path)
    assert latest_version(spark, path) == 1
    assert read_table(spark, path).count() == 10
    assert read_table(spark, path, version=0).count() == 3


def test_replace_where_is_idempotent(spark, tmp_path):
    path = str(tmp_path / "events")
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    df = spark.createDataFrame([(1, day1), (2, day1), (3, day2)], "id int, event_date date")
    for _ in range(2):
        for day in (day1, day2):
            part = df.where(F.col("event_date") == F.lit(day))
            replace_where(part, path, f"event_date = '{day}'", ["event_date"])
    assert read_table(spark, path).count() == 3
    replace_where(df.where("id = 1"), path, f"event_date = '{day1}'", ["event_date"])
    assert sorted(r.id for r in read_table(spark, path).collect()) == [1, 3]


def test_replace_run_date_replaces_one_date_and_records_it(spark, tmp_path):
    path = str(tmp_path / "snapshots")
    day1, day2, never = dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)
    assert run_date_metadata(spark, path, day1) is None  # no table yet
    rows = spark.createDataFrame([(1, day1), (2, day1), (3, day2)], "id int, run_date date")
    for _ in range(2):  # a re-run replaces, never appends
        for day in (day1, day2):
            replace_run_date(rows.where(F.col("run_date") == F.lit(day)), path, day, {"settings": "a"})
    assert sorted(r.id for r in read_run_date(spark, path, day1).collect()) == [1, 2]
    assert [r.id for r in read_run_date(spark, path, day2).collect()] == [3]
    # a date written empty is told apart from a date never written
    replace_run_date(rows.where("false"), path, day1, {"settings": "b"})
    assert read_run_date(spark, path, day1).count() == 0
    assert run_date_metadata(spark, path, day1) == {"run_date": "2024-01-01", "settings": "b"}
    assert run_date_metadata(spark, path, day2) == {"run_date": "2024-01-02", "settings": "a"}
    assert run_date_metadata(spark, path, never) is None
    assert read_table(spark, path).count() == 1  # day2's row, untouched by day1's rewrites


def test_replace_table_from_itself_keeps_the_old_version(spark, tmp_path):
    path = str(tmp_path / "current")
    replace_table(spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string"), path)
    current = read_table(spark, path)
    # the new snapshot reuses rows of the table it replaces (as content_embeddings does)
    replace_table(current.where("id = 2").unionByName(spark.createDataFrame([(3, "c")], "id int, v string")), path)
    assert sorted(r.id for r in read_table(spark, path).collect()) == [2, 3]
    assert sorted(r.id for r in read_table(spark, path, version=0).collect()) == [1, 2]


def test_upsert_updates_and_inserts(spark, tmp_path):
    path = str(tmp_path / "entities")
    upsert(spark, spark.createDataFrame([("a", "x"), ("b", "y")], "k string, v string"), path, ["k"])
    upsert(spark, spark.createDataFrame([("b", "z"), ("c", "w")], "k string, v string"), path, ["k"])
    assert {(r.k, r.v) for r in read_table(spark, path).collect()} == {("a", "x"), ("b", "z"), ("c", "w")}
