"""One lake per source: the first ingestion records its source and first event date on ``events`` (real Delta
table properties, read back with Spark and with ``deltalake``); another source is refused."""

from __future__ import annotations

import datetime as dt

import pytest

from spark_jobs.delta_io import latest_version
from spark_jobs.ingestion.lake_source import (
    LakeSource,
    LakeSourceMismatch,
    lake_source,
    record_source,
    recorded_lake_source,
    refuse_other_source,
)
from spark_jobs.ingestion.sources.spec import SourceSpec


def _events(spark, path, days):
    rows = [(f"u{i}", "p1", dt.date.fromisoformat(d)) for i, d in enumerate(days)]
    spark.createDataFrame(rows, "user_id string, entity_id string, event_date date").write.format("delta").mode(
        "append").save(str(path))


@pytest.mark.slow
def test_the_first_ingestion_records_the_source_and_the_first_event_date(spark, tmp_path):
    events = str(tmp_path / "lake" / "events")
    assert lake_source(spark, events) is None and recorded_lake_source(events) is None  # no table yet
    _events(spark, events, ["2023-05-02", "2023-04-30", "2023-06-01"])
    assert lake_source(spark, events) is None  # a table, nothing recorded: an older lake adopts its next source
    recorded = record_source(spark, events, "file:///data/a", "event_date")
    assert recorded == LakeSource("file:///data/a", "2023-04-30")
    assert lake_source(spark, events) == recorded == recorded_lake_source(events)
    # Recorded once: a later run neither changes it nor commits again.
    version = latest_version(spark, events)
    _events(spark, events, ["2020-01-01"])
    assert record_source(spark, events, "file:///data/a", "event_date") == recorded
    assert latest_version(spark, events) == version + 1


@pytest.mark.slow
def test_another_source_is_refused_naming_both_and_the_way_out(spark, tmp_path):
    events = str(tmp_path / "lake" / "events")
    refuse_other_source(spark, events, "movielens", str(tmp_path / "lake"))  # no lake yet: anything goes
    _events(spark, events, ["2023-05-02"])
    record_source(spark, events, "movielens", "event_date")
    refuse_other_source(spark, events, "movielens", str(tmp_path / "lake"))
    with pytest.raises(LakeSourceMismatch) as refused:
        refuse_other_source(spark, events, "file:///data/b", str(tmp_path / "lake"))
    message = str(refused.value)
    assert f"lake {tmp_path / 'lake'} was built from source movielens; this run reads file:///data/b" in message
    assert "--lake" in message and "HIR_LAKE" in message
    assert isinstance(refused.value, ValueError)  # the CLI prints it as one line, exit status 2


def test_a_source_identity_is_its_name_its_generator_settings_or_its_absolute_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert SourceSpec("movielens").identity == "movielens"
    assert SourceSpec("synthetic", synthetic_seed=3, synthetic_events=500).identity == "synthetic(seed=3, events=500)"
    assert SourceSpec("synthetic").identity != SourceSpec("synthetic", synthetic_seed=8).identity
    assert SourceSpec("src").identity == SourceSpec(str(tmp_path / "src") + "/").identity == (tmp_path / "src").as_uri()
    assert SourceSpec("s3a://bucket/exports/").identity == "s3a://bucket/exports"
    # successive exports in dated folders: one source, named once
    assert SourceSpec("/exports/2024-06-30", source_id="shop").identity == SourceSpec(
        "/exports/2024-07-01", source_id="shop").identity == "shop"


def test_the_run_calendar_starts_at_the_lakes_first_event_date(spark, tmp_path, monkeypatch):
    from assets.partitions import FALLBACK_START, partitions_start

    monkeypatch.delenv("HIR_PARTITIONS_START", raising=False)
    monkeypatch.setenv("HIR_LAKE", str(tmp_path / "lake"))
    assert partitions_start() == FALLBACK_START  # no lake yet
    _events(spark, tmp_path / "lake" / "events", ["2019-02-03", "2019-03-01"])
    record_source(spark, str(tmp_path / "lake" / "events"), "movielens", "event_date")
    assert partitions_start() == "2019-02-03"
    monkeypatch.setenv("HIR_PARTITIONS_START", "2018-01-01")
    assert partitions_start() == "2018-01-01"
