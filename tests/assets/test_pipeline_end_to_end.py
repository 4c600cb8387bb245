"""The whole asset graph, materialized for real on a tiny synthetic source, as the nightly job runs it.

Small model settings keep it to minutes on two cores; the assets, checks, Delta tables and MLflow store
are the production ones. A re-run of a date is tested per asset (tests/assets: ingestion, content embeddings, graph,
model, evaluation, publish), not here a second time. Those runs are slow; what they rely on (the nightly job makes
every output table and accepts their run config) is checked fast, without running anything.
"""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest

from assets import ASSET_MODULES
from hir_pipeline.contracts import MANIFEST_TABLE, OUTPUT_TABLES, output_ddl
from hir_pipeline.definitions import MAINTENANCE_GROUP
from resources import GraphSettingsResource, ModelSettingsResource
from spark_jobs.delta_io import read_table
from tests.assets.conftest import RUN_DATE, SMALL_STRUCTURE, ingestion_run_config, make_resources
from tests.tiny_models import build_tiny_text_model

#: One set of graph settings for the graph assets and the evaluation (the graph_settings resource).
GRAPH = GraphSettingsResource(broad_fanout=[6, 2], narrow_fanout=[4], max_view_nodes=20, max_dist=3, seed=1,
                              **SMALL_STRUCTURE)
#: One set of model settings for interest_model and the evaluation (the model_settings resource).
MODEL = ModelSettingsResource(
    model={"level_sizes": [2, 4, 8], "hidden_dim": 16, "num_layers": 1, "num_heads": 2, "out_dim": 8,
           "id_buckets": 256, "attn_block_size": 64},
    train={"epochs": 1, "batch_size": 256, "engagement_batch_size": 64, "warmup_steps": 1, "pad_to": 64,
           "device": "cpu"})


def run_config(text_model: str) -> dg.RunConfig:
    ops = ingestion_run_config("all").ops
    ops["content_embeddings"] = {"config": {"text_model": text_model, "image_model": "efficientnet-lite0"}}
    # one epoch of a 16-wide model neither splits the nodes between clusters nor spreads them far apart yet (its
    # mean cosine is ~0.93); tests/assets/test_model_asset.py tests the default thresholds at work
    ops["interest_model"] = {"config": {"output_checks": {"min_clusters_used": 1, "max_mean_cosine": 0.99}}}
    ops["evaluation_report"] = {"config": {
        "split": {"min_target_users": 5}, "baselines": ["popularity", "content"], "use_production_config": True,
        "gate_tolerance": 1.0}}
    return dg.RunConfig(ops=ops)


@pytest.fixture(scope="module")
def pipeline(spark, tiny_source, tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("e2e")
    monkeypatch_module.setenv("HIR_STATE_DIR", str(root / "state"))
    resources = make_resources(spark, root / "lake", tiny_source, graph=GRAPH, model=MODEL)
    text_model = str(build_tiny_text_model(root / "text", seed=0))
    everything = [*dg.load_assets_from_modules(ASSET_MODULES), *dg.load_asset_checks_from_modules(ASSET_MODULES)]

    # the nightly job's assets: the weekly lake housekeeping is not part of a night (hir_pipeline/definitions.py)
    nightly = dg.AssetSelection.all() - dg.AssetSelection.groups(MAINTENANCE_GROUP)

    result = dg.materialize(everything, selection=nightly, partition_key=RUN_DATE, resources=resources,
                            run_config=run_config(text_model), raise_on_error=False)
    return resources, result


def test_nightly_job_makes_every_output_table_and_accepts_this_run_config(tmp_path):
    from hir_pipeline.definitions import NIGHTLY_JOB, build_definitions

    defs = build_definitions(lake_root=str(tmp_path / "lake"))
    assets = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert set(OUTPUT_TABLES) <= assets
    job = defs.resolve_job_def(NIGHTLY_JOB)
    dg.validate_run_config(job, run_config("unused-text-model").to_config_dict())  # raises on a bad setting
    with pytest.raises(dg.DagsterInvalidConfigError, match="not_a_setting"):
        bad = run_config("unused-text-model").to_config_dict()
        bad["ops"]["content_embeddings"]["config"]["not_a_setting"] = 1
        dg.validate_run_config(job, bad)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.slow
def test_every_asset_materializes_and_every_blocking_check_passes(pipeline):
    _, result = pipeline
    assert result.success
    failed = [(e.asset_key.to_user_string(), e.check_name) for e in result.get_asset_check_evaluations()
              if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR]
    assert failed == []


@pytest.mark.slow
def test_output_contract_tables(spark, pipeline):
    resources, _ = pipeline
    lake = resources["lake"]
    tables = {t: read_table(spark, lake.path(t)).where(f"run_date = '{RUN_DATE}'") for t in OUTPUT_TABLES}
    assert all(df.count() > 0 for df in tables.values())
    emb = tables["node_embeddings"].toPandas()
    assert emb["entity_id"].is_unique
    norms = np.linalg.norm(np.stack(emb["embedding"].to_list()), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-4)
    assert set(emb["entity_type"]) >= {"user", "product", "ad"}
    assign = tables["cluster_assignments"].toPandas()
    assert sorted(assign["level"].unique()) == [0, 1, 2]
    assert (assign.groupby("level")["entity_id"].nunique() == len(emb)).all()  # every node, every level
    assert assign["confidence"].between(0, 1).all()
    assert emb["model_version"].nunique() == 1
    assert set(assign["model_version"]) == set(emb["model_version"])
    for table in (*OUTPUT_TABLES, MANIFEST_TABLE):  # exactly the published schema the UI and docs show
        written = read_table(spark, lake.path(table)).schema.simpleString()
        assert written == spark.createDataFrame([], output_ddl(table)).schema.simpleString(), table
