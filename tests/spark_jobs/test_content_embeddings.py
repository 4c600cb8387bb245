"""spark_jobs.content_embeddings: Arrow batch inference, incremental reuse, model change, no-content rows.

The embedding runs (Python workers loading the models) are slow; the content hash in Spark is the fast test.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.content_hash import content_hash, model_identifier
from hir_pipeline.content_embeddings.embedder import ContentEmbedder
from hir_pipeline.contracts import source_ddl
from spark_jobs.content_embeddings import CONTENT_EMBEDDINGS_DDL, content_hash_column, embed_content
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model

D1, D2, D3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    image = str(build_tiny_image_model(root / "vit"))
    a = EmbeddingConfig(text_model=str(build_tiny_text_model(root / "a", seed=0)), image_model=image,
                        batch_size=4, num_partitions=2)
    b = EmbeddingConfig(text_model=str(build_tiny_text_model(root / "b", seed=1)), image_model=image,
                        batch_size=4, num_partitions=2)
    return a, b


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    Image.fromarray(np.full((28, 28), 200, dtype=np.uint8), mode="L").save(root / "p1.png")
    img, missing = str(root / "p1.png"), str(root / "missing.png")
    ts = dt.datetime(2024, 1, 1)
    return [
        ("p1", "product", "Red running shoes", "Fast shoes for men", img, None, '{"brand": "acme", "price": 59.0}',
         ts),
        ("p2", "product", "Blue cotton shirt", None, missing, None, None, ts),  # broken image, keeps text
        ("p3", "product", None, None, None, None, '{"color": "green"}', ts),  # attributes only
        ("a1", "ad", "Summer sale", "new premium brand", None, None, None, ts),
        ("c1", "category", "shoes", None, None, None, "{}", ts),
        ("e1", "advertiser", None, "  ", None, None, "{}", ts),  # content type without content: no row
        ("x1", "product", None, None, missing, None, None, ts),  # only a broken image: no row, counted
        ("u1", "user", "a user title is not content", None, None, None, None, ts),  # not a content type
    ]


def _frame(spark, rows):
    return spark.createDataFrame(rows, source_ddl("entities"))


def _by_id(df):
    return {r["entity_id"]: r for r in df.collect()}


def test_spark_content_hash_equals_python(spark):
    rows = [("t", "d", "/i.png", '{"a": 1}'), (None, "dé€🙂", None, ""), ("", None, "x", None)]
    df = spark.createDataFrame(rows, "title string, description string, image_uri string, attributes string")
    got = [r[0] for r in df.select(content_hash_column()).collect()]
    assert got == [content_hash(*r) for r in rows]


@pytest.mark.slow
def test_incremental_runs_and_model_change(spark, models, rows):
    cfg_a, cfg_b = models
    entities = _frame(spark, rows)

    # Ids, not a count: Spark's cleaner may unpersist other tests' cached frames meanwhile (same session).
    cached_before = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    first, counts = embed_content(entities, None, cfg_a, D1)
    assert counts == {"new": 6, "changed": 0, "reused": 0, "skipped_no_content": 1, "image_errors": 2,
                      "failed_no_embedding": 1}
    assert first.schema.simpleString() == spark.createDataFrame([], CONTENT_EMBEDDINGS_DDL).schema.simpleString()
    out = _by_id(first)
    assert set(out) == {"p1", "p2", "p3", "a1", "c1"}
    assert out["p2"]["image_error"] == "missing_file" and out["p2"]["image_embedding"] is None
    assert out["p2"]["text_embedding"] is not None
    assert out["p1"]["image_embedding"] is not None and out["p1"]["attributes_embedding"] is not None
    assert out["p3"]["text_embedding"] is None and out["p3"]["attributes_embedding"] is not None
    assert {r["model_id"] for r in out.values()} == {model_identifier(cfg_a)}
    assert {r["embedded_at_run"] for r in out.values()} == {D1}
    widths = {len(r["embedding"]) for r in out.values()}
    assert len(widths) == 1
    for r in out.values():
        assert abs(np.linalg.norm(r["embedding"]) - 1) < 1e-5
        x = next(x for x in rows if x[0] == r["entity_id"])
        assert r["content_hash"] == content_hash(x[2], x[3], x[4], x[6])  # title, description, image, attributes

    # The Spark path equals the core embedder run directly.
    direct = ContentEmbedder(cfg_a).embed(["Red running shoes"], ["Fast shoes for men"], [rows[0][4]],
                                          [rows[0][6]])
    np.testing.assert_allclose(out["p1"]["embedding"], direct.fused[0], atol=1e-5)

    # Second nightly run over unchanged content: nothing re-embedded, vectors identical. Only x1 (whose sole
    # content, an image, failed and so has no row) is retried, in case its image has appeared since.
    second, counts = embed_content(entities, first, cfg_a, D2)
    assert counts["changed"] == 0 and counts["reused"] == 5
    assert counts["new"] == 1 and counts["failed_no_embedding"] == 1 and counts["image_errors"] == 1
    again = _by_id(second)
    assert set(again) == set(out)
    for k, r in again.items():
        assert r["embedded_at_run"] == D1
        assert r["embedding"] == out[k]["embedding"]

    # One title edited, one entity added, one deleted: only those embedded (plus the retried x1).
    edited = [r for r in rows if r[0] != "c1"]
    edited[0] = ("p1", "product", "Red leather shoes", *edited[0][3:])
    edited.append(("p9", "product", "Wireless camera", None, None, None, None, dt.datetime(2024, 1, 2)))
    third, counts = embed_content(_frame(spark, edited), second, cfg_a, D3)
    assert (counts["new"], counts["changed"], counts["reused"]) == (2, 1, 3)  # p9 and the retried x1
    now = _by_id(third)
    assert set(now) == {"p1", "p2", "p3", "a1", "p9"}
    assert now["p1"]["embedded_at_run"] == D3 and now["p2"]["embedded_at_run"] == D1
    assert now["p1"]["text_embedding"] != out["p1"]["text_embedding"]

    # A different model (tiny random A vs B) re-embeds everything.
    fourth, counts = embed_content(_frame(spark, edited), third, cfg_b, D3)
    assert (counts["new"], counts["changed"], counts["reused"]) == (1, 5, 0)  # 1 = the retried x1
    changed = _by_id(fourth)
    assert {r["model_id"] for r in changed.values()} == {model_identifier(cfg_b)}
    assert changed["a1"]["text_embedding"] != now["a1"]["text_embedding"]
    # Attributes-only entity: the attribute slot does not depend on the text model.
    assert changed["p3"]["attributes_embedding"] == now["p3"]["attributes_embedding"]
    for df in (first, second, third, fourth):
        df.unpersist()
    # Unpersisting the returned frames frees everything the calls cached (no leaked intermediate).
    assert set(spark.sparkContext._jsc.getPersistentRDDs().keys()) <= cached_before
