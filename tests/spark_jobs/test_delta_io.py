"""Delta write, read, time travel, partition replacement and upsert through a real session; commit conflicts
between two real concurrent writers of one table, retried or not."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from delta.exceptions import ConcurrentAppendException, ProtocolChangedException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.delta_io import (
    CONF_PREFIX,
    WriteRetry,
    WrittenSince,
    latest_version,
    read_run_date,
    read_table,
    replace_run_date,
    replace_table,
    replace_where,
    retry_on_conflict,
    roll_back,
    run_date_metadata,
    upsert,
)

NO_RETRY = WriteRetry(attempts=1)
QUICK_RETRY = WriteRetry(attempts=3, backoff_s=0.1, max_backoff_s=0.2)
DAY1, DAY2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)


def test_write_read_time_travel(spark, tmp_path):
    path = str(tmp_path / "t")
    assert latest_version(spark, path) is None
    spark.range(3).write.format("delta").save(path)
    spark.range(10).write.format("delta").mode("overwrite").save(path)
    assert latest_version(spark, path) == 1
    assert read_table(spark, path).count() == 10
    assert read_table(spark, path, version=0).count() == 3


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_replace_run_date_adds_new_columns_only_when_asked(spark, tmp_path):
    """A table written by an older release (fewer columns) takes a newer run's rows with ``add_columns``; the other
    dates keep their rows and read null in the new column."""
    path = str(tmp_path / "snapshots")
    replace_run_date(spark.createDataFrame([(1, DAY1), (2, DAY2)], "id int, run_date date").where("id = 1"), path,
                     DAY1)
    replace_run_date(spark.createDataFrame([(2, DAY2)], "id int, run_date date"), path, DAY2)
    wider = spark.createDataFrame([(3, "x", DAY2)], "id int, extra string, run_date date")
    with pytest.raises(Exception, match="(?i)schema"):
        replace_run_date(wider, path, DAY2, retry=NO_RETRY)
    assert sorted(r.id for r in read_table(spark, path).collect()) == [1, 2]  # the refused write left no trace
    replace_run_date(wider, path, DAY2, add_columns=True)
    assert sorted((r.id, r.extra) for r in read_table(spark, path).collect()) == [(1, None), (3, "x")]


@pytest.mark.slow
def test_replace_table_from_itself_keeps_the_old_version(spark, tmp_path):
    path = str(tmp_path / "current")
    replace_table(spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string"), path)
    current = read_table(spark, path)
    # the new snapshot reuses rows of the table it replaces (as content_embeddings does)
    replace_table(current.where("id = 2").unionByName(spark.createDataFrame([(3, "c")], "id int, v string")), path)
    assert sorted(r.id for r in read_table(spark, path).collect()) == [2, 3]
    assert sorted(r.id for r in read_table(spark, path, version=0).collect()) == [1, 2]


@pytest.mark.slow
def test_upsert_updates_and_inserts(spark, tmp_path):
    path = str(tmp_path / "entities")
    upsert(spark, spark.createDataFrame([("a", "x"), ("b", "y")], "k string, v string"), path, ["k"])
    upsert(spark, spark.createDataFrame([("b", "z"), ("c", "w")], "k string, v string"), path, ["k"])
    assert {(r.k, r.v) for r in read_table(spark, path).collect()} == {("a", "x"), ("b", "z"), ("c", "w")}


@pytest.mark.slow
def test_upsert_never_replaces_a_row_of_a_later_version_with_an_earlier_one(spark, tmp_path):
    """``newer``: re-running an old date keeps what a later date wrote; new keys are inserted all the same."""
    path, schema = str(tmp_path / "catalog"), "k string, v string, d date"
    day1, day2, day3 = dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)

    def merge(*rows: tuple) -> dict[str, tuple]:
        upsert(spark, spark.createDataFrame(list(rows), schema), path, ["k"], newer="d")
        return {r.k: (r.v, r.d) for r in read_table(spark, path).collect()}

    merge(("a", "title of day 2", day2))
    assert merge(("a", "title of day 1", day1), ("b", "only on day 1", day1)) == {
        "a": ("title of day 2", day2), "b": ("only on day 1", day1)}
    assert merge(("a", "day 2 corrected", day2))["a"] == ("day 2 corrected", day2)  # the same date: replaced
    version = latest_version(spark, path)
    assert merge(("a", "day 2 corrected", day3))["a"] == ("day 2 corrected", day2)  # unchanged: not rewritten
    metrics = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version = {version + 1}").first()
    assert metrics["operationMetrics"]["numTargetRowsUpdated"] == "0"


def test_upsert_adds_the_version_column_to_a_table_written_before_it(spark, tmp_path):
    """A catalog written without ``newer`` gets the column; its rows (null) count as older than any date."""
    path = str(tmp_path / "catalog")
    upsert(spark, spark.createDataFrame([("a", "x"), ("b", "y")], "k string, v string"), path, ["k"])
    day = dt.date(2024, 1, 1)
    rows = spark.createDataFrame([("a", "x", day), ("b", "y2", day), ("c", "z", day)], "k string, v string, d date")
    upsert(spark, rows, path, ["k"], newer="d")
    assert {(r.k, r.v, r.d) for r in read_table(spark, path).collect()} == {
        ("a", "x", None), ("b", "y2", day), ("c", "z", day)}


class Race:
    """Two writers of one table, the first overtaken: its rows wait in a Spark task (after its Delta transaction
    has read the table) until the second writer has committed, so the first one's commit always conflicts."""

    def __init__(self, folder: Path):
        self.started, self.go = folder / "started", folder / "go"

    def slow(self, df: DataFrame, column: str) -> DataFrame:
        """``df`` whose ``column`` (a string) is computed only once the second writer has committed."""
        started, go = str(self.started), str(self.go)

        def wait(value: str) -> str:
            import os
            import time

            open(started, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.05)
            return value

        return df.withColumn(column, F.udf(wait, "string")(F.col(column)))

    def run(self, first: Callable[[], None], second: Callable[[], None]) -> BaseException | None:
        """Start ``first`` (which writes a :meth:`slow` frame), run ``second`` once ``first`` is inside its write,
        then let ``first`` finish; returns what ``first`` raised, if anything."""
        self.started.unlink(missing_ok=True)
        self.go.unlink(missing_ok=True)
        raised: list[BaseException] = []

        def target() -> None:
            try:
                first()
            except BaseException as exc:  # handed to the test
                raised.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        deadline = time.monotonic() + 120
        while not self.started.exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.started.exists(), "the first writer never reached its write"
        second()
        self.go.touch()
        thread.join(180)
        assert not thread.is_alive()
        return raised[0] if raised else None


