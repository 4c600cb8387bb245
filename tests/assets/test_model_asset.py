"""interest_model: real dg.materialize on the tiny lake -> MLflow run + registered version, model Delta tables,
re-runs replace rows, a fixed seed reproduces the model on CPU, a stopped training resumes to the same model."""

from __future__ import annotations

import datetime as dt
import os
import re

import dagster as dg
import numpy as np
import pydantic
import pytest
from pyspark.sql import functions as F

from assets.model import checkpoint_dir, interest_model
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES, MODEL_HIERARCHY_DDL, MODEL_OUTPUTS_DDL
from resources import GraphSettingsResource, ModelSettingsResource
from spark_jobs.content_embeddings import CONTENT_EMBEDDINGS_DDL
from spark_jobs.delta_io import read_table, replace_run_date
from spark_jobs.graph import build_edges, build_nodes, build_views
from tests.assets.conftest import RUN_DATE, SMALL_STRUCTURE, make_resources
from tests.dagster_instance import ephemeral_instance

DAY = dt.date.fromisoformat(RUN_DATE)
#: max_dist 3, not the default 4: the model's follows it.
GRAPH_SETTINGS = GraphSettingsResource(broad_fanout=[4, 2], narrow_fanout=[3], max_view_nodes=12, max_dist=3,
                                         seed=1, **SMALL_STRUCTURE)
GRAPH = GRAPH_SETTINGS.graph_config()
CONTENT_DIM = 12
LEVELS = [2, 4]
MODEL = {"level_sizes": LEVELS, "hidden_dim": 16, "num_layers": 1, "num_heads": 2, "out_dim": 8, "id_buckets": 256,
         "teacher_temp": 0.07, "attn_block_size": 128}
TRAIN = {"epochs": 2, "batch_size": 256, "engagement_batch_size": 32, "lr": 3e-3, "warmup_steps": 2, "pad_to": 128,
         "log_every": 1, "device": "cpu", "seed": 3}
MODEL_SETTINGS = ModelSettingsResource(model=MODEL, train=TRAIN)


#: A 2-epoch, 16-wide model has not learnt to split the nodes between its clusters yet (it puts them all in one);
#: these tests accept that, and :func:`test_a_model_failing_its_output_checks_is_neither_written_nor_registered`
#: tests the checks at work.
TINY_MODEL_CHECKS = {"min_clusters_used": 1}


def _run_config(**overrides) -> dg.RunConfig:
    """Run config of ``interest_model``: how it runs (the model settings are the model_settings resource)."""
    return dg.RunConfig(ops={"interest_model": {"config": {"output_checks": TINY_MODEL_CHECKS, **overrides}}})


def write_model_inputs(spark, bronze, lake) -> None:
    """The graph tables of DAY (spark_jobs.graph on the bronze tables of ``bronze``, partitioned by run_date) and a
    content_embeddings snapshot of random vectors for every content entity, written to ``lake``."""
    ents, rels, evs = (read_table(spark, bronze.path(t)) for t in ("entities", "relations", "events"))
    edges = build_edges(ents, rels, evs, DAY, GRAPH).localCheckpoint()
    nodes = build_nodes(ents, edges, DAY, GRAPH).localCheckpoint()
    views = build_views(nodes, edges, DAY, GRAPH)
    for table, df in (("graph_edges", edges), ("graph_nodes", nodes), ("graph_views", views)):
        replace_run_date(df, lake.path(table), DAY)
    content_ents = sorted(tuple(r) for r in ents.where(F.col("entity_type").isin(*CONTENT_ENTITY_TYPES))
                          .select("entity_id", "entity_type").collect())
    rng = np.random.default_rng(0)
    rows = [(eid, etype, "h", "tiny", None, None, None, None, rng.normal(size=CONTENT_DIM).tolist(), None, None, DAY)
            for eid, etype in content_ents]
    # like assets/content_embeddings.py: one current snapshot (no run_date column), replaced as a whole
    spark.createDataFrame(rows, CONTENT_EMBEDDINGS_DDL).write.format("delta").mode("overwrite").save(
        lake.path("content_embeddings"))


@pytest.fixture(scope="module")
def model_lake(spark, ingested_lake, tmp_path_factory):
    """A lake of its own holding the model inputs of RUN_DATE (:func:`write_model_inputs`); HIR_STATE_DIR points
    at a temporary folder (the checkpoints go there)."""
    resources = make_resources(spark, tmp_path_factory.mktemp("model") / "lake", "unused", graph=GRAPH_SETTINGS,
                               model=MODEL_SETTINGS)
    write_model_inputs(spark, ingested_lake["lake"], resources["lake"])
    nodes = read_table(spark, resources["lake"].path("graph_nodes"))
    state = tmp_path_factory.mktemp("state")
    before = os.environ.get("HIR_STATE_DIR")
    os.environ["HIR_STATE_DIR"] = str(state)
    yield resources | {"n_nodes": nodes.count(), "ids": {r.entity_id for r in nodes.select("entity_id").collect()}}
    if before is None:
        os.environ.pop("HIR_STATE_DIR", None)
    else:
        os.environ["HIR_STATE_DIR"] = before


