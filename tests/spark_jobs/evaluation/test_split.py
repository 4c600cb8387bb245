"""The evaluation split: disjoint, temporal, cold items never train, seeded, deep-funnel targets with fallback."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from pyspark.sql import functions as F

from spark_jobs.evaluation.split import SplitConfig, split_events

RUN = dt.date(2024, 1, 31)
FUNNEL = ("impression", "click", "add_to_cart", "conversion")


@pytest.fixture(scope="module")
def events(spark):
    """40 users x 15 sessions on 50 items; each session goes down the funnel to a random depth."""
    rng = np.random.default_rng(0)
    rows = []
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for u in range(40):
        for s in range(15):
            item = f"item:{int(rng.integers(50)):02d}"
            ts = t0 + dt.timedelta(hours=int(rng.integers(0, 29 * 24)))
            depth = int(rng.choice(4, p=[0.4, 0.3, 0.1, 0.2]))
            for k in range(depth + 1):
                rows.append((f"e{u}-{s}-{k}", f"user:{u:02d}", item, FUNNEL[k], ts + dt.timedelta(minutes=k)))
    rows.append(("late", "user:00", "item:00", "conversion", dt.datetime(2024, 2, 5, tzinfo=dt.UTC)))
    df = spark.createDataFrame(rows, "event_id string, user_id string, entity_id string, event_type string, "
                                     "event_ts timestamp")
    return df.withColumn("event_date", F.to_date("event_ts")).persist()


@pytest.fixture(scope="module")
def split(events):
    return split_events(events, RUN, SplitConfig(min_target_users=5, seed=3))


def test_cold_items_are_seeded_ten_percent_and_never_train(events, split):
    cold = {r[0] for r in split.cold_items.collect()}
    assert len(cold) == 5  # ceil(10% of 50 items)
    assert split.train_events.where(F.col("entity_id").isin(list(cold))).count() == 0
    again = split_events(events, RUN, SplitConfig(min_target_users=5, seed=3))
    assert {r[0] for r in again.cold_items.collect()} == cold
    other = split_events(events, RUN, SplitConfig(min_target_users=5, seed=4))
    assert {r[0] for r in other.cold_items.collect()} != cold
    cold_targets = {r["entity_id"] for r in split.targets.where("split = 'cold'").collect()}
    assert cold_targets and cold_targets <= cold


def test_temporal_per_user_holdout(events, split):
    cold = [r[0] for r in split.cold_items.collect()]
    warm = events.where(~F.col("entity_id").isin(cold)).where(F.col("event_date") <= RUN)
    train = split.train_events
    held = warm.join(train.select("event_id"), "event_id", "left_anti")
    # train and held-out are disjoint and together make up the warm events up to the run date
    assert train.count() + held.count() == warm.count()
    assert train.join(held, "event_id").count() == 0
    assert train.where(F.col("event_date") > RUN).count() == 0
    # per user: about 20% held out, and every held-out event is at or after every training event
    t = train.groupBy("user_id").agg(F.max("event_ts").alias("last_train"), F.count("*").alias("n_train"))
    h = held.groupBy("user_id").agg(F.min("event_ts").alias("first_held"), F.count("*").alias("n_held"))
    for r in t.join(h, "user_id").collect():
        assert r["last_train"] <= r["first_held"]
        n = r["n_train"] + r["n_held"]
        assert r["n_held"] == int(np.floor(n * 0.2))


def test_warm_targets_reach_the_stage_and_are_not_training_pairs(events, split):
    assert split.target_stage == "conversion" and "fell back" not in split.note
    warm_t = split.targets.where("split = 'warm'")
    assert warm_t.count() > 0
    train_pairs = split.train_events.select("user_id", "entity_id").distinct()
    assert warm_t.join(train_pairs, ["user_id", "entity_id"]).count() == 0
    conv = events.where("event_type = 'conversion'").select("user_id", "entity_id").distinct()
    assert warm_t.join(conv, ["user_id", "entity_id"], "left_anti").count() == 0
    assert split.targets.select("user_id", "entity_id", "split").distinct().count() == split.targets.count()


def test_falls_back_when_too_few_deep_targets(events, split):
    need = split.users_per_stage["conversion"] + 1
    fb = split_events(events, RUN, SplitConfig(min_target_users=need, seed=3))
    assert fb.target_stage == "add_to_cart"
    assert "fell back to add_to_cart" in fb.note
    assert fb.targets.where("split = 'warm'").count() >= split.targets.where("split = 'warm'").count()
