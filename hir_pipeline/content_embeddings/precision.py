"""Precision by measurement: what ``precision: auto`` resolves to on this host.

bfloat16 autocast is not faster on every device that computes it natively: on some AVX512-BF16 CPUs MiniLM runs
*slower* in bfloat16 than in float32. So ``auto`` times a short calibration batch (``calibration_size`` texts and
images) through the configured text and image models in both precisions, keeps bfloat16 only where it is faster for
every modality, and caches the choice per host, models, torch version and device in a small JSON file
(``EmbeddingConfig.precision_cache``), so each host times each model once. A device without native bfloat16 gets
float32 without calibration. The resolved precision is part of the model identifier, so the cache also keeps the
model identifier (and with it the stored vectors) stable from run to run on one host.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.model_fingerprint import models_identifier

if TYPE_CHECKING:  # torch is imported on use: the code location imports this module and must load without it
    import torch

log = logging.getLogger(__name__)

#: bfloat16 is kept only when it takes at most this fraction of float32's time for every modality: a tie goes to
#: float32 (exact vectors), and timing noise of a few per cent does not decide.
MAX_BFLOAT16_TIME_RATIO = 0.95
#: Timed passes per precision after one warm-up pass (the best one counts: the least disturbed by other load).
CALIBRATION_REPEATS = 2

_WORDS = ("premium", "wireless", "organic", "running", "shoes", "cotton", "shirt", "espresso", "machine", "compact",
          "leather", "backpack", "free", "shipping", "limited", "edition", "comfort", "warranty", "gift", "sizes")

#: ``{modality: {precision: seconds}}`` of a calibration.
Timings = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Calibration:
    """What ``precision: auto`` resolved to on this host, and on what grounds.

    Attributes:
        precision: ``"float32"`` or ``"bfloat16"``.
        seconds: best calibration time per modality and precision (empty when nothing was timed: no native
            bfloat16 on the device).
        cached: whether the choice was read from the cache file rather than measured now.
        key: the cache key (host, device, torch version, models).
    """

    precision: str
    seconds: Timings = field(default_factory=dict)
    cached: bool = False
    key: str = ""


def autocast(device: str, precision: str) -> torch.autocast:
    """The autocast context of ``precision`` on ``device``: a no-op for float32.

    Args:
        device: torch device string (``"cpu"``, ``"cuda"``, ``"cuda:N"``).
        precision: ``"float32"`` or ``"bfloat16"`` (matrix products and convolutions in bfloat16, normalisations
            and pooling kept in float32 by autocast).
    """
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bfloat16")


def bfloat16_native(device: str) -> bool:
    """Whether ``device`` computes bfloat16 natively (CUDA with bf16; a CPU with AVX512-BF16 or AMX).

    Args:
        device: torch device string.
    """
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    # torch.cpu exposes these checks only as private helpers; absent means "not known to be native".
    return any(getattr(torch.cpu, name, lambda: False)()
               for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def choose_precision(seconds: Mapping[str, Mapping[str, float]],
                     max_ratio: float = MAX_BFLOAT16_TIME_RATIO) -> str:
    """``"bfloat16"`` if it was faster for every modality timed, else ``"float32"`` (also when nothing was timed).

    Every modality must gain, so that no model of the pipeline runs slower because of the precision.

    Args:
        seconds: ``{modality: {"float32": s, "bfloat16": s}}``.
        max_ratio: bfloat16 counts as faster when its time is at most this fraction of float32's.
    """
    if not seconds:
        return "float32"
    faster = all(t["bfloat16"] <= max_ratio * t["float32"] for t in seconds.values())
    return "bfloat16" if faster else "float32"


def calibration_key(config: EmbeddingConfig, device: str) -> str:
    """The cache key of a calibration: host, device, torch version and the models (by content).

    Args:
        config: the embedding config (its models and their input settings).
        device: torch device string the models run on.
    """
    import torch

    return f"host={platform.node()}|device={device}|torch={torch.__version__}|{models_identifier(config)}"


def read_cache(path: Path) -> dict[str, dict]:
    """The calibrations recorded in ``path`` (``{key: entry}``); empty if the file is absent or unreadable.

    Args:
        path: the JSON cache file.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # a broken cache only costs a new calibration
        log.warning("Ignoring unreadable precision cache %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(path: Path, key: str, entry: dict) -> None:
    """Record ``entry`` under ``key`` in ``path``, keeping the other entries (atomic replace of the file).

    Args:
        path: the JSON cache file (its folder is created).
        key: :func:`calibration_key`.
        entry: the calibration (precision, seconds, when).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**read_cache(path), key: entry}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
        os.replace(tmp, path)  # concurrent writers: the last one wins; a lost entry is only timed again
    except OSError as exc:
        log.warning("Could not write the precision cache %s: %s", path, exc)


def calibration_inputs(n: int, image_size: int, seed: int = 0) -> tuple[list[str], list]:
    """``n`` product-like texts of 3-60 words and ``n`` random RGB images (deterministic).

    Args:
        n: texts and images each.
        image_size: side of the square images.
        seed: random seed.
    """
    import numpy as np
    from PIL import Image

    rng = random.Random(seed)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 60))) for _ in range(n)]
    pixels = np.random.default_rng(seed).integers(0, 256, (n, image_size, image_size, 3), dtype=np.uint8)
    return texts, [Image.fromarray(p, "RGB") for p in pixels]


def time_precisions(runs: Mapping[str, Callable[[], object]], device: str,
                    repeats: int = CALIBRATION_REPEATS) -> Timings:
    """Best-of-``repeats`` seconds of each run in float32 and in bfloat16, after one warm-up pass each.

    Passes alternate between the precisions, so slow drift of the machine's load affects both alike.

    Args:
        runs: ``{modality: run}``; a run embeds the calibration batch of that modality.
        device: torch device string the runs use.
        repeats: timed passes per precision.
    """
    seconds: Timings = {m: {"float32": float("inf"), "bfloat16": float("inf")} for m in runs}
    for modality, run in runs.items():
        for i in range(repeats + 1):
            for precision in ("float32", "bfloat16"):
                with autocast(device, precision):
                    t0 = time.perf_counter()
                    run()
                    elapsed = time.perf_counter() - t0
                if i:  # pass 0 warms up (allocator, kernels, autocast caches)
                    seconds[modality][precision] = min(seconds[modality][precision], elapsed)
    return seconds


def measure(config: EmbeddingConfig, device: str) -> Timings:
    """Load the text and image models of ``config`` on ``device`` and time them (:func:`time_precisions`).

    Args:
        config: models and settings (``calibration_size``, batch sizes, ``max_text_length``, ``image_size``).
        device: torch device string.
    """
    from hir_pipeline.content_embeddings.image import ImageEncoder
    from hir_pipeline.content_embeddings.text import TextEncoder

    texts, images = calibration_inputs(config.calibration_size, config.image_size)
    text = TextEncoder(config.text_model, max_length=config.max_text_length, batch_size=config.batch_size,
                       device=device)
    image = ImageEncoder(config, device=device)
    step = config.image_batch_size

    def embed_images() -> None:
        for start in range(0, len(images), step):
            image.encode_images(images[start:start + step])

    return time_precisions({"text": lambda: text.encode(texts), "image": embed_images}, device)


def calibrate(config: EmbeddingConfig) -> Calibration:
    """Resolve ``precision: auto`` on this host: cached choice, else measured, chosen, cached and logged.

    Args:
        config: the embedding config (any ``precision``; only its models, device and calibration settings count).
    """
    device = config.resolved_device()
    if not bfloat16_native(device):
        return Calibration("float32")
    key = calibration_key(config, device)
    path = config.resolved_precision_cache()
    entry = read_cache(path).get(key)
    if isinstance(entry, dict) and entry.get("precision") in ("float32", "bfloat16"):
        log.debug("Precision %s for %s (cached in %s)", entry["precision"], key, path)
        return Calibration(entry["precision"], entry.get("seconds", {}), cached=True, key=key)
    t0 = time.perf_counter()
    seconds = measure(config, device)
    precision = choose_precision(seconds)
    log.info("Precision calibration on %s (%d texts and images, %.1f s with model loading): %s -> %s (cached in %s)",
             device, config.calibration_size, time.perf_counter() - t0,
             "; ".join(f"{m} float32 {t['float32']:.3f} s, bfloat16 {t['bfloat16']:.3f} s"
                       for m, t in seconds.items()), precision, path)
    write_cache(path, key, {"precision": precision, "seconds": seconds, "calibration_size": config.calibration_size,
                            "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    return Calibration(precision, seconds, cached=False, key=key)


def resolved_precision(config: EmbeddingConfig) -> str:
    """``"float32"`` or ``"bfloat16"``: what ``config.precision`` stands for on this machine's device.

    ``"auto"`` is resolved by measurement (:func:`calibrate`): cached per host and models, timed (loading the models)
    on the first call.

    Args:
        config: the embedding config.
    """
    return config.precision if config.precision != "auto" else calibrate(config).precision
