"""The resources against real components: Spark with Delta, a lake folder, an MLflow SQLite store."""

from __future__ import annotations

import pytest

from resources import GraphSettingsResource, LakeResource, MLflowResource, SparkResource


def test_spark_resource_reuses_the_process_session_and_speaks_delta(spark, tmp_path):
    session = SparkResource(master="local[2]").get_session()
    assert session is SparkResource().get_session()  # once per process
    path = str(tmp_path / "t")
    session.range(3).write.format("delta").save(path)
    session.range(5).write.format("delta").mode("overwrite").save(path)
    assert session.read.format("delta").load(path).count() == 5
    assert session.read.format("delta").option("versionAsOf", 0).load(path).count() == 3  # time travel


def test_lake_resource_knows_every_table_and_rejects_others(tmp_path):
    lake = LakeResource(root=f"{tmp_path}/lake/")
    assert lake.path("node_embeddings") == f"{tmp_path}/lake/node_embeddings"
    assert LakeResource(root="s3a://bucket/lake").path("events") == "s3a://bucket/lake/events"
    with pytest.raises(KeyError, match="unknown lake table"):
        lake.path("nodes_embedding")


def test_mlflow_resource_creates_and_reuses_the_experiment(tmp_path):
    import mlflow

    resource = MLflowResource(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="hir-test",
                              artifact_location=(tmp_path / "artifacts").as_uri())
    first = resource.activate()
    assert resource.activate() == first
    with mlflow.start_run() as run:
        mlflow.log_metric("m", 1.0)
    stored = mlflow.get_run(run.info.run_id)
    assert stored.info.experiment_id == first and stored.data.metrics == {"m": 1.0}


def test_graph_settings_resource_is_the_graph_config_with_its_defaults():
    from spark_jobs.graph import GraphConfig

    assert GraphSettingsResource().graph_config() == GraphConfig()
    custom = GraphSettingsResource(broad_fanout=[6, 2], narrow_fanout=[4], half_life_days=7.0, lookback_days=90,
                                   seed=3).graph_config()
    assert (custom.broad_fanout, custom.narrow_fanout, custom.half_life_days, custom.lookback_days, custom.seed) == (
        (6, 2), (4,), 7.0, 90, 3)
    # every field is documented (the launchpad shows it) and maps onto a GraphConfig field
    fields = GraphSettingsResource.model_fields
    assert set(fields) == set(GraphConfig.__dataclass_fields__)
    assert all(f.description for f in fields.values())
    with pytest.raises(ValueError, match="stage_weights has 3 entries"):
        GraphSettingsResource(stage_weights=[1.0, 2.0, 3.0]).graph_config()
