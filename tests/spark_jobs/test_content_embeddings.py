"""spark_jobs.content_embeddings: Arrow batch inference, incremental reuse, model change, no-content rows.

The embedding runs (Python workers loading the models) are slow; the content hash in Spark is the fast test.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.content_hash import content_hash, model_identifier, video_settings
from hir_pipeline.content_embeddings.embedder import ContentEmbedder
from hir_pipeline.content_embeddings.video import VideoError, write_clip
from hir_pipeline.contracts import source_ddl
from spark_jobs.content_embeddings import ARROW_BATCH_CONF, CONTENT_EMBEDDINGS_DDL, content_hash_column, embed_content
from spark_jobs.delta_io import read_table, replace_table
from spark_jobs.session import temporary_conf
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model

D1, D2, D3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)
CONTENT_EMBEDDINGS_DDL_COLUMNS = [c.strip().split(" ")[0] for c in CONTENT_EMBEDDINGS_DDL.split(",")]


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
    rows = [("t", "d", "/i.png", '{"a": 1}', None), (None, "dé€🙂", None, "", None), ("", None, "x", None, None),
            ("t", None, None, None, "/clips/é 1.mp4"), (None, None, None, None, "")]
    df = spark.createDataFrame(rows, "title string, description string, image_uri string, attributes string, "
                                     "video_uri string")
    settings = video_settings(EmbeddingConfig(text_model="x"))
    got = [r[0] for r in df.select(content_hash_column(settings)).collect()]
    assert got == [content_hash(*r, settings) for r in rows]
    assert got[0] == content_hash(*rows[0][:4])  # without a clip: the hash from before clips existed


@pytest.mark.slow
def test_incremental_runs_and_model_change(spark, models, rows):
    cfg_a, cfg_b = models
    entities = _frame(spark, rows)

    # Ids, not a count: Spark's cleaner may unpersist other tests' cached frames meanwhile (same session).
    cached_before = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    first, counts = embed_content(entities, None, cfg_a, D1)
    assert counts == {"new": 6, "changed": 0, "reused": 0, "skipped_no_content": 1, "image_errors": 2,
                      "video_errors": 0, "failed_no_embedding": 1}
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


@pytest.mark.slow
def test_arrow_batches_of_a_few_rows_give_the_same_vectors_and_leave_the_session_conf(spark, models, rows):
    """The embedding job's Arrow batches are sized by ``arrow_batch_rows``, for that job only."""
    cfg, _ = models
    with temporary_conf(spark, ARROW_BATCH_CONF, "5000"):  # the session's own value, which the job must keep
        whole, _ = embed_content(_frame(spark, rows), None, dataclasses.replace(cfg, arrow_batch_rows=10_000), D1)
        assert spark.conf.get(ARROW_BATCH_CONF) == "5000"
        small, counts = embed_content(_frame(spark, rows), None, dataclasses.replace(cfg, arrow_batch_rows=1), D1)
        assert spark.conf.get(ARROW_BATCH_CONF) == "5000"
    assert counts["new"] == 6 and counts["failed_no_embedding"] == 1
    a, b = _by_id(whole), _by_id(small)
    assert set(a) == set(b) == {"p1", "p2", "p3", "a1", "c1"}
    for k in a:
        for col in ("text_embedding", "image_embedding", "attributes_embedding", "embedding"):
            if a[k][col] is None:
                assert b[k][col] is None, (k, col)
            else:
                np.testing.assert_allclose(b[k][col], a[k][col], atol=1e-5, err_msg=f"{k} {col}")
    whole.unpersist()
    small.unpersist()
    with pytest.raises(ValueError, match="batch sizes"):
        dataclasses.replace(cfg, arrow_batch_rows=0)


