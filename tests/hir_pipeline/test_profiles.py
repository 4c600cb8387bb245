"""Run profiles: chosen by flag, environment, then device; the code location's model settings are the profile's."""

from __future__ import annotations

import pytest

from hir_pipeline.model.config import TrainConfig
from hir_pipeline.profiles import choose_profile, gpu_present, profile_model_settings


def test_the_flag_then_the_environment_then_the_device_choose(monkeypatch):
    monkeypatch.setenv("HIR_PROFILE", "gpu")
    assert choose_profile("cpu") == "cpu"
    assert choose_profile() == "gpu"
    monkeypatch.delenv("HIR_PROFILE")
    assert choose_profile() == choose_profile("auto") == ("gpu" if gpu_present() else "cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not gpu_present() and choose_profile() == "cpu"  # every device hidden: the CPU profile
    with pytest.raises(ValueError, match=r"unknown profile 'tpu'; one of auto, cpu, gpu"):
        choose_profile("tpu")


def test_the_cpu_profile_is_the_sample_config_with_a_schedule_budget_and_gpu_the_library_defaults():
    cpu = profile_model_settings("cpu")
    assert cpu["model"]["hidden_dim"] < 128 and cpu["train"]["epochs"] < TrainConfig().epochs
    assert cpu["train"]["schedule_budget_s"] > 0
    assert profile_model_settings("gpu") == {}


def test_every_run_of_the_code_location_carries_the_profile(monkeypatch):
    """The schedule's, the sensor's and the UI's runs use the code location's resources: the profile's."""
    from hir_pipeline.definitions import build_definitions
    from resources import ModelSettingsResource

    cpu = build_definitions(profile="cpu").resources["model_settings"]
    assert cpu.train.schedule_budget_s == profile_model_settings("cpu")["train"]["schedule_budget_s"]
    assert cpu.model.hidden_dim == profile_model_settings("cpu")["model"]["hidden_dim"]
    gpu = build_definitions(profile="gpu").resources["model_settings"]
    assert gpu.train_config() == ModelSettingsResource().train_config() == TrainConfig()
    monkeypatch.setenv("HIR_PROFILE", "cpu")
    assert build_definitions().resources["model_settings"].train.epochs == cpu.train.epochs
