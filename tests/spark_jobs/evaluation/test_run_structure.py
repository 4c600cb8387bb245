"""spark_jobs.evaluation.run: the evaluation model's structure embedding sees training edges only (real local Spark)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVENT_DATE_COLUMN, source_ddl
from hir_pipeline.model.config import ModelConfig
from spark_jobs.evaluation.run import EvaluationJobConfig, prepare_evaluation
from spark_jobs.evaluation.split import SplitConfig
from spark_jobs.graph import GraphConfig, build_edges, build_nodes
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN

RUN = dt.date(2024, 5, 31)
GRAPH = GraphConfig(broad_fanout=(3,), narrow_fanout=(2,), max_view_nodes=6, max_dist=2, seed=2, structure_dim=8,
                    structure_power_iterations=3)
SPLIT = SplitConfig(holdout_fraction=0.2, cold_item_fraction=0.1, min_target_users=1, seed=1)
USERS, ITEMS = 8, 10
CONFIG = EvaluationJobConfig(split=SPLIT, graph=GRAPH, model=ModelConfig(max_dist=GRAPH.max_dist))


def _events(spark, last_of_u0: str):
    """Each user: 6 events on items in time order; u0's last (held-out) event is on ``last_of_u0``."""
    rng = np.random.default_rng(4)
    t0 = dt.datetime(2024, 5, 1, 12)
    rows = []
    for u in range(USERS):
        items = rng.choice(ITEMS, 6, replace=False)
        for k, i in enumerate(items):
            item = last_of_u0 if (u == 0 and k == 5) else f"i{i}"
            rows.append((f"e{u}-{k}", f"u{u}", item, "click" if k % 2 else "conversion", t0 + dt.timedelta(days=k)))
    return spark.createDataFrame([(*r, None) for r in rows], source_ddl("events")).withColumn(
        EVENT_DATE_COLUMN, F.to_date("event_ts"))


def test_the_evaluation_graph_settings_must_be_the_models_and_the_splits():
    """The structure embedding and the views of the evaluation graph are what the model reads: a model whose
    ``max_dist`` is not the graph's, or a split drawn on another funnel, is refused before any Spark work."""
    with pytest.raises(ValueError, match="max_dist 3 is not the graph's 2"):
        EvaluationJobConfig(split=SPLIT, graph=GRAPH, model=ModelConfig(max_dist=3))
    with pytest.raises(ValueError, match="funnel .* is not the graph.s"):
        EvaluationJobConfig(split=dataclasses.replace(SPLIT, funnel=("impression", "click")), graph=GRAPH,
                            model=ModelConfig(max_dist=GRAPH.max_dist))
    assert CONFIG.graph.structure_embedding and CONFIG.graph.structure_dim == 8


@pytest.fixture(scope="module")
def source(spark):
    ents = [(f"u{u}", "user") for u in range(USERS)] + [(f"i{i}", "ad") for i in range(ITEMS)]
    ents += [("c0", "campaign"), ("c1", "campaign")]
    entities = spark.createDataFrame([(e, t, *[None] * 6) for e, t in ents], source_ddl("entities"))
    relations = spark.createDataFrame([(f"i{i}", f"c{i % 2}", "ad_of_campaign", None) for i in range(ITEMS)],
                                      source_ddl("relations"))
    base = _events(spark, "")
    u0_items = {r.entity_id for r in base.where("user_id = 'u0' and event_id != 'e0-5'").collect()}
    others = {r.entity_id for r in base.where("user_id != 'u0'").collect()}
    # Two items u0 never touched otherwise, both with other users' events (so the item set, and with it the seeded
    # cold-item choice, is the same whichever one u0's last event is on).
    a, b = sorted(others - u0_items)[:2]
    return entities, relations, _events(spark, a), _events(spark, b)


def _structure(entities, relations, events):
    bronze = {"entities": entities, "relations": relations, "events": events}
    split, _, inputs = prepare_evaluation(bronze, None, RUN, CONFIG)
    held = events.join(split.train_events.select("event_id"), "event_id", "left_anti")
    return inputs, {r.event_id for r in held.collect()}, {r[0] for r in split.cold_items.collect()}


@pytest.fixture(scope="module")
def prepared_a(source):
    entities, relations, ev_a, _ = source
    return _structure(entities, relations, ev_a)


@pytest.mark.slow
def test_a_held_out_edge_does_not_move_the_evaluation_structure_embedding(source, prepared_a):
    entities, relations, ev_a, ev_b = source
    in_a, held_a, cold_a = prepared_a
    in_b, held_b, cold_b = _structure(entities, relations, ev_b)
    assert "e0-5" in held_a and held_a == held_b and cold_a == cold_b  # only a held-out event differs
    assert list(in_a.entity_ids) == list(in_b.entity_ids) and in_a.structure_dim == GRAPH.structure_dim
    np.testing.assert_allclose(in_a.structure, in_b.structure, atol=1e-7)
    # Control: on the full graph (the production one) that event's edge does move u0's embedding.
    full = {}
    for name, ev in (("a", ev_a), ("b", ev_b)):
        nodes = build_nodes(entities, build_edges(entities, relations, ev, RUN, GRAPH), RUN, GRAPH)
        full[name] = np.asarray(nodes.where("entity_id = 'u0'").first()[STRUCTURE_COLUMN])
    assert np.abs(full["a"] - full["b"]).max() > 0.05


@pytest.mark.slow
def test_cold_items_get_a_structure_embedding_from_catalogue_edges(source, prepared_a):
    entities, relations, ev_a, _ = source
    inputs, _, cold = prepared_a
    assert cold
    pos = {e: i for i, e in enumerate(inputs.entity_ids)}
    for item in cold:
        assert not inputs.has_history[pos[item]]  # none of its events trained
        assert np.linalg.norm(inputs.structure[pos[item]]) > 0  # a row from its campaign / category edges
    bronze = {"entities": entities, "relations": relations, "events": ev_a}
    off = prepare_evaluation(bronze, None, RUN, dataclasses.replace(
        CONFIG, graph=dataclasses.replace(GRAPH, structure_embedding=False)))[2]
    assert off.structure is None
