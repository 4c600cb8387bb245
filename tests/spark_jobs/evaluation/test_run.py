"""spark_jobs.evaluation.run: the inner validation split follows the evaluation split's rules and never trains HIR on
a validation target, and an evaluation run with several HIR seeds reports their mean, the mean-user and random rows
and the intervals (as strict JSON)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import numpy as np
import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVENT_DATE_COLUMN, source_ddl
from hir_pipeline.evaluation.bootstrap import paired_bootstrap
from hir_pipeline.evaluation.data import COLD, VALIDATION, WARM, EvalData
from hir_pipeline.evaluation.runner import Comparison, EvaluationSettings
from hir_pipeline.model.config import ModelConfig
from spark_jobs.evaluation.run import (
    EvaluationJobConfig,
    _comparison_details,
    evaluate_run,
    inner_split,
    prepare_evaluation,
    prepare_validation,
)
from spark_jobs.evaluation.split import SplitConfig
from spark_jobs.graph import GraphConfig

RUN = dt.date(2024, 3, 31)
FUNNEL = ("impression", "click", "add_to_cart", "conversion")
GRAPH = GraphConfig(broad_fanout=(4, 2), narrow_fanout=(3,), max_view_nodes=8, max_dist=3, seed=3)
SPLIT = SplitConfig(min_target_users=3, seed=1)
#: The run's settings; the HIR model's max_dist is the graph's.
CONFIG = EvaluationJobConfig(split=SPLIT, graph=GRAPH, model=ModelConfig(max_dist=3))


@pytest.fixture(scope="module")
def source(spark):
    """30 users x 12 sessions on 40 products in 2 categories; each session goes down the funnel at random."""
    rng = np.random.default_rng(0)
    ents = [(f"u{i:02d}", "user") for i in range(30)] + [(f"p{i:02d}", "product") for i in range(40)]
    ents += [("cat0", "category"), ("cat1", "category")]
    entities = spark.createDataFrame([(i, t, *[None] * 6) for i, t in ents], source_ddl("entities"))
    relations = spark.createDataFrame([(f"p{i:02d}", f"cat{i % 2}", "product_in_category", None)
                                       for i in range(40)], source_ddl("relations"))
    rows = []
    t0 = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    for u in range(30):
        for s in range(12):
            item = f"p{int(rng.integers(20)) * 2 + u % 2:02d}"  # users stay mostly in one category
            ts = t0 + dt.timedelta(hours=int(rng.integers(0, 29 * 24)))
            depth = int(rng.choice(4, p=[0.3, 0.3, 0.1, 0.3]))
            for k in range(depth + 1):
                rows.append((f"e{u}-{s}-{k}", f"u{u:02d}", item, FUNNEL[k], ts + dt.timedelta(minutes=k), None))
    events = (spark.createDataFrame(rows, source_ddl("events"))
              .withColumn(EVENT_DATE_COLUMN, F.to_date("event_ts")).persist())
    return entities, relations, events


@pytest.fixture(scope="module")
def prepared(source):
    entities, relations, events = source
    return prepare_evaluation({"entities": entities, "relations": relations, "events": events}, None, RUN, CONFIG)


def test_comparison_details_are_strict_json_when_a_baseline_scores_zero():
    """The intervals reach Dagster metadata and the run's JSON details: a ratio over a baseline that hit nothing is
    undefined and written as null, never as NaN (which strict JSON readers refuse)."""
    hir, zero = np.array([0.5, 0.25, 0.0, 1.0]), np.zeros(4)
    details = _comparison_details(Comparison(WARM, "best_baseline", "als", paired_bootstrap(hir, zero, samples=50)))
    parsed = json.loads(json.dumps(details, allow_nan=False))
    assert parsed["ratio"] is None and parsed["diff"] == pytest.approx(hir.mean())
    assert (parsed["split"], parsed["baseline"], parsed["users"]) == (WARM, "als", 4)


def _pairs(m, data: EvalData) -> set[tuple[str, str]]:
    m = m.tocoo()
    return {(data.user_ids[u], data.item_ids[i]) for u, i in zip(m.row, m.col, strict=True)}


@pytest.mark.slow
def test_inner_split_follows_the_evaluation_rules_on_the_training_events(prepared, source):
    entities, relations, events = source
    split, data, _ = prepared
    bronze = {"entities": entities, "relations": relations, "events": events}
    inner, inner_data = inner_split(bronze, split, RUN, CONFIG)
    times = {}
    for name, df in (("train", inner.train_events), ("all", split.train_events)):
        rows = df.groupBy("user_id").agg(F.min("event_ts").alias("lo"), F.max("event_ts").alias("hi")).collect()
        times[name] = {r.user_id: (r.lo, r.hi) for r in rows}
    # held out: each user's latest events, besides every event on a new cold item
    held = split.train_events.join(inner.train_events, "event_id", "left_anti").join(
        inner.cold_items, "entity_id", "left_anti")
    first_held = {r.user_id: r.t for r in held.groupBy("user_id").agg(F.min("event_ts").alias("t")).collect()}
    assert first_held and all(times["train"][u][1] <= t for u, t in first_held.items() if u in times["train"])
    assert inner.train_events.count() < split.train_events.count()
    # its targets are pairs of the outer training part, never trained on in the inner one
    warm = _pairs(inner_data.targets[WARM], inner_data)
    assert warm and warm <= _pairs(data.train, data) and not warm & _pairs(inner_data.train, inner_data)
    # the evaluation's baselines tune their grids on exactly this split
    assert data.tuning is not None and data.tuning.splits == [VALIDATION]
    assert _pairs(data.tuning.targets[VALIDATION], data.tuning) == warm
    assert _pairs(data.tuning.train, data.tuning) == _pairs(inner_data.train, inner_data)


@pytest.mark.slow
def test_validation_inputs_never_hold_a_validation_pair(prepared, source):
    entities, relations, events = source
    split, data, outer_inputs = prepared
    config = dataclasses.replace(CONFIG, split=dataclasses.replace(SPLIT, cold_item_fraction=0.2))
    bronze = {"entities": entities, "relations": relations, "events": events}
    inner, inputs = prepare_validation(bronze, split, None, RUN, config)
    assert inner.splits == [WARM, COLD]
    assert inner.tuning is not None and _pairs(inner.tuning.train, inner.tuning) < _pairs(inner.train, inner)
    gone = _pairs(data.train, data) - _pairs(inner.train, inner)
    ids = np.asarray(inputs.entity_ids, dtype=object)
    users, items, _ = inputs.engagement

    def pairs(of) -> set[tuple[str, str]]:
        u, i, _ = of.engagement
        o = np.asarray(of.entity_ids, dtype=object)
        return set(zip(o[u].tolist(), o[i].tolist(), strict=True))

    engaged = pairs(inputs)
    assert engaged and not engaged & gone  # HIR trains on none of the held-out pairs ...
    assert pairs(outer_inputs) & gone  # ... which the outer training inputs did hold
    assert engaged == _pairs(inner.train, inner) & engaged  # nor on anything the inner data does not train on
    # every validation target, warm or cold, is a pair the inner training part does not hold
    for split_name in (WARM, COLD):
        targets = _pairs(inner.targets[split_name], inner)
        assert targets and not targets & engaged
    # the new cold items keep their node (and category) but no activity
    cold_ids = {inner.item_ids[i] for i in np.flatnonzero(inner.candidates[COLD])}
    history = dict(zip(ids.tolist(), np.asarray(inputs.has_history).tolist(), strict=True))
    assert cold_ids and all(e in history and not history[e] for e in cold_ids)
    assert not (set(ids[items].tolist()) & cold_ids) and len(users)


@pytest.mark.slow
def test_several_seeds_mean_user_random_and_intervals(source, tmp_path):
    from hir_pipeline.model.config import TrainConfig

    entities, relations, events = source
    model = ModelConfig(level_sizes=(2, 4), hidden_dim=16, num_layers=1, num_heads=2, out_dim=8, id_buckets=128,
                        max_dist=3, use_content=False, attn_block_size=64)
    train = TrainConfig(epochs=1, batch_size=64, engagement_batch_size=32, warmup_steps=1, device="cpu", seed=5,
                        pad_to=64)
    settings = EvaluationSettings(baselines=("popularity", "random"), hir_seeds=2, bootstrap_samples=200)
    bronze = {"entities": entities, "relations": relations, "events": events}
    out = evaluate_run(bronze, None, RUN, tmp_path / "ckpt", dataclasses.replace(
        CONFIG, model=model, train=train, evaluation=settings))
    got = {(m, s, n): v for m, s, n, v in out.rows}
    assert set(out.details["hir_seeds"]) == {"5", "6"} and (tmp_path / "ckpt" / "seed_6").is_dir()
    for split_name in (WARM, COLD):
        seeds = [out.details["hir_seeds"][x][split_name] for x in ("5", "6")]
        assert got[("hir", split_name, "recall_at_20")] == pytest.approx(np.mean(seeds), abs=1e-4)
        assert got[("hir", split_name, "recall_at_20_seed_std")] == pytest.approx(np.std(seeds, ddof=1), abs=1e-4)
        for method in ("hir_mean_user", "popularity", "random"):
            assert 0.0 <= got[(method, split_name, "recall_at_20")] <= 1.0
        lo, mid, hi = (got[("hir", split_name, f"recall_at_20_diff_vs_best_baseline{e}")]
                       for e in ("_ci_low", "", "_ci_high"))
        assert lo <= mid <= hi
        # the production model's coarse-to-fine retrieval through its own clusters, against exact search
        assert 0.0 <= got[("hir", split_name, "hierarchical_recall_ratio")] <= 1.5
        assert 0.0 < got[("hir", split_name, "hierarchical_scored_share")] <= 1.0
        assert got[("hir", split_name, "hierarchical_clusters_probed")] >= 1.0
    [warm] = [c for c in out.details["comparisons"] if c["split"] == WARM]
    assert warm["baseline"] in ("popularity", "random") and warm["users"] == got[("hir", WARM, "users")]
    json.dumps(out.details, allow_nan=False)  # asset metadata and MLflow take it as JSON