def _materialize(resources, instance: dg.DagsterInstance | None = None, **overrides):
    res = {k: resources[k] for k in ("spark", "lake", "mlflow", "graph_settings", "model_settings")}
    return dg.materialize([interest_model], partition_key=RUN_DATE, resources=res,
                          run_config=_run_config(**overrides), raise_on_error=False, instance=instance)


def _outputs(spark, resources, table="model_outputs"):
    return read_table(spark, resources["lake"].path(table)).where(F.col("run_date") == F.lit(DAY))


def _client(resources):
    from mlflow import MlflowClient

    resources["mlflow"].activate()
    return MlflowClient()


@pytest.fixture(scope="module")
def first_run(spark, model_lake):
    instance = ephemeral_instance()  # with the committed python_logs: the trainer's lines reach the run log
    result = _materialize(model_lake, instance=instance)
    assert result.success
    meta = result.asset_materializations_for_node("interest_model")[0].metadata
    emb = {r.entity_id: np.asarray(r.embedding, dtype=np.float32) for r in _outputs(spark, model_lake).collect()}
    log = [e.user_message for e in instance.all_logs(result.run_id)
           if e.step_key == "interest_model" and e.user_message]
    return {"meta": {k: v.value for k, v in meta.items()}, "embeddings": emb, "log": log}


def test_published_encoder_is_validated_config():
    assert ModelSettingsResource().train_config().published_encoder == "student"
    teacher = ModelSettingsResource(train={"published_encoder": "teacher"})
    assert teacher.train_config().published_encoder == "teacher"
    with pytest.raises(pydantic.ValidationError, match="published_encoder"):
        ModelSettingsResource(train={"published_encoder": "ema"})


@pytest.mark.slow
def test_materialize_tracks_registers_and_writes_tables(spark, model_lake, first_run):
    meta = first_run["meta"]
    version, run_id = meta["model_version"], meta["mlflow_run_id"]
    client = _client(model_lake)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["hir.run_date"] == RUN_DATE and run.data.tags["hir.model_version"] == version
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [0, 1]
    for lvl in range(len(LEVELS)):
        history = client.get_metric_history(run_id, f"perplexity_level_{lvl}")
        assert [m.step for m in history] == [0, 1] and all(1.0 <= m.value <= LEVELS[lvl] + 1e-6 for m in history)
    assert run.data.params["model.level_sizes"] == "[2, 4]" and run.data.params["train.epochs"] == "2"
    assert run.data.params["model.max_dist"] == "3"  # the graph's (graph_settings), not ModelConfig's default
    assert "train_time_s" in run.data.metrics and run.data.tags["hir.device"] == "cpu"
    inputs = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    assert {n.split("@")[0] for n in inputs} == {"graph_nodes", "graph_edges", "graph_views", "content_embeddings"}
    assert all('"delta_table_version": "0"' in d.source for d in inputs.values())
    mv = client.get_model_version(model_lake["mlflow"].registered_model, version)
    assert mv.run_id == run_id and mv.tags["hir.run_date"] == RUN_DATE
    # the student is published by default: logged as a param, on the version, and in model_meta.json
    assert run.data.params["train.published_encoder"] == "student" and meta["published_encoder"] == "student"
    assert mv.tags["hir.published_encoder"] == "student"
    import mlflow

    model_meta = mlflow.artifacts.load_dict(f"runs:/{run_id}/model_meta.json")
    assert model_meta["published_encoder"] == model_meta["train_config"]["published_encoder"] == "student"
    assert model_meta["centers"] is None and model_meta["temperature"] == model_meta["model_config"]["student_temp"]

    outputs = _outputs(spark, model_lake)
    assert outputs.schema.simpleString() == spark.createDataFrame([], MODEL_OUTPUTS_DDL).schema.simpleString()
    rows = outputs.collect()
    assert len(rows) == model_lake["n_nodes"] and {r.entity_id for r in rows} == model_lake["ids"]
    for r in rows:
        assert r.model_version == version and len(r.cluster_ids) == len(r.confidences) == len(LEVELS)
        assert all(0 <= c < k for c, k in zip(r.cluster_ids, LEVELS, strict=True))
        assert all(0 < p <= 1 for p in r.confidences)
        # published rows: transformer part, weighted structure part, unit-norm filler (structure_score_weight)
        width = MODEL["out_dim"] + model_meta["model_config"]["structure_dim"] + 1
        assert abs(np.linalg.norm(r.embedding) - 1) < 1e-5 and len(r.embedding) == width
    hierarchy = _outputs(spark, model_lake, "model_hierarchy")
    assert hierarchy.schema.simpleString() == spark.createDataFrame([], MODEL_HIERARCHY_DDL).schema.simpleString()
    protos = hierarchy.collect()
    assert sorted((r.level, r.cluster_id) for r in protos) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert all((r.parent_cluster_id is None) == (r.level == 0) for r in protos)
    assert all(r.parent_cluster_id in (0, 1) for r in protos if r.level == 1)
    assert meta["epochs"] == 2 and meta["dagster/row_count"] == model_lake["n_nodes"] and meta["device"] == "cpu"
    assert not checkpoint_dir(DAY).exists()  # removed after success

    model = mlflow.pytorch.load_model(f"models:/{model_lake['mlflow'].registered_model}/{version}")
    level1 = sorted((r for r in protos if r.level == 1), key=lambda r: r.cluster_id)
    loaded = model.hierarchy.prototypes[1].detach()
    np.testing.assert_allclose((loaded / loaded.norm(dim=-1, keepdim=True)).numpy(),
                               np.asarray([r.prototype for r in level1]), atol=1e-6)


