"""Video clips: evenly sampled frames through the image model, mean-pooled, fused in the image slot, hashed.

Clips are written here with PyAV (a few solid-colour 32x32 frames), so every test is fast.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.content_embeddings.config import EmbeddingConfig, FusionConfig
from hir_pipeline.content_embeddings.content_hash import content_hash, video_settings
from hir_pipeline.content_embeddings.embedder import ContentEmbedder
from hir_pipeline.content_embeddings.fusion import Fusion
from hir_pipeline.content_embeddings.image import ImageEncoder
from hir_pipeline.content_embeddings.video import (
    VideoEncoder,
    VideoError,
    load_frames,
    sample_indices,
    write_clip,
)
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model


def _grey_frames(levels, size: int = 32) -> list[np.ndarray]:
    return [np.full((size, size, 3), level, dtype=np.uint8) for level in levels]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("clips")
    write_clip(root / "ramp.mp4", _grey_frames(range(0, 240, 12)))  # 20 frames, frame i has grey level 12 i
    rng = np.random.default_rng(0)
    write_clip(root / "noise.mp4", [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(6)])
    write_clip(root / "short.mp4", _grey_frames((30, 130, 230)))
    (root / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a clip" * 4)
    Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(root / "still.png")
    Image.fromarray(np.full((32, 32, 3), 90, dtype=np.uint8)).save(root / "image.png")
    return {k: str(root / f) for k, f in (("ramp", "ramp.mp4"), ("noise", "noise.mp4"), ("short", "short.mp4"),
                                          ("corrupt", "corrupt.mp4"), ("still", "still.png"),
                                          ("image", "image.png"))} | {
        "missing": str(root / "nope.mp4"), "uri": (root / "ramp.mp4").as_uri(), "remote": "hirnosuch://b/x.mp4"}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> EmbeddingConfig:
    root = tmp_path_factory.mktemp("models")
    return EmbeddingConfig(text_model=str(build_tiny_text_model(root / "txt")),
                           image_model=str(build_tiny_image_model(root / "vit")), device="cpu", precision="float32",
                           image_batch_size=3, video_frames=4)


def test_sample_indices_are_evenly_spaced():
    assert sample_indices(20, 4) == [2, 7, 12, 17]  # the middle frame of each of 4 stretches of 5
    assert sample_indices(8, 8) == list(range(8))
    assert sample_indices(3, 8) == [0, 1, 2]  # a shorter clip gives every frame
    assert sample_indices(0, 4) == []
    picked = sample_indices(1000, 7)
    gaps = np.diff(picked)
    assert len(picked) == 7 and gaps.max() - gaps.min() <= 1 and picked[0] == 1000 // 14


def test_frames_are_sampled_evenly_from_the_clip(clips):
    frames = load_frames(clips["ramp"], 4)
    assert len(frames) == 4 and all(f.mode == "RGB" and f.size == (32, 32) for f in frames)
    levels = [float(np.asarray(f).mean()) for f in frames]
    np.testing.assert_allclose(levels, [12 * i for i in sample_indices(20, 4)], atol=4)  # lossy codec
    assert len(load_frames(clips["short"], 8)) == 3
    assert [round(float(np.asarray(f).mean()) / 100) for f in load_frames(clips["uri"], 2)] == [
        round(12 * i / 100) for i in sample_indices(20, 2)]  # file:// URI == plain path


def test_unreadable_clips_are_reasons_never_exceptions(clips):
    assert load_frames(clips["missing"], 4) == VideoError.MISSING_FILE
    assert load_frames(clips["corrupt"], 4) == VideoError.UNREADABLE
    assert load_frames(clips["remote"], 4) == VideoError.UNSUPPORTED_URI
    # a PNG is not a clip: FFmpeg may open it as a one-frame image "video" or refuse it; either is no exception
    still = load_frames(clips["still"], 4)
    assert still == VideoError.UNREADABLE or len(still) == 1


def test_pooled_embedding_is_the_mean_of_the_frame_embeddings(models, clips):
    image = ImageEncoder(models)
    video = VideoEncoder(image, frames=4)
    uris = [clips["ramp"], clips["missing"], clips["noise"], clips["short"]]
    vectors, errors = video.encode(uris)  # 4 + 4 + 3 frames in forward passes of 3: clips share batches
    assert errors == [None, VideoError.MISSING_FILE, None, None] and vectors.shape == (4, image.dim)
    np.testing.assert_array_equal(vectors[1], 0)
    for row, uri in ((0, clips["ramp"]), (2, clips["noise"]), (3, clips["short"])):
        frames = image.encode_images(load_frames(uri, 4))
        mean = frames.mean(axis=0)
        np.testing.assert_allclose(vectors[row], mean / np.linalg.norm(mean), atol=1e-5)
    assert vectors[0] @ vectors[2] < 0.999  # different clips, different vectors


def test_a_broken_clip_is_the_rows_video_error_and_the_row_keeps_its_other_modalities(models, clips):
    emb = ContentEmbedder(models)
    out = emb.embed(
        ["red shoe", "blue bag", None, "summer sale", None],
        [None, None, None, None, None],
        [None, clips["image"], None, None, None],
        [None, '{"brand": "acme"}', None, None, None],
        [clips["ramp"], clips["corrupt"], clips["missing"], None, clips["noise"]],
    )
    assert out.video_error == [None, VideoError.UNREADABLE, VideoError.MISSING_FILE, None, None]
    assert out.image_error == [None] * 5
    assert out.video[0] is not None and out.video[1] is None and out.video[3] is None
    assert all(v is not None for v in (out.text[1], out.image[1], out.attributes[1], out.fused[1]))
    assert out.fused[2] is None  # a missing clip was its only content: no vector, never a zero vector
    assert out.fused[4] is not None and out.text[4] is None  # a clip alone is content
    for v in (v for v in out.fused if v is not None):
        assert v.shape == (emb.fusion.dim,) and abs(np.linalg.norm(v) - 1) < 1e-5


def test_entities_without_video_embed_bit_for_bit_as_before(models, clips):
    emb = ContentEmbedder(models)
    columns = (["red shoe", "blue bag", None, "summer sale"], [None, "premium leather", None, None],
               [clips["image"], None, None, clips["image"]], ['{"price": 3}', None, '{"brand": "acme"}', None])
    before = emb.embed(*columns)  # the call as it was before clips existed
    none = emb.embed(*columns, [None, None, None, None])
    mixed = emb.embed(*columns, [None, clips["ramp"], None, clips["noise"]])  # rows 1 and 3 get a clip
    for kind in ("text", "image", "attributes", "fused"):
        for row in range(4):
            for out in (none, mixed):
                if kind == "fused" and out is mixed and row in (1, 3):
                    continue
                a, b = getattr(before, kind)[row], getattr(out, kind)[row]
                assert (a is None) == (b is None)
                if a is not None:
                    np.testing.assert_array_equal(a, b)  # bit for bit, not approximately
    assert not np.array_equal(before.fused[1], mixed.fused[1]) and not np.array_equal(before.fused[3], mixed.fused[3])
    assert before.video == [None] * 4 and before.video_error == [None] * 4


def test_a_clip_fills_the_image_slot_alone_or_mixed_with_the_image():
    rng = np.random.default_rng(1)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    text, image, video, attrs = (unit(rng.normal(size=(3, d))).astype(np.float32) for d in (4, 6, 6, 2))
    fusion = Fusion(4, 6, 2, FusionConfig(image_dim=None, attributes_weight=1.0, video_share=0.25))
    present = np.array([True, True, True])
    image_present, video_present = np.array([True, False, True]), np.array([True, True, False])
    fused, ok = fusion(text, present, image, image_present, attrs, present, video, video_present)
    plain, _ = fusion(text, present, image, image_present, attrs, present)
    assert ok.all()
    np.testing.assert_array_equal(fused[2], plain[2])  # no clip: untouched
    slot = slice(4, 10)
    mix = 0.75 * image[0] + 0.25 * video[0]
    np.testing.assert_allclose(fused[0, slot] / np.linalg.norm(fused[0, slot]), mix / np.linalg.norm(mix), atol=1e-6)
    np.testing.assert_allclose(fused[1, slot] * np.sqrt(3), video[1], atol=1e-6)  # 3 unit slots of weight 1
    with pytest.raises(ValueError, match="video_share"):
        FusionConfig(video_share=1.5)
    with pytest.raises(ValueError, match="video_frames"):
        EmbeddingConfig(text_model="x", video_frames=0)


def test_the_content_hash_follows_the_clip_and_entities_without_one_keep_theirs():
    fields = ("Red shoe", None, "/img/1.png", '{"a": 1}')
    # the hash of an entity without a clip is the one it had before clips existed (no re-embedding on upgrade)
    old = "08a15e8ed93d307d85530657914b71e560e27686bcd5b26ee6a39822b8c29432"  # content_hash before clips existed
    assert hashlib.sha256(b'8:Red shoe-1:10:/img/1.png8:{"a": 1}').hexdigest() == old
    assert content_hash(*fields) == content_hash(*fields, None, "video:frames=8;share=0.5") == old
    settings = video_settings(EmbeddingConfig(text_model="x"))
    with_clip = content_hash(*fields, "/clips/1.mp4", settings)
    assert with_clip != old
    assert content_hash(*fields, "/clips/2.mp4", settings) != with_clip  # a changed clip re-embeds
    more_frames = video_settings(EmbeddingConfig(text_model="x", video_frames=16))
    assert content_hash(*fields, "/clips/1.mp4", more_frames) != with_clip  # so does a video setting
    assert content_hash(*fields, "", settings) != old  # an empty URI is not a null one (as for images)
