"""Precision by measurement: the decision from timings, and ``precision: auto`` timed once per host and models."""

from __future__ import annotations

import json
import logging

import pytest

from hir_pipeline.content_embeddings import precision as calibration
from hir_pipeline.content_embeddings.config import EmbeddingConfig
from tests.tiny_models import build_tiny_image_model, build_tiny_text_model


def _timings(text: tuple[float, float], image: tuple[float, float]) -> dict[str, dict[str, float]]:
    """``{modality: {precision: seconds}}`` from ``(float32, bfloat16)`` pairs."""
    return {m: {"float32": f, "bfloat16": b} for m, (f, b) in (("text", text), ("image", image))}


@pytest.mark.parametrize(("text", "image", "expected"), [
    ((1.0, 0.5), (2.0, 0.9), "bfloat16"),   # faster for both
    ((1.0, 1.2), (2.0, 0.9), "float32"),    # slower for text: text would lose
    ((1.0, 0.5), (2.0, 2.1), "float32"),    # slower for images
    ((1.0, 0.97), (2.0, 1.5), "float32"),   # a 3 % gain is within the noise: float32 (exact vectors)
    ((1.0, 0.95), (2.0, 1.9), "bfloat16"),  # exactly the threshold counts as faster
])
def test_choice_from_timings(text, image, expected):
    assert calibration.choose_precision(_timings(text, image)) == expected


def test_choice_without_timings_is_float32():
    assert calibration.choose_precision({}) == "float32"
    assert calibration.choose_precision({"text": {"float32": 1.0, "bfloat16": 0.5}}, max_ratio=0.4) == "float32"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """Two tiny random text models (different weights) and a tiny image model, built once for the module."""
    root = tmp_path_factory.mktemp("tiny")
    return {"a": str(build_tiny_text_model(root / "a", seed=0)), "b": str(build_tiny_text_model(root / "b", seed=1)),
            "image": str(build_tiny_image_model(root / "vit"))}


@pytest.fixture
def native_bf16(monkeypatch) -> list[EmbeddingConfig]:
    """The device counts as computing bfloat16 natively; returns the configs :func:`measure` was called with."""
    monkeypatch.setattr(calibration, "bfloat16_native", lambda device: True)
    calls: list[EmbeddingConfig] = []
    real = calibration.measure

    def counted(config, device):
        calls.append(config)
        return real(config, device)

    monkeypatch.setattr(calibration, "measure", counted)
    return calls


def _config(tiny_models, tmp_path, text: str = "a") -> EmbeddingConfig:
    return EmbeddingConfig(text_model=tiny_models[text], image_model=tiny_models["image"], device="cpu",
                           calibration_size=4, precision_cache=str(tmp_path / "cache" / "precision.json"))


def test_auto_is_measured_once_then_read_from_the_cache(tiny_models, tmp_path, native_bf16, caplog):
    config = _config(tiny_models, tmp_path)
    with caplog.at_level(logging.INFO, logger=calibration.__name__):
        first = calibration.calibrate(config)
    assert len(native_bf16) == 1 and not first.cached and first.precision in ("float32", "bfloat16")
    assert set(first.seconds) == {"text", "image"} and all(s > 0 for t in first.seconds.values() for s in t.values())
    assert f"-> {first.precision}" in caplog.text and "text float32" in caplog.text  # times and choice are logged
    stored = json.loads(config.resolved_precision_cache().read_text())
    assert stored[first.key]["precision"] == first.precision and stored[first.key]["calibration_size"] == 4

    second = calibration.calibrate(config)
    assert len(native_bf16) == 1 and second.cached and second.precision == first.precision
    assert calibration.resolved_precision(config) == first.precision and len(native_bf16) == 1  # from the cache


def test_cache_entries_of_other_hosts_and_models_are_ignored(tiny_models, tmp_path, native_bf16, monkeypatch):
    config = _config(tiny_models, tmp_path)
    key = calibration.calibration_key(config, "cpu")
    other_host = key.replace(f"host={calibration.platform.node()}|", "host=elsewhere|")
    # Another host recorded a choice for the same models: it says nothing about this host.
    calibration.write_cache(config.resolved_precision_cache(), other_host, {"precision": "bfloat16", "seconds": {}})
    calibration.calibrate(config)
    assert len(native_bf16) == 1
    other_model = calibration.calibrate(_config(tiny_models, tmp_path, text="b"))  # new weights: timed again
    assert len(native_bf16) == 2 and not other_model.cached
    assert set(json.loads(config.resolved_precision_cache().read_text())) == {key, other_host, other_model.key}
    monkeypatch.setattr(calibration.platform, "node", lambda: "elsewhere")
    assert calibration.calibrate(config).cached and len(native_bf16) == 2  # that host's entry, for that host


def test_measured_timings_decide_and_an_unreadable_cache_is_measured_again(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "bfloat16_native", lambda device: True)
    monkeypatch.setattr(calibration, "measure", lambda config, device: _timings((1.0, 0.5), (2.0, 1.0)))
    config = _config(tiny_models, tmp_path)
    config.resolved_precision_cache().parent.mkdir(parents=True)
    config.resolved_precision_cache().write_text("{not json")
    assert calibration.resolved_precision(config) == "bfloat16"
    monkeypatch.setattr(calibration, "measure", lambda config, device: _timings((1.0, 1.3), (2.0, 1.0)))
    assert calibration.resolved_precision(config) == "bfloat16"  # cached: the new (slower) timings are never taken


def test_no_native_bfloat16_is_float32_without_calibration(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "bfloat16_native", lambda device: False)
    monkeypatch.setattr(calibration, "measure", lambda config, device: pytest.fail("must not calibrate"))
    config = EmbeddingConfig(device="cpu", precision_cache=str(tmp_path / "p.json"))
    assert calibration.calibrate(config) == calibration.Calibration("float32")
    assert calibration.resolved_precision(config) == "float32" and not (tmp_path / "p.json").exists()


def test_cache_location_is_a_setting_defaulting_to_the_host_cache_folder(tmp_path, monkeypatch):
    """A host fact, not a project's: every state folder on the host (each test's, each project's) shares it."""
    monkeypatch.setenv("HIR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HIR_CACHE_DIR", str(tmp_path / "cache"))
    assert EmbeddingConfig().resolved_precision_cache() == tmp_path / "cache" / "precision_calibration.json"
    assert EmbeddingConfig(precision_cache=str(tmp_path / "x.json")).resolved_precision_cache() == tmp_path / "x.json"
    with pytest.raises(ValueError, match="calibration_size"):
        EmbeddingConfig(calibration_size=0)