@pytest.mark.slow
def test_run_log_reports_collection_training_and_delta_versions(first_run):
    """The run's own event log: each collected part and the Spark jobs that collected them,
    the trainer's steps (log_every=1), and the run date and Delta versions read and written."""
    log, meta = first_run["log"], first_run["meta"]
    collected = [m for m in log if m.startswith("collected ")]
    assert [re.sub(r"[\d,]+", "N", m.split(" in ")[0]) for m in collected] == [
        "collected N nodes", "collected structure embeddings of N nodes (dim N)",
        "collected N broad and N narrow views", "collected content vectors of N nodes (dim N)",
        "collected N engagement pairs and N seen-only pairs"], log
    assert any(re.fullmatch(r"interest_model: collect inputs: \d+s, \d+ Spark jobs? \(\d+ succeeded\), [\d,]+ tasks", m)
               for m in log), log
    assert any(re.match(r"epoch 0 step 1/\d+ loss", m) for m in log), "the trainer's step lines reach the run log"
    assert any(m.startswith(f"Reading inputs of {RUN_DATE} at Delta versions {meta['input_delta_versions']}")
               for m in log), log
    assert any(f"for run date {RUN_DATE}" in m and m.endswith(f"at Delta versions {meta['output_delta_versions']}")
               for m in log), log


@pytest.mark.slow
def test_stopped_training_resumes_to_the_same_model_and_replaces_rows(spark, model_lake, first_run):
    client = _client(model_lake)
    stopped = _materialize(model_lake, time_budget_s=0.0)  # stops after epoch 1 of 2, keeps the checkpoint
    assert not stopped.success
    assert sorted(p.name for p in checkpoint_dir(DAY).glob("epoch_*.pt")) == ["epoch_0000.pt"]
    failed = client.search_runs([client.get_experiment_by_name(model_lake["mlflow"].experiment).experiment_id],
                                "attributes.status = 'FAILED'")
    assert len(failed) == 1 and [m.step for m in client.get_metric_history(failed[0].info.run_id, "loss")] == [0]

    resumed = _materialize(model_lake)
    assert resumed.success
    meta = {k: v.value for k, v in resumed.asset_materializations_for_node("interest_model")[0].metadata.items()}
    assert meta["resumed_epochs"] == 1 and meta["mlflow_run_id"] == failed[0].info.run_id  # same run, continued
    assert meta["model_version"] != first_run["meta"]["model_version"]
    run = client.get_run(meta["mlflow_run_id"])
    assert run.info.status == "FINISHED" and [m.step for m in client.get_metric_history(run.info.run_id, "loss")] \
        == [0, 1]

    rows = _outputs(spark, model_lake).collect()
    assert len(rows) == model_lake["n_nodes"] and {r.model_version for r in rows} == {meta["model_version"]}
    assert _outputs(spark, model_lake, "model_hierarchy").count() == sum(LEVELS)
    # same seed, same inputs, on CPU: the resumed training is the straight one, bit for bit
    for r in rows:
        np.testing.assert_array_equal(np.asarray(r.embedding, dtype=np.float32), first_run["embeddings"][r.entity_id])


