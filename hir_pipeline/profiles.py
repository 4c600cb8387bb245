"""Run profiles: the model and training settings that fit the machine.

The library defaults of :class:`~hir_pipeline.model.config.ModelConfig` and
:class:`~hir_pipeline.model.config.TrainConfig` are the production schedule, sized for a GPU; on a laptop-class CPU
they do not finish in an evening. A profile is the ``model_settings`` resource a deployment runs with when nothing
else is configured:

* ``gpu``: the library defaults (the production schedule);
* ``cpu``: ``config/cpu_sample.yaml``'s ``model_settings``: a smaller model, a short schedule and a schedule
  budget (``TrainConfig.schedule_budget_s``) so training finishes in minutes whatever the graph's size.

The profile is chosen once, where the code location's resources are built (``hir_pipeline.definitions``), so the
runs of ``hir materialize``, of the Dagster UI, of the nightly schedule and of the refresh sensor all carry it:
``hir --profile`` first, then ``HIR_PROFILE``, then the device found (a visible NVIDIA GPU: ``gpu``). Run config
(``resources: model_settings: ...``, e.g. ``hir materialize --config``) still overrides single settings.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from hir_pipeline.settings import project_root

#: Profiles and the run-config file holding each one's ``model_settings`` (``None``: the library defaults).
PROFILE_FILES: dict[str, str | None] = {"cpu": "config/cpu_sample.yaml", "gpu": None}
#: What ``--profile`` / ``HIR_PROFILE`` accept: a profile, or ``auto`` (by the device found).
PROFILE_CHOICES = ("auto", *PROFILE_FILES)


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible to this process, without importing torch (definitions load without it):
    the driver is loaded (``/proc/driver/nvidia/version`` or ``nvidia-smi``) and ``CUDA_VISIBLE_DEVICES`` does not
    hide every device."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def choose_profile(requested: str | None = None) -> str:
    """The profile to run: ``requested`` (``hir --profile``), else ``HIR_PROFILE``, else by the device found.

    Args:
        requested: a profile name, ``auto`` or ``None``.

    Raises:
        ValueError: an unknown name (the message lists the choices).
    """
    name = requested or os.environ.get("HIR_PROFILE") or "auto"
    if name not in PROFILE_CHOICES:
        raise ValueError(f"unknown profile {name!r}; one of {', '.join(PROFILE_CHOICES)} (hir --profile, HIR_PROFILE)")
    if name == "auto":
        return "gpu" if gpu_present() else "cpu"
    return name


def profile_model_settings(profile: str) -> dict[str, Any]:
    """The ``model_settings`` resource config of ``profile`` (``{"model": {...}, "train": {...}}``; empty: the
    library defaults)."""
    file = PROFILE_FILES[profile]
    if file is None:
        return {}
    run_config = yaml.safe_load((project_root() / file).read_text()) or {}
    return run_config.get("resources", {}).get("model_settings", {}).get("config", {})