@pytest.mark.slow
def test_clips_pass_through_and_a_snapshot_from_before_clips_is_reused(spark, models, rows, tmp_path):
    cfg, _ = models
    write_clip(tmp_path / "ok.mp4", [np.full((32, 32, 3), 40 * i, dtype=np.uint8) for i in range(6)])
    (tmp_path / "broken.mp4").write_bytes(b"not a clip")
    ts = dt.datetime(2024, 1, 1)
    clips = [("v1", "ad", "Summer sale", None, None, str(tmp_path / "ok.mp4"), None, ts),
             ("v2", "ad", "Red shoes", None, None, str(tmp_path / "broken.mp4"), '{"format": "video"}', ts),
             ("v3", "ad", None, None, None, str(tmp_path / "missing.mp4"), None, ts)]  # only a missing clip
    entities = _frame(spark, rows + clips)

    # The snapshot a run wrote before clips existed: the same rows without the video columns.
    first, _ = embed_content(_frame(spark, rows), None, cfg, D1)
    old_path = str(tmp_path / "content_embeddings")
    first.drop("video_embedding", "video_error").write.format("delta").save(old_path)
    first.unpersist()

    snapshot, counts = embed_content(entities, read_table(spark, old_path), cfg, D2)
    # Only the entities with a clip (and x1, whose only content failed) are embedded: the rest keep their hash.
    assert (counts["new"], counts["changed"], counts["reused"]) == (4, 0, 5)
    assert counts["video_errors"] == 2 and counts["image_errors"] == 1 and counts["failed_no_embedding"] == 2
    assert snapshot.schema.simpleString() == spark.createDataFrame([], CONTENT_EMBEDDINGS_DDL).schema.simpleString()
    out = _by_id(snapshot)
    assert set(out) == {"p1", "p2", "p3", "a1", "c1", "v1", "v2"}
    assert out["v1"]["video_error"] is None and out["v1"]["video_embedding"] is not None
    assert abs(np.linalg.norm(out["v1"]["video_embedding"]) - 1) < 1e-5 and out["v1"]["image_embedding"] is None
    assert out["v2"]["video_error"] == VideoError.UNREADABLE and out["v2"]["video_embedding"] is None
    assert out["v2"]["text_embedding"] is not None and out["v2"]["attributes_embedding"] is not None
    assert out["v1"]["content_hash"] == content_hash("Summer sale", None, None, None, clips[0][5],
                                                     video_settings(cfg))
    for k in ("p1", "p2", "p3", "a1", "c1"):  # reused from the old snapshot, video columns null
        assert out[k]["embedded_at_run"] == D1 and out[k]["video_error"] is None
        assert out[k]["video_embedding"] is None

    # The Spark path equals the core embedder run directly.
    direct = ContentEmbedder(cfg).embed(["Summer sale"], [None], [None], [None], [clips[0][5]])
    np.testing.assert_allclose(out["v1"]["embedding"], direct.fused[0], atol=1e-5)
    np.testing.assert_allclose(out["v1"]["video_embedding"], direct.video[0], atol=1e-5)

    # Written over the old table, the snapshot adds the video columns to it.
    replace_table(snapshot, old_path, add_columns=True)
    snapshot.unpersist()
    written = _by_id(read_table(spark, old_path))
    assert set(written) == set(out) and written["v2"]["video_error"] == VideoError.UNREADABLE
    assert written["p1"]["embedding"] == out["p1"]["embedding"]


@pytest.mark.slow
def test_an_unchanged_night_keeps_the_previous_snapshot_and_a_moved_type_is_updated(spark, models, rows, tmp_path):
    cfg, _ = models
    clean = [r for r in rows if r[0] in {"p1", "p3", "a1", "c1"}]  # nothing that fails, so nothing is retried
    path = str(tmp_path / "content_embeddings")
    first, _ = embed_content(_frame(spark, clean), None, cfg, D1)
    replace_table(first, path)
    first.unpersist()
    written = {k: r.asDict() for k, r in _by_id(read_table(spark, path)).items()}

    previous = read_table(spark, path)
    previous.count()  # Delta caches its table state on the first count: that is Delta's, not this call's
    cached_before = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    same, counts = embed_content(_frame(spark, clean), previous, cfg, D2)
    assert (counts["new"], counts["changed"], counts["reused"]) == (0, 0, 4)
    assert same.columns == CONTENT_EMBEDDINGS_DDL_COLUMNS
    assert {k: r.asDict() for k, r in _by_id(same).items()} == written  # every column, embedded_at_run included
    assert set(spark.sparkContext._jsc.getPersistentRDDs().keys()) <= cached_before  # nothing left cached
    replace_table(same, path)  # the asset writes it over the table it was read from
    assert {k: r.asDict() for k, r in _by_id(read_table(spark, path)).items()} == written

    # Same content, another type: nothing is embedded, but the row follows the entity's new type.
    moved = [("a1", "product", *r[2:]) if r[0] == "a1" else r for r in clean]
    snapshot, counts = embed_content(_frame(spark, moved), read_table(spark, path), cfg, D3)
    assert (counts["new"], counts["changed"], counts["reused"]) == (0, 0, 4)
    out = _by_id(snapshot)
    assert out["a1"]["entity_type"] == "product" and out["a1"]["embedding"] == written["a1"]["embedding"]
    snapshot.unpersist()
