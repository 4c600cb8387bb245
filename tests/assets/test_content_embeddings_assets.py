"""Real ``materialize`` of ``content_embeddings`` over the bronze entities of the tiny synthetic source (slow), and
its quality check on small frames (fast)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from pyspark.sql import functions as F

from assets.content_embeddings import CHECK_QUALITY, content_embeddings, quality_expectations, quality_frame
from assets.quality import validate
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from spark_jobs.delta_io import latest_version, read_table
from tests.assets.conftest import RUN_DATE, make_resources
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model


def copy_lake(resources: dict, spark, dest: Path) -> dict:
    """A private copy of a lake (Delta logs hold relative paths), so tests never change a shared one."""
    shutil.copytree(resources["lake"].root, dest)
    return make_resources(spark, dest, resources["source"].location, dest.parent / "mlflow")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny_models")
    return {
        "text_a": str(build_tiny_text_model(root / "text_a", seed=0)),
        "text_b": str(build_tiny_text_model(root / "text_b", seed=1)),
        "image": str(build_tiny_image_model(root / "vit")),
    }


@pytest.fixture(scope="module")
def lake(ingested_lake, spark, tmp_path_factory) -> dict:
    return copy_lake(ingested_lake, spark, tmp_path_factory.mktemp("knowledge") / "lake")


def materialize(resources: dict, instance: dg.DagsterInstance | None = None, **config) -> dg.ExecuteInProcessResult:
    return dg.materialize([content_embeddings], partition_key=RUN_DATE, resources=resources, instance=instance,
                          run_config=dg.RunConfig(ops={"content_embeddings": {"config": config}}))


def tiny(models: dict, text: str = "text_a") -> dict:
    return {"text_model": models[text], "image_model": models["image"], "batch_size": 16, "num_partitions": 2}


def metadata(result: dg.ExecuteInProcessResult) -> dict:
    [mat] = result.get_asset_materialization_events()
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def check_passed(result: dg.ExecuteInProcessResult) -> bool:
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == CHECK_QUALITY
    return check.passed


def vectors(spark, resources: dict) -> dict[str, tuple]:
    rows = read_table(spark, resources["lake"].path("content_embeddings")).collect()
    return {r["entity_id"]: (tuple(r["embedding"]), r["model_id"], r["embedded_at_run"]) for r in rows}


def test_quality_check_rejects_vectors_that_are_not_unit_or_of_another_model(spark):
    schema = "entity_id string, entity_type string, content_hash string, model_id string, embedding array<float>"
    good = [("p1", "product", "h1", "m", [0.6, 0.8]), ("a1", "ad", "h2", "m", [1.0, 0.0])]
    assert validate(quality_frame(spark.createDataFrame(good, schema)), "content_ok", quality_expectations("m")).passed
    bad = [("p1", "product", "h1", "m", [0.6, 0.9]), ("a1", "ad", "h2", "old", [1.0, 0.0])]
    result = validate(quality_frame(spark.createDataFrame(bad, schema)), "content_bad", quality_expectations("m"))
    assert not result.passed
    failed = {(f["expectation"], f["kwargs"]["column"]) for f in result.metadata["failed_expectations"].value}
    assert failed == {("expect_column_values_to_be_between", "embedding_norm"),
                      ("expect_column_values_to_be_in_set", "model_id")}


@pytest.fixture(scope="module")
def first(lake, tiny_models) -> dg.ExecuteInProcessResult:
    return materialize(lake, **tiny(tiny_models))


@pytest.mark.slow
def test_first_run_embeds_every_content_entity_and_check_passes(spark, lake, first):
    assert first.success and check_passed(first)
    content = read_table(spark, lake["lake"].path("entities")).where(F.col("entity_type").isin(*CONTENT_ENTITY_TYPES))
    table = read_table(spark, lake["lake"].path("content_embeddings"))
    meta = metadata(first)
    rows = table.count()
    assert rows == meta["dagster/row_count"] == meta["new"] > 0
    assert meta["changed"] == meta["reused"] == 0
    assert rows + meta["skipped_no_content"] + meta["failed_no_embedding"] == content.count()
    assert meta["delta_version"] == latest_version(spark, lake["lake"].path("content_embeddings"))
    assert {r[0] for r in table.select("model_id").distinct().collect()} == {meta["model_id"]}
    embedding = np.array([r[0] for r in table.select("embedding").collect()])
    assert embedding.shape == (rows, meta["embedding_dim"])
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-5)
    # The tiny synthetic source gives a few ads a clip: each is embedded (through the tiny image model), none fails.
    clips = {r[0] for r in content.where(F.col("video_uri").isNotNull()).select("entity_id").collect()}
    with_video = {r[0] for r in table.where(F.col("video_embedding").isNotNull()).select("entity_id").collect()}
    assert clips and with_video == clips and meta["video_errors"] == meta["image_errors"] == 0


@pytest.mark.slow
def test_second_run_over_unchanged_content_reembeds_nothing(spark, lake, tiny_models, first):
    before = vectors(spark, lake)
    version = latest_version(spark, lake["lake"].path("content_embeddings"))
    again = materialize(lake, **tiny(tiny_models))
    assert again.success and check_passed(again)
    meta = metadata(again)
    assert meta["new"] == meta["changed"] == meta["embedded_this_run"] == 0
    assert meta["reused"] == len(before) == meta["dagster/row_count"]
    assert vectors(spark, lake) == before  # same vectors, same embedded_at_run: copied, not recomputed
    assert meta["delta_version"] > version


@pytest.mark.slow
def test_run_log_names_run_date_rows_and_delta_version(spark, lake, tiny_models, first):
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(lake, instance=instance, **tiny(tiny_models))
    log = [e.user_message for e in instance.all_logs(result.run_id) if e.step_key == "content_embeddings"]
    meta = metadata(result)
    assert meta["delta_version"] == latest_version(spark, lake["lake"].path("content_embeddings"))
    line = f"content_embeddings for run date {RUN_DATE}: {meta['dagster/row_count']:,} rows written in "
    assert [m for m in log if m.startswith(line) and m.endswith(f"s, Delta version {meta['delta_version']}")], log


@pytest.mark.slow
def test_model_change_reembeds_everything(spark, lake, tiny_models, first):
    before = vectors(spark, lake)
    changed = materialize(lake, **tiny(tiny_models, "text_b"))
    assert changed.success and check_passed(changed)
    meta = metadata(changed)
    assert meta["changed"] == len(before) and meta["reused"] == meta["new"] == 0
    after = vectors(spark, lake)
    assert set(after) == set(before)
    assert {v[1] for v in after.values()} == {meta["model_id"]} != {v[1] for v in before.values()}
    assert all(after[k][0] != before[k][0] for k in after)


@pytest.mark.slow
def test_default_bundled_models_offline(spark, ingested_lake, tmp_path, monkeypatch):
    """The defaults (bundled MiniLM + EfficientNet-Lite0) load with the hub switched off."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resources = copy_lake(ingested_lake, spark, tmp_path / "lake")
    result = materialize(resources, num_partitions=2)
    assert result.success and check_passed(result)
    meta = metadata(result)
    assert meta["new"] == meta["dagster/row_count"] > 0
    assert "all-MiniLM-L6-v2" in meta["text_model"] and meta["image_model"] == "efficientnet-lite0"
    # MiniLM 384 + EfficientNet projected to 256 + hashed attributes 64 slots, fused.
    assert meta["embedding_dim"] == 384 + 256 + 64
