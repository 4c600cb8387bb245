"""Attribute hashing, modality fusion, content hash and model identifier."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from hir_pipeline.content_embeddings.attributes import encode_attributes, number_buckets, parse_attributes
from hir_pipeline.content_embeddings.config import EmbeddingConfig, FusionConfig
from hir_pipeline.content_embeddings.config import EmbeddingConfig as _EmbeddingConfig
from hir_pipeline.content_embeddings.content_hash import content_hash, model_identifier
from hir_pipeline.content_embeddings.fusion import Fusion, orthonormal_projection
from hir_pipeline.content_embeddings.precision import resolved_precision
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model


def test_attributes_are_deterministic_unit_vectors():
    raw = json.dumps({"brand": "Acme", "price": 19.99, "tags": ["sale", "summer"], "size": {"eu": 42}})
    a, b = encode_attributes(raw, 64), encode_attributes(raw, 64)
    assert a.shape == (64,) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert abs(np.linalg.norm(a) - 1) < 1e-6
    # key order and case of string values do not matter
    np.testing.assert_allclose(a, encode_attributes(json.dumps(
        {"size": {"eu": 42}, "tags": ["SALE", "summer"], "price": 19.99, "brand": "acme"}), 64), atol=1e-6)


def test_attributes_similarity_follows_shared_features():
    base = encode_attributes('{"brand": "acme", "color": "red", "material": "leather", "price": 20}', 256)
    near = encode_attributes('{"brand": "acme", "color": "red", "material": "leather", "price": 22}', 256)
    pricier = encode_attributes('{"brand": "acme", "color": "red", "material": "leather", "price": 900}', 256)
    far = encode_attributes('{"brand": "zeta", "color": "blue", "material": "cotton", "price": 900}', 256)
    assert base @ near > base @ pricier > 0.7 > 0.1 > base @ far


def test_numbers_are_bucketed_by_significant_digits_whatever_their_scale():
    assert number_buckets(19.99, 3) == ["10", "19", "19.9"]
    assert number_buckets(1995, 3) == ["1000", "1900", "1990"]
    assert number_buckets(-0.0042, 2) == ["-0.004", "-0.0042"]
    assert number_buckets(0, 2) == ["0", "0"]
    vec = lambda attrs: encode_attributes(json.dumps(attrs), 512)  # noqa: E731
    # a number weighs as much as one categorical value, however large it is
    for year in (1.5, 1995, 1e9):
        v = vec({"genre": "drama", "year": year})
        assert v @ vec({"genre": "drama"}) == pytest.approx(1 / np.sqrt(2), abs=0.02)
    # similarity falls off with relative distance, in any unit
    assert vec({"year": 1995}) @ vec({"year": 1996}) > vec({"year": 1995}) @ vec({"year": 1985}) > \
        vec({"year": 1995}) @ vec({"year": 1895})
    assert vec({"price": 0.0123}) @ vec({"price": 0.0125}) == pytest.approx(
        vec({"price": 1230}) @ vec({"price": 1250}), abs=1e-6)
    # numbers written as strings (CSV/pandas exports) are numbers; booleans are categories
    np.testing.assert_allclose(vec({"price": "19.99"}), vec({"price": 19.99}))
    assert vec({"flag": True}) @ vec({"flag": 1}) < 0.5


@pytest.mark.parametrize("key", ["id", "movie_id", "movielens_id", "productId", "SKU", "isbn", "freebase_mid",
                                 "item_ids", "uuid"])
def test_identifier_keys_are_dropped(key):
    plain = encode_attributes(json.dumps({"genre": "drama", "year": 1995}), 128)
    np.testing.assert_allclose(
        encode_attributes(json.dumps({"genre": "drama", "year": 1995, key: 123456, "nested": {key: "x-1"}}), 128),
        plain)
    assert encode_attributes(json.dumps({key: 42}), 128) is None


@pytest.mark.parametrize("key", ["video", "width", "paid", "valid", "kid", "zip", "android"])
def test_words_ending_in_id_are_not_identifiers(key):
    assert encode_attributes(json.dumps({key: "x"}), 128) is not None


def test_identifier_pattern_and_digits_are_settings():
    raw = json.dumps({"code": "A-1", "price": 19.99})
    only_price = encode_attributes(json.dumps({"price": 19.99}), 64)
    np.testing.assert_allclose(encode_attributes(raw, 64, id_keys=r"^code$"), only_price)
    one_digit = encode_attributes(json.dumps({"price": 19.99}), 64, number_digits=1)
    assert one_digit @ encode_attributes(json.dumps({"price": 12}), 64, number_digits=1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="attributes_id_keys"):
        EmbeddingConfig(attributes_id_keys="(")
    with pytest.raises(ValueError, match="attributes_number_digits"):
        EmbeddingConfig(attributes_number_digits=0)


@pytest.mark.parametrize("raw", [None, "", "   ", "{}", "[1, 2]", "not json", "3", '{"a": NaN}'])
def test_attributes_without_features_give_no_vector(raw):
    assert encode_attributes(raw, 16) is None


def test_parse_attributes_only_accepts_objects():
    assert parse_attributes('{"a": 1}') == {"a": 1}
    assert parse_attributes("[1]") is None


def test_fusion_has_fixed_width_and_weighted_cosine():
    rng = np.random.default_rng(0)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    cfg = FusionConfig(text_weight=1.0, image_weight=2.0, attributes_weight=0.5, image_dim=None)
    fusion = Fusion(text_dim=8, image_dim=6, attributes_dim=4, config=cfg)
    t, i, a = unit(rng.standard_normal((2, 8))), unit(rng.standard_normal((2, 6))), unit(rng.standard_normal((2, 4)))
    yes = np.ones(2, dtype=bool)
    fused, ok = fusion(t, yes, i, yes, a, yes)
    assert fused.shape == (2, 18) and ok.all()
    np.testing.assert_allclose(np.linalg.norm(fused, axis=1), 1.0, atol=1e-6)
    expected = (1.0 * t[0] @ t[1] + 2.0 * i[0] @ i[1] + 0.5 * a[0] @ a[1]) / 3.5
    assert fused[0] @ fused[1] == pytest.approx(expected, abs=1e-5)


def test_fusion_zero_slot_for_missing_modality_and_none_for_nothing():
    fusion = Fusion(text_dim=3, image_dim=2, attributes_dim=2, config=FusionConfig(image_dim=None))
    t = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    i = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    a = np.array([[0, 1], [1, 0], [0, 1]], dtype=np.float32)
    fused, ok = fusion(t, np.array([True, False, False]), i, np.array([False, True, False]),
                       a, np.array([True, False, False]))
    assert ok.tolist() == [True, True, False]
    assert fused.shape == (3, 7)
    np.testing.assert_allclose(fused[1], [0, 0, 0, 0, 1, 0, 0], atol=1e-6)  # image only: its slot, unit
    np.testing.assert_allclose(fused[0, 3:5], 0)  # absent image slot stays zero
    np.testing.assert_array_equal(fused[2], 0)


def test_image_projection_is_orthonormal_and_reproducible():
    p = orthonormal_projection(40, 8, seed=3)
    np.testing.assert_allclose(p.T @ p, np.eye(8), atol=1e-5)
    np.testing.assert_array_equal(p, orthonormal_projection(40, 8, seed=3))
    assert not np.allclose(p, orthonormal_projection(40, 8, seed=4))
    assert Fusion(4, 40, 2, FusionConfig(image_dim=8)).dim == 14
    assert Fusion(4, 6, 2, FusionConfig(image_dim=8)).dim == 12  # never projects up


def test_content_hash_sees_every_field_and_nulls():
    base = content_hash("t", "d", "/img.png", '{"a": 1}')
    assert base == content_hash("t", "d", "/img.png", '{"a": 1}')
    others = {
        content_hash("T", "d", "/img.png", '{"a": 1}'),
        content_hash("t", "D", "/img.png", '{"a": 1}'),
        content_hash("t", "d", "/img2.png", '{"a": 1}'),
        content_hash("t", "d", "/img.png", '{"a": 2}'),
        content_hash("t", "d", "/img.png", None),
        content_hash("t", "d", "/img.png", ""),
        content_hash("td", "", "/img.png", '{"a": 1}'),  # moving text between fields is a change
    }
    assert base not in others and len(others) == 7


def test_model_identifier_tracks_models_and_output_settings(tmp_path):
    a = str(build_tiny_text_model(tmp_path / "a", seed=0))
    b = str(build_tiny_text_model(tmp_path / "b", seed=1))
    image = str(build_tiny_image_model(tmp_path / "img"))
    # A fixed precision: "auto" would time the models (tests/hir_pipeline/content_embeddings/test_precision.py).
    EmbeddingConfig = functools.partial(_EmbeddingConfig, precision="float32")  # noqa: N806
    cfg_a = EmbeddingConfig(text_model=a, image_model=image)
    assert model_identifier(cfg_a) == model_identifier(EmbeddingConfig(text_model=a, image_model=image))
    assert model_identifier(cfg_a) != model_identifier(EmbeddingConfig(text_model=b, image_model=image))
    assert model_identifier(cfg_a) != model_identifier(EmbeddingConfig(text_model=a, image_model=image,
                                                                       max_text_length=64))
    assert model_identifier(cfg_a) != model_identifier(EmbeddingConfig(
        text_model=a, image_model=image, fusion=FusionConfig(attributes_weight=0.25)))
    # speed-only settings do not force a re-embed
    assert model_identifier(cfg_a) == model_identifier(EmbeddingConfig(text_model=a, image_model=image,
                                                                       batch_size=7, num_partitions=3))
    default = model_identifier(EmbeddingConfig())
    assert "efficientnet-lite0@" in default and "len=256" in default


def test_precision_is_validated_resolved_and_part_of_the_identifier(tmp_path):
    text = str(build_tiny_text_model(tmp_path / "t"))
    image = str(build_tiny_image_model(tmp_path / "img"))
    fp32 = EmbeddingConfig(text_model=text, image_model=image, precision="float32")
    bf16 = EmbeddingConfig(text_model=text, image_model=image, precision="bfloat16")
    assert model_identifier(fp32) != model_identifier(bf16)
    assert model_identifier(fp32).endswith("precision=float32")
    auto = EmbeddingConfig(text_model=text, image_model=image, calibration_size=4,
                           precision_cache=str(tmp_path / "precision.json"))
    assert resolved_precision(auto) in {"float32", "bfloat16"}
    assert model_identifier(auto) in {model_identifier(fp32), model_identifier(bf16)}
    with pytest.raises(ValueError, match="precision"):
        EmbeddingConfig(text_model=text, image_model=image, precision="float16")
