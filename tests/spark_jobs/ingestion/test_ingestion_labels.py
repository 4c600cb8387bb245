"""Every quarantine reason from crafted rows, and accepted + quarantined = read."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import QuarantineReason as R
from spark_jobs.ingestion.labels import (
    EventWindow,
    IngestConfig,
    accepted,
    events_outside,
    events_read,
    label_entities,
    label_events,
    label_relations,
    quarantined,
    split_counts,
)
from spark_jobs.ingestion.reader import conform

RUN = dt.date(2024, 3, 2)
#: The run's time limits as a nightly run the morning after sees them.
BOUNDS = IngestConfig().bounds(RUN, now=dt.datetime(2024, 3, 3, 6))


def _entities(spark):
    rows = [
        ("u1", "user", None, None, None, None, "2024-01-01 00:00:00"),
        ("u2", "user", None, None, None, None, None),
        ("p1", "product", "Shoe", "red shoe", None, '{"color": "red"}', None),
        ("a1", "ad", "Buy shoes", None, None, None, None),
        ("a1", "ad", "Buy shoes", None, None, None, None),  # exact copy
        ("p2", "product", "Hat", None, None, None, "2024-01-01 00:00:00"),
        ("p2", "product", "Cap", None, None, None, "2024-02-01 00:00:00"),  # conflict, newer: kept
        (None, "product", "orphan", None, None, None, None),  # missing id
        ("x1", "planet", None, None, None, None, None),  # unknown type
        ("p3", "product", None, None, None, None, "not a date"),  # unparseable created_at
        ("p4", "product", None, None, None, "[1,2]", None),  # attributes not an object
    ]
    cols = "entity_id string, entity_type string, title string, description string, image_uri string, " \
           "attributes string, created_at string"
    return conform("entities", spark.createDataFrame(rows, cols))


def _reasons(df):
    return sorted((r["reason"], r["n"]) for r in df.groupBy("reason").agg(F.count("*").alias("n")).collect())


def test_entity_reasons_and_kept_rows(spark):
    raw = _entities(spark)
    labelled = label_entities(raw)
    ok, bad = accepted(labelled, "entities"), quarantined(labelled, "entities", RUN)
    assert ok.count() + bad.count() == raw.count()
    assert _reasons(bad) == sorted([
        (R.DUPLICATE_ENTITY_ID, 1), (R.DUPLICATE_ENTITY_ID_CONFLICT, 1), (R.INVALID_VALUE, 1),
        (R.MISSING_REQUIRED_FIELD, 1), (R.UNKNOWN_ENTITY_TYPE, 1), (R.UNPARSEABLE_TIMESTAMP, 1),
    ])
    kept = {r["entity_id"]: r for r in ok.collect()}
    assert sorted(kept) == ["a1", "p1", "p2", "u1", "u2"]
    assert kept["p2"]["title"] == "Cap", "the latest created_at wins a conflict"
    assert isinstance(kept["u1"]["created_at"], dt.datetime)
    raw_json = bad.where(F.col("reason") == R.UNKNOWN_ENTITY_TYPE).first()["raw"]
    assert '"entity_type":"planet"' in raw_json, "the raw row is kept verbatim"


def test_bronze_entities_keep_the_video_uri_and_a_source_without_it_reads_null(spark):
    cols = "entity_id string, entity_type string, title string, video_uri string"
    rows = [("ad1", "ad", "Clip", "/clips/ad1.mp4"), ("ad2", "ad", "No clip", None),
            ("ad3", "ad", "Clip", "/clips/a.mp4"), ("ad3", "ad", "Clip", "/clips/b.mp4")]  # differ by clip only
    labelled = label_entities(conform("entities", spark.createDataFrame(rows, cols)))
    ok = accepted(labelled, "entities")
    assert ok.columns[:6] == ["entity_id", "entity_type", "title", "description", "image_uri", "video_uri"]
    kept = {r["entity_id"]: r["video_uri"] for r in ok.collect()}
    assert kept["ad1"] == "/clips/ad1.mp4" and kept["ad2"] is None
    assert _reasons(quarantined(labelled, "entities", RUN)) == [(R.DUPLICATE_ENTITY_ID_CONFLICT, 1)]
    without = accepted(label_entities(_entities(spark)), "entities")  # a source with no video_uri column
    assert without.where(F.col("video_uri").isNotNull()).count() == 0 and "video_uri" in without.columns


@pytest.mark.slow
def test_relation_reasons(spark):
    known = accepted(label_entities(_entities(spark)), "entities").select("entity_id")
    rows = [
        ("a1", "p1", "ad_promotes_product", None),
        ("a1", "p1", "ad_promotes_product", 2.0),  # duplicate key
        ("a1", "ghost", "ad_promotes_product", 1.0),  # dangling dst
        (None, "p1", "x", 1.0),  # missing
        ("a1", "p2", "ad_promotes_product", -1.0),  # invalid weight
        ("a1", "p2", "ad_promotes_product", float("nan")),  # invalid weight
    ]
    schema = "src_id string, dst_id string, relation string, weight double"
    raw = conform("relations", spark.createDataFrame(rows, schema))
    labelled = label_relations(raw, known)
    ok, bad = accepted(labelled, "relations"), quarantined(labelled, "relations", RUN)
    assert ok.count() + bad.count() == raw.count() == 6
    assert _reasons(bad) == sorted([
        (R.DANGLING_REFERENCE, 1), (R.DUPLICATE_RELATION, 1), (R.INVALID_VALUE, 2), (R.MISSING_REQUIRED_FIELD, 1),
    ])
    assert ok.first()["weight"] in (1.0, 2.0)


def _events(spark):
    rows = [
        ("e1", "u1", "p1", "click", "2024-03-02 10:00:00", 1.0),
        ("e1", "u1", "p1", "click", "2024-03-02 10:00:00", 1.0),  # duplicate id
        ("e2", "u1", "a1", "wink", "2024-03-02 10:00:00", None),  # unknown type
        ("e3", "u1", "p1", "conversion", "yesterday-ish", 5.0),  # unparseable
        ("e4", "ghost", "p1", "click", "2024-03-02 11:00:00", None),  # dangling user
        ("e5", "p1", "p1", "click", "2024-03-02 11:00:00", None),  # user_id is not a user
        ("e6", "u2", "nope", "click", "2024-03-02 11:00:00", None),  # dangling item
        ("e7", None, "p1", "click", "2024-03-02 11:00:00", None),  # missing
        (None, "u2", "p1", "impression", "2024-03-02 12:00:00", None),  # id derived
        ("e8", "u2", "p1", "click", "2024-03-01 12:00:00", None),  # another day
        ("e9", "u2", "p1", "click", "2024-03-02 12:00:00", float("inf")),  # invalid value
        ("e10", "u2", "p1", "click", "2099-01-01 00:00:00", None),  # future: no run can place it
        ("e11", "u2", "p1", "click", "1970-01-01 00:00:00", None),  # epoch 0: before the horizon
    ]
    cols = "event_id string, user_id string, entity_id string, event_type string, event_ts string, value double"
    return conform("events", spark.createDataFrame(rows, cols))


@pytest.mark.slow
def test_event_reasons_and_window(spark):
    entities = accepted(label_entities(_entities(spark)), "entities")
    raw = _events(spark)
    labelled = label_events(raw, entities, EventWindow.day(RUN), BOUNDS)
    ok, bad = accepted(labelled, "events"), quarantined(labelled, "events", RUN)
    # e8 and e11 are other days' events: not read by this run, but counted.
    assert ok.count() + bad.count() == raw.count() - 2
    assert events_outside(raw, EventWindow.day(RUN), BOUNDS) == {"before": 2, "after": 0}
    assert _reasons(bad) == sorted([
        (R.DANGLING_REFERENCE, 3), (R.DUPLICATE_EVENT_ID, 1), (R.FUTURE_TIMESTAMP, 1), (R.INVALID_VALUE, 1),
        (R.MISSING_REQUIRED_FIELD, 1), (R.UNKNOWN_EVENT_TYPE, 1), (R.UNPARSEABLE_TIMESTAMP, 1),
    ])
    got = {r["event_id"]: r for r in ok.collect()}
    assert "e1" in got and got["e1"]["event_date"] == RUN
    derived = [k for k in got if k.startswith("derived:")]
    assert len(derived) == 1

    backfill = label_events(raw, entities, EventWindow(end=RUN), BOUNDS)
    assert accepted(backfill, "events").where(F.col("event_id") == "e8").count() == 1
    reasons = {r["event_id"]: r["_reason"] for r in backfill.collect()}
    assert reasons["e10"] == R.FUTURE_TIMESTAMP and reasons["e11"] == R.TIMESTAMP_BEFORE_HORIZON
    assert events_outside(raw, EventWindow(end=RUN), BOUNDS) == {"before": 0, "after": 0}


def test_time_bounds_follow_the_run_date_the_clock_and_the_settings():
    nightly = IngestConfig().bounds(RUN, now=dt.datetime(2024, 3, 3, 6))
    assert nightly.latest == dt.datetime(2024, 3, 4, 6) and nightly.earliest == RUN - dt.timedelta(days=3650)
    rerun_of_old_date = IngestConfig().bounds(RUN, now=dt.datetime(2026, 1, 1))
    assert rerun_of_old_date.latest == dt.datetime(2026, 1, 2)  # events since then are later runs', not future
    assert IngestConfig(future_skew_hours=0, horizon_days=None).bounds(RUN, now=dt.datetime(2024, 3, 2, 1)) \
        == type(nightly)(latest=dt.datetime(2024, 3, 3), earliest=None)
    with pytest.raises(ValueError, match="horizon_days"):
        IngestConfig(horizon_days=0)


@pytest.mark.slow
def test_an_event_id_accepted_on_an_earlier_date_is_a_duplicate_and_the_earliest_copy_wins(spark):
    entities = accepted(label_entities(_entities(spark)), "entities")
    cols = "event_id string, user_id string, entity_id string, event_type string, event_ts string, value double"
    rows = [("d1", "u1", "p1", "click", "2024-03-01 10:00:00", None),
            ("d1", "u1", "p1", "click", "2024-03-02 09:00:00", None),  # re-sent the next day
            ("d2", "u2", "p1", "click", "2024-03-02 10:00:00", None)]
    raw = conform("events", spark.createDataFrame(rows, cols))
    day1 = accepted(label_events(raw, entities, EventWindow.day(RUN - dt.timedelta(days=1)), BOUNDS), "events")
    day2 = label_events(raw, entities, EventWindow.day(RUN), BOUNDS, accepted_before=day1)
    nightly = sorted((r["event_id"], str(r["event_date"])) for r in day1.unionByName(accepted(day2, "events"))
                     .collect())
    backfill = sorted((r["event_id"], str(r["event_date"]))
                      for r in accepted(label_events(raw, entities, EventWindow(end=RUN), BOUNDS), "events").collect())
    assert nightly == backfill == [("d1", "2024-03-01"), ("d2", "2024-03-02")]
    assert [r["detail"] for r in quarantined(day2, "events", RUN).collect()] == [
        "event_id 'd1' already accepted on an earlier date"]


@pytest.mark.slow
def test_events_read_by_a_window_are_exactly_the_labelled_ones(spark):
    entities = accepted(label_entities(_entities(spark)), "entities")
    raw = _events(spark)
    for kind, window in (("day", EventWindow.day(RUN)), ("all", EventWindow(end=RUN))):
        assert EventWindow.of(kind, RUN) == window
        labelled = label_events(raw, entities, window, BOUNDS)
        assert sum(split_counts(labelled)) == events_read(raw, window, BOUNDS).count() == labelled.count()
    assert EventWindow.day(RUN).predicate() == "event_date <= '2024-03-02' AND event_date >= '2024-03-02'"
    assert EventWindow(end=RUN).predicate() == "event_date <= '2024-03-02'"
    with pytest.raises(ValueError, match="unknown ingestion window"):
        EventWindow.of("week", RUN)


@pytest.mark.parametrize("reason", [R.MISSING_REQUIRED_FIELD, R.DANGLING_REFERENCE])
def test_detail_names_the_problem(spark, reason):
    entities = accepted(label_entities(_entities(spark)), "entities")
    bad = quarantined(label_events(_events(spark), entities, EventWindow.day(RUN), BOUNDS), "events", RUN)
    details = [r["detail"] for r in bad.where(F.col("reason") == reason).collect()]
    assert details and all(d for d in details)
    assert any(("user_id" in d) for d in details)