def _retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lost a commit race" in r.getMessage()]


def _merge_race(spark, race: Race, path: str, retry: WriteRetry) -> tuple[BaseException | None, set[str]]:
    """Entity ``a``, then ``b`` and ``c`` merged at once (``b`` overtaken): what ``b``'s upsert raised, and the keys."""
    def rows(key: str) -> DataFrame:
        return spark.createDataFrame([(key, "x")], "k string, v string")

    upsert(spark, rows("a"), path, ["k"])
    error = race.run(lambda: upsert(spark, race.slow(rows("b"), "k"), path, ["k"], retry=retry),
                     lambda: upsert(spark, rows("c"), path, ["k"], retry=retry))
    return error, {r.k for r in read_table(spark, path).collect()}


@pytest.mark.slow
def test_concurrent_merges_conflict_and_both_land_when_retried(spark, tmp_path, caplog):
    """Two runs merge new entities into one catalog table at once (a MERGE reads the whole table)."""
    caplog.set_level(logging.WARNING, logger="spark_jobs.delta_io")
    race = Race(tmp_path)
    error, landed = _merge_race(spark, race, str(tmp_path / "once"), NO_RETRY)
    assert isinstance(error, ConcurrentAppendException), error  # the race is real: without retries one fails
    assert landed == {"a", "c"} and not _retries(caplog)

    error, landed = _merge_race(spark, race, str(tmp_path / "retried"), QUICK_RETRY)
    assert error is None and landed == {"a", "b", "c"}
    assert len(_retries(caplog)) == 1 and "ConcurrentAppendException, try 1 of 3" in _retries(caplog)[0]


def _first_writes_race(spark, race: Race, path: str, retry: WriteRetry) -> tuple[BaseException | None, set]:
    """Two run dates written at once into a table not created yet (``day1`` overtaken): what ``day1``'s write
    raised, and the run dates in the table."""
    def rows(day: dt.date) -> DataFrame:
        return spark.createDataFrame([(str(day), day)], "k string, run_date date")

    error = race.run(lambda: replace_run_date(race.slow(rows(DAY1), "k"), path, DAY1, retry=retry),
                     lambda: replace_run_date(rows(DAY2), path, DAY2, retry=retry))
    return error, {r.run_date for r in read_table(spark, path).collect()}


@pytest.mark.slow
def test_concurrent_first_writes_of_two_run_dates_both_land_when_retried(spark, tmp_path, caplog):
    """Both writers create the table: the one that commits second sees a protocol change."""
    caplog.set_level(logging.WARNING, logger="spark_jobs.delta_io")
    race = Race(tmp_path)
    error, dates = _first_writes_race(spark, race, str(tmp_path / "once"), NO_RETRY)
    assert isinstance(error, ProtocolChangedException), error
    assert dates == {DAY2} and not _retries(caplog)

    path = str(tmp_path / "retried")
    error, dates = _first_writes_race(spark, race, path, QUICK_RETRY)
    assert error is None and dates == {DAY1, DAY2}
    assert run_date_metadata(spark, path, DAY1) == {"run_date": str(DAY1)}
    assert len(_retries(caplog)) == 1 and "ProtocolChangedException" in _retries(caplog)[0]


