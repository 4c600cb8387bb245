"""Deterministic structured-metadata vectors by feature hashing (Weinberger et al., 2009, "Feature Hashing for
Large Scale Multitask Learning").

The ``attributes`` JSON object is flattened to ``key.path`` features:

* a string / boolean / null value ``v`` becomes the indicator feature ``key=v`` (value 1);
* a number ``x`` becomes the feature ``key`` with value ``sign(x) * log1p(|x|)`` (so prices and counts of very
  different scales stay comparable);
* a list contributes each element under the same key (``tags=red``, ``tags=sale``); nested objects extend the key.

Each feature is hashed with BLAKE2b (stable across processes and machines, unlike Python's salted ``hash``) to a
slot and a sign; colliding features add up with random signs so collisions cancel in expectation. The vector is
L2-normalised. No parseable feature means no vector (``None``), never a zero vector.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator

import numpy as np

#: Version of the hashing scheme; part of the model identifier, bump it when the encoding changes.
ATTRIBUTES_ENCODER_VERSION = "hash-v1"


def parse_attributes(raw: str | None) -> dict | None:
    """The JSON object in ``raw``, or ``None`` when it is null, blank, invalid or not an object."""
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _features(obj: object, prefix: str) -> Iterator[tuple[str, float]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _features(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list):
        for item in obj:
            yield from _features(item, prefix)
    elif isinstance(obj, bool) or obj is None or isinstance(obj, str):
        text = obj if isinstance(obj, str) else json.dumps(obj)
        yield f"{prefix}={text.strip().lower()}", 1.0
    elif isinstance(obj, int | float) and math.isfinite(obj):
        yield prefix, math.copysign(math.log1p(abs(obj)), obj)


def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    return (h >> 1) % dim, (1.0 if h & 1 else -1.0)


def encode_attributes(raw: str | None, dim: int) -> np.ndarray | None:
    """Hash the JSON attributes ``raw`` into a unit float32 vector of width ``dim`` (``None`` if no features).

    Args:
        raw: the ``attributes`` column (a JSON object as a string) or ``None``.
        dim: output width (``EmbeddingConfig.attributes_dim``).
    """
    obj = parse_attributes(raw)
    if not obj:
        return None
    vec = np.zeros(dim, dtype=np.float64)
    for feature, value in _features(obj, ""):
        index, sign = _slot(feature, dim)
        vec[index] += sign * value
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:  # e.g. only zero-valued numbers, or features that cancelled exactly
        return None
    return (vec / norm).astype(np.float32)
