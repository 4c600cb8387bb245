"""evaluation_report: a real dg.materialize on the tiny lake -> Delta evaluation_metrics, MLflow metrics on the
run date's training run, comparison metadata, and the promotion gate moving (or not) the champion alias.

The tests that materialize (a training run and four baselines) are slow; the choice of the evaluation model's
settings is a fast unit test."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import shutil

import dagster as dg
import numpy as np
import pytest
from pyspark.sql import functions as F

from assets.evaluation import GATE_CHECK, EvaluationConfig, evaluation_report, gate_check, hir_configs
from assets.evaluation_tracking import CHAMPION_ALIAS, metric_name
from assets.model_tracking import TAG_MODEL_VERSION, TAG_RUN_DATE
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from hir_pipeline.model.config import ModelConfig, TrainConfig
from resources import GraphSettingsResource, ModelSettingsResource
from spark_jobs.content_embeddings import CONTENT_EMBEDDINGS_DDL
from spark_jobs.delta_io import read_table
from tests.assets.conftest import RUN_DATE, SMALL_STRUCTURE, make_resources

DAY = dt.date.fromisoformat(RUN_DATE)
#: The training graph's settings: the graph_settings resource the graph assets share.
GRAPH_SETTINGS = GraphSettingsResource(broad_fanout=[6, 2], narrow_fanout=[4], max_view_nodes=20, max_dist=3,
                                         seed=1, **SMALL_STRUCTURE)
CONFIG = {
    "split": {"min_target_users": 5}, "baselines": ["popularity", "als", "lightgcn", "content", "random"],
    "als": {"factors": [8], "regularization": [0.1], "alpha": [1.0], "iterations": 5},
    "lightgcn": {"embedding_dim": 8, "num_layers": 1, "epochs": 2},
}
#: The HIR settings the evaluation falls back to: the model_settings resource interest_model trains with.
MODEL = {"level_sizes": [2, 4, 8], "hidden_dim": 16, "num_layers": 1, "num_heads": 2, "out_dim": 8, "id_buckets": 256,
         "attn_block_size": 64}
TRAIN = {"epochs": 1, "batch_size": 256, "engagement_batch_size": 64, "warmup_steps": 1, "pad_to": 64,
         "device": "cpu"}
MODEL_SETTINGS = ModelSettingsResource(model=MODEL, train=TRAIN)


@pytest.fixture(scope="module")
def eval_lake(spark, ingested_lake, tiny_source, tmp_path_factory):
    """A private copy of the ingested lake plus random content vectors; a training run of RUN_DATE (version 2)
    and a champion (version 1) with high figures in a fresh MLflow store; HIR_STATE_DIR in a temp folder."""
    root = tmp_path_factory.mktemp("evaluation") / "lake"
    shutil.copytree(ingested_lake["lake"].root, root)
    resources = make_resources(spark, root, tiny_source, graph=GRAPH_SETTINGS, model=MODEL_SETTINGS)
    ents = read_table(spark, resources["lake"].path("entities"))
    content_ents = sorted(tuple(r) for r in ents.where(F.col("entity_type").isin(*CONTENT_ENTITY_TYPES))
                          .select("entity_id", "entity_type").collect())
    rng = np.random.default_rng(0)
    rows = [(eid, etype, "h", "tiny", None, None, None, None, (v / np.linalg.norm(v)).tolist(), None, None,
             DAY)
            for (eid, etype), v in zip(content_ents, rng.normal(size=(len(content_ents), 12)), strict=True)]
    spark.createDataFrame(rows, CONTENT_EMBEDDINGS_DDL).write.format("delta").save(
        resources["lake"].path("content_embeddings"))

    from mlflow import MlflowClient

    ml = resources["mlflow"]
    experiment = ml.activate()
    client = MlflowClient()
    client.create_registered_model(ml.registered_model)
    versions = {}
    for day, figures in (("2024-06-01", {"warm": 0.99, "cold": 0.99}), (RUN_DATE, None)):
        run = client.create_run(experiment, run_name=f"interest_model {day}", tags={TAG_RUN_DATE: day})
        mv = client.create_model_version(ml.registered_model, f"runs:/{run.info.run_id}/model", run.info.run_id)
        client.set_tag(run.info.run_id, TAG_MODEL_VERSION, str(mv.version))
        for split, value in (figures or {}).items():
            client.log_metric(run.info.run_id, metric_name("hir", split, "recall_at_20"), value)
        client.set_terminated(run.info.run_id)
        versions[day] = (str(mv.version), run.info.run_id)
    client.set_registered_model_alias(ml.registered_model, CHAMPION_ALIAS, versions["2024-06-01"][0])
    before = os.environ.get("HIR_STATE_DIR")
    os.environ["HIR_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield resources | {"versions": versions, "client": client}
    if before is None:
        os.environ.pop("HIR_STATE_DIR", None)
    else:
        os.environ["HIR_STATE_DIR"] = before


def _materialize(resources, **overrides):
    res = {k: resources[k] for k in ("spark", "lake", "mlflow", "source", "graph_settings", "model_settings")}
    return dg.materialize([evaluation_report], partition_key=RUN_DATE, resources=res, raise_on_error=False,
                          run_config=dg.RunConfig(ops={"evaluation_report": {"config": {**CONFIG, **overrides}}}))


def _metrics(spark, resources):
    return read_table(spark, resources["lake"].path("evaluation_metrics")).where(F.col("run_date") == F.lit(DAY))


@pytest.fixture(scope="module")
def first(eval_lake):
    return _materialize(eval_lake, keep_checkpoints=True)


@pytest.mark.slow
def test_writes_every_method_and_split_to_delta_and_mlflow(spark, eval_lake, first):
    # the run fails on its blocking gate only (the champion is better): the report itself is written
    assert [e.check_name for e in first.get_asset_check_evaluations() if not e.passed] == [GATE_CHECK]
    assert len(first.get_asset_materialization_events()) == 1
    rows = _metrics(spark, eval_lake).collect()
    version, run_id = eval_lake["versions"][RUN_DATE]
    assert {r["model_version"] for r in rows} == {version}
    got = {(r["method"], r["split"], r["metric"]): r["value"] for r in rows}
    for method in ("hir", "hir_mean_user", "popularity", "als", "lightgcn", "content", "random"):
        for split in ("warm", "cold"):
            assert 0.0 <= got[(method, split, "recall_at_20")] <= 1.0
            assert 0.0 <= got[(method, split, "ndcg_at_20")] <= 1.0
            assert got[(method, split, "users")] > 0
    # HIR vs the best baseline (and content-only on cold): ratio and difference with a paired bootstrap interval
    for split, ref in (("warm", "best_baseline"), ("cold", "best_baseline"), ("cold", "content")):
        base = "content" if ref == "content" else max(
            ("popularity", "als", "lightgcn", "content", "random"), key=lambda m: got[(m, split, "recall_at_20")])
        diff = got[("hir", split, f"recall_at_20_diff_vs_{ref}")]
        assert diff == pytest.approx(got[("hir", split, "recall_at_20")] - got[(base, split, "recall_at_20")])
        assert got[("hir", split, f"recall_at_20_diff_vs_{ref}_ci_low")] <= diff
        assert got[("hir", split, f"recall_at_20_diff_vs_{ref}_ci_high")] >= diff
    # synthetic source: NMI per level against the planted hierarchy, and cluster usage per level
    for lvl in range(3):
        assert 0.0 <= got[("hir", "all", f"nmi_level_{lvl}")] <= 1.0
        assert 1 <= got[("hir", "all", f"clusters_used_level_{lvl}")] <= MODEL["level_sizes"][lvl]
    # hierarchical retrieval through the model's own clusters against exact search (HierarchicalSettings defaults)
    for split in ("warm", "cold"):
        assert got[("hir", split, "hierarchical_recall_ratio")] >= 0.0
        assert 0.0 < got[("hir", split, "hierarchical_scored_share")] <= 1.0
    # ... and the finest level's labels scored on the planted interests' vocabularies
    assert 0.0 <= got[("hir", "item", "label_purity_level_2")] <= 1.0
    logged = eval_lake["client"].get_run(run_id).data.metrics
    assert logged[metric_name("hir", "warm", "recall_at_20")] == pytest.approx(got[("hir", "warm", "recall_at_20")])
    assert logged[metric_name("content", "cold", "ndcg_at_20")] == pytest.approx(got[("content", "cold",
                                                                                         "ndcg_at_20")])
    [mat] = first.get_asset_materialization_events()
    meta = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert meta["comparison"].startswith("| method |") and "| lightgcn |" in meta["comparison"]
    assert "(95% paired bootstrap intervals over users)" in meta["comparison"]
    assert meta["plot"].startswith("![comparison](data:image/png;base64,")
    assert meta["dagster/row_count"] == len(rows)
    assert meta["details"]["hir_published_encoder"] == "student"  # the training run logged no config: the default


def test_hir_configs_evaluate_the_encoder_the_training_run_published():
    config, graph = EvaluationConfig(**CONFIG), GRAPH_SETTINGS.graph_config()
    model_d, train_d = dataclasses.asdict(ModelConfig()), dataclasses.asdict(TrainConfig(epochs=3))
    for published in ("student", "teacher"):
        model, train, source = hir_configs(config, MODEL_SETTINGS, graph,
                                           (model_d, {**train_d, "published_encoder": published}))
        assert train.published_encoder == published and train.epochs == 3 and "model_meta.json" in source
        assert model.max_dist == graph.max_dist == 3  # the split's views are built with the graph's max_dist
    legacy = {k: v for k, v in train_d.items() if k != "published_encoder"}
    # all a run could publish then
    assert hir_configs(config, MODEL_SETTINGS, graph, (model_d, legacy))[1].published_encoder == "teacher"
    # no training run: the model_settings resource interest_model trains with, max_dist from the graph
    model, train, source = hir_configs(config, MODEL_SETTINGS, graph, None)
    assert train == MODEL_SETTINGS.train_config() and train.published_encoder == "student"
    assert model == MODEL_SETTINGS.model_config_for(graph) and model.max_dist == 3 and "model_settings" in source
    teacher = ModelSettingsResource(model=MODEL, train={**TRAIN, "published_encoder": "teacher"})
    assert hir_configs(config, teacher, graph, None)[1].published_encoder == "teacher"
    # use_production_config off: the resource even when the date has a training run
    off = EvaluationConfig(**CONFIG, use_production_config=False)
    assert hir_configs(off, MODEL_SETTINGS, graph, (model_d, train_d))[1] == MODEL_SETTINGS.train_config()


@pytest.mark.slow
def test_gate_fails_against_a_better_champion_and_keeps_it(eval_lake, first):
    """A blocking check: the run fails, the version is tagged 'failed' (publishing refuses it), champion stays."""
    [check] = first.get_asset_check_evaluations()
    assert check.check_name == GATE_CHECK and not check.passed and check.blocking
    assert check.metadata["verdict"].value == "failed" and not first.success
    client, name = eval_lake["client"], eval_lake["mlflow"].registered_model
    assert client.get_model_version(name, eval_lake["versions"][RUN_DATE][0]).tags["hir.gate"] == "failed"
    champ = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    assert str(champ.version) == eval_lake["versions"]["2024-06-01"][0]


@pytest.mark.slow
def test_rerun_replaces_rows_and_the_gate_records_pass_and_override(spark, eval_lake, first):
    client, name = eval_lake["client"], eval_lake["mlflow"].registered_model
    version = eval_lake["versions"][RUN_DATE][0]
    n_before = _metrics(spark, eval_lake).count()
    # the operator's override: a failing candidate passes the check, recorded as overridden
    check = gate_check(client, name, version, {"warm": 0.1, "cold": 0.1}, "recall_at_20", 0.05, override=True)
    assert check.passed and check.metadata["verdict"].value == "overridden"
    assert client.get_model_version(name, version).tags["hir.gate"] == "overridden"
    again = _materialize(eval_lake, gate_tolerance=1.0)
    assert again.success
    assert _metrics(spark, eval_lake).count() == n_before  # replaced, not duplicated
    [check] = again.get_asset_check_evaluations()
    assert check.passed and check.metadata["verdict"].value == "passed"
    assert client.get_model_version(name, version).tags["hir.gate"] == "passed"
    # the gate does not move the alias: publishing does, for the model it publishes
    champ = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    assert str(champ.version) == eval_lake["versions"]["2024-06-01"][0]
    values = [r["value"] for r in _metrics(spark, eval_lake).collect()]
    assert all(math.isfinite(v) for v in values)