def test_a_write_error_that_is_no_conflict_is_raised_at_once(spark, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="spark_jobs.delta_io")
    path = str(tmp_path / "events")
    replace_where(spark.createDataFrame([(1, DAY1)], "id int, event_date date"), path, f"event_date = '{DAY1}'")
    started = time.monotonic()
    with pytest.raises(Exception, match="DELTA_REPLACE_WHERE_MISMATCH"):  # rows outside the replaced predicate
        replace_where(spark.createDataFrame([(2, DAY2)], "id int, event_date date"), path,
                      f"event_date = '{DAY1}'", retry=WriteRetry(attempts=5, backoff_s=30, max_backoff_s=30))
    assert time.monotonic() - started < 30 and not _retries(caplog)

    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        retry_on_conflict(broken, path, QUICK_RETRY)
    assert len(calls) == 1


def test_conflicts_are_retried_a_bounded_number_of_times(caplog):
    caplog.set_level(logging.WARNING, logger="spark_jobs.delta_io")
    calls = []

    def always_overtaken() -> None:
        calls.append(1)
        raise ConcurrentAppendException("files were added by a concurrent update")

    with pytest.raises(ConcurrentAppendException):
        retry_on_conflict(always_overtaken, "t", QUICK_RETRY)
    assert len(calls) == 3 and len(_retries(caplog)) == 2
    with pytest.raises(ValueError):
        WriteRetry(attempts=0)


def test_retry_settings_come_from_the_spark_conf(spark):
    assert WriteRetry.from_conf(spark) == WriteRetry()
    keys = {"attempts": "2", "backoffSeconds": "0.5", "maxBackoffSeconds": "4"}
    try:
        for key, value in keys.items():
            spark.conf.set(CONF_PREFIX + key, value)
        assert WriteRetry.from_conf(spark) == WriteRetry(attempts=2, backoff_s=0.5, max_backoff_s=4.0)
    finally:
        for key in keys:
            spark.conf.unset(CONF_PREFIX + key)
    delays = [WriteRetry(backoff_s=1, max_backoff_s=3).delay_s(n) for n in (1, 2, 3, 4)]
    assert 0.5 <= delays[0] <= 1 and 1 <= delays[1] <= 2 and 1.5 <= delays[2] <= 3 and 1.5 <= delays[3] <= 3


def _snapshot(spark, rows: list[tuple[int]], day: dt.date) -> DataFrame:
    return spark.createDataFrame([(i, day) for (i,) in rows], "id int, run_date date")


def _rows(spark, path: str, day: dt.date) -> set[int]:
    return {r.id for r in read_run_date(spark, path, day).collect()}


@pytest.mark.slow
def test_roll_back_restores_the_snapshot_before_the_write_and_forgets_its_run_date(spark, tmp_path):
    path = str(tmp_path / "edges")
    replace_run_date(_snapshot(spark, [(1,), (2,)], DAY1), path, DAY1)
    before = latest_version(spark, path)
    replace_run_date(_snapshot(spark, [(3,)], DAY1), path, DAY1, {"settings": "bad"})
    replace_run_date(_snapshot(spark, [(4,)], DAY2), path, DAY2)  # a second write of the same step
    written = latest_version(spark, path)

    version = roll_back(spark, path, before, written)
    assert version == written + 1
    assert _rows(spark, path, DAY1) == {1, 2} and _rows(spark, path, DAY2) == set()
    assert run_date_metadata(spark, path, DAY1) == {"run_date": str(DAY1)}  # the first write's, not the undone one
    assert run_date_metadata(spark, path, DAY2) is None
    assert {r.id for r in read_run_date(spark, path, DAY1, written - 1).collect()} == {3}  # time travel still works

    # rolling back twice is refused: the rollback commit now follows the version it would undo
    with pytest.raises(WrittenSince, match=f"version {version} was committed after version {written}"):
        roll_back(spark, path, before, written)
    # a later write of the date is found again
    replace_run_date(_snapshot(spark, [(5,)], DAY1), path, DAY1, {"settings": "good"})
    assert run_date_metadata(spark, path, DAY1) == {"run_date": str(DAY1), "settings": "good"}


def test_roll_back_of_the_first_write_leaves_an_empty_table_and_no_run_date(spark, tmp_path):
    path = str(tmp_path / "first")
    replace_run_date(_snapshot(spark, [(1,)], DAY1), path, DAY1)
    roll_back(spark, path, None, latest_version(spark, path))
    assert read_table(spark, path).count() == 0 and run_date_metadata(spark, path, DAY1) is None