@pytest.mark.slow
def test_a_model_failing_its_output_checks_is_neither_written_nor_registered(spark, model_lake, first_run):
    """The tiny model publishing its learned prototypes (no refinement) and a collapse threshold it cannot meet: the
    blocking check fails, the run fails, the lake keeps the first run's rows and no version is registered."""
    client = _client(model_lake)
    name = model_lake["mlflow"].registered_model
    versions_before = {v.version for v in client.search_model_versions(f"name = '{name}'")}
    rows_before = sorted((r.entity_id, r.model_version) for r in _outputs(spark, model_lake).collect())

    learned = ModelSettingsResource(model=MODEL, train={**TRAIN, "prototype_refinement_iters": 0})
    result = _materialize({**model_lake, "model_settings": learned}, output_checks={"max_mean_cosine": -1.0})
    assert not result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(checks) == {"embeddings_finite_unit_norm", "every_level_uses_several_clusters",
                           "embedding_space_not_collapsed"}
    assert checks["embeddings_finite_unit_norm"].passed
    # the tiny model's learned prototypes may leave a level with one cluster: the verdict says what was measured
    used = checks["every_level_uses_several_clusters"].metadata["clusters_used"].value
    assert len(used) == len(LEVELS) and all(1 <= u <= k for u, k in zip(used, LEVELS, strict=True))
    assert checks["every_level_uses_several_clusters"].passed == all(u >= 2 for u in used)
    assert not checks["embedding_space_not_collapsed"].passed and all(e.blocking for e in checks.values())
    meta = {k: v.value for k, v in result.asset_materializations_for_node("interest_model")[0].metadata.items()}
    assert meta["outputs_written"] is False and meta["model_version"] == "none"
    assert {v.version for v in client.search_model_versions(f"name = '{name}'")} == versions_before
    assert sorted((r.entity_id, r.model_version) for r in _outputs(spark, model_lake).collect()) == rows_before
    run = client.get_run(meta["mlflow_run_id"])
    assert "embedding_space_not_collapsed" in run.data.tags["hir.rejected"]
    assert "check.embedding_space_not_collapsed.mean_pairwise_cosine" in run.data.metrics


@pytest.mark.slow
def test_two_processes_train_through_torch_distributor_and_publish_like_one(spark, model_lake, first_run):
    two = ModelSettingsResource(model=MODEL, train={**TRAIN, "processes": 2})
    result = _materialize(model_lake | {"model_settings": two})
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("interest_model")[0].metadata.items()}
    assert meta["fingerprint"] != first_run["meta"]["fingerprint"]  # 2 ranks train another model: a run of its own
    client = _client(model_lake)
    run = client.get_run(meta["mlflow_run_id"])
    assert run.data.params["train.processes"] == "2" and run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [0, 1]  # the ranks' epochs
    rows = _outputs(spark, model_lake).collect()
    assert len(rows) == model_lake["n_nodes"] and {r.model_version for r in rows} == {meta["model_version"]}
    assert all(abs(np.linalg.norm(r.embedding) - 1) < 1e-5 and len(r.cluster_ids) == len(LEVELS) for r in rows)
    assert meta["epochs"] == 2 and meta["resumed_epochs"] == 0 and not checkpoint_dir(DAY).exists()


def test_distributor_mode_is_validated_config():
    from assets.model import TrainingConfig

    assert TrainingConfig().distributor_mode == "auto"
    assert TrainingConfig(distributor_mode="cluster").distributor_mode == "cluster"
    with pytest.raises(pydantic.ValidationError, match="distributor_mode"):
        TrainingConfig(distributor_mode="driver")


def test_output_cluster_stats_report_sharpness_and_the_published_tree():
    from types import SimpleNamespace

    from assets.model_tracking import output_cluster_stats
    from hir_pipeline.training.inference import InferenceResult

    probs = [np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]], dtype=np.float32),
             np.array([[0.6, 0.2, 0.2], [0.1, 0.5, 0.4], [0.2, 0.2, 0.6]], dtype=np.float32)]
    # fine clusters 0 and 1 hold nodes of coarse 0, fine 2 a node of coarse 1; the published tree misplaces fine 1
    inference = InferenceResult(np.zeros((3, 2), np.float32), probs, [np.array([0, 1, 1])], np.ones(3, bool))
    stats = output_cluster_stats(SimpleNamespace(inference=inference))
    assert stats["output_mean_top_probability_level_0"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    assert stats["output_mean_top_probability_level_1"] == pytest.approx((0.6 + 0.5 + 0.6) / 3)
    assert stats["output_clusters_used_level_1"] == 3.0
    assert stats["hierarchy_consistency_level_1"] == pytest.approx(2 / 3)
