"""Deterministic structured-metadata vectors by feature hashing (Weinberger et al., 2009, "Feature Hashing for
Large Scale Multitask Learning").

The ``attributes`` JSON object is flattened to ``key.path`` features:

* a string / boolean / null value ``v`` becomes the indicator feature ``key=v`` (value 1);
* a number ``x`` (or a string that parses as one, as sources written from pandas often hold) is **bucketed**:
  one indicator per resolution, ``x`` truncated to 1, 2, ... ``number_digits`` significant digits
  (``price~1=10``, ``price~2=19``, ``price~3=19.9`` for 19.99), each of weight ``1 / sqrt(number_digits)``.
  Nearby values share their coarse buckets, so similarity falls off with relative distance, whatever the unit;
  and a number weighs as much as one categorical value, never more (a raw ``log1p(price)`` would dominate the
  vector);
* a key that names an identifier (``id``, ``movie_id``, ``sku``, ``freebase_mid``, ``productId``; the pattern
  ``id_keys``) is dropped with its value: an identifier is unique per entity, so it carries no shared metadata,
  only noise (and, for sequential IDs, a proxy of the creation time);
* a list contributes each element under the same key (``tags=red``, ``tags=sale``); nested objects extend the key.

Each feature is hashed with BLAKE2b (stable across processes and machines, unlike Python's salted ``hash``) to a
slot and a sign; colliding features add up with random signs so collisions cancel in expectation. The vector is
L2-normalised. No parseable feature means no vector (``None``), never a zero vector.

Bucketing is per value (no corpus statistics), so an entity's vector never changes when other entities arrive:
the content embeddings stay incremental.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation

import numpy as np

#: Version of the hashing scheme; part of the model identifier, bump it when the encoding changes.
ATTRIBUTES_ENCODER_VERSION = "hash-v2"

#: Default ``id_keys``: the last key of a path that names an identifier (``id``, ``*_id``, ``*Id``, ``*_ids``,
#: ``uuid``, ``guid``, ``sku``, ``ean``, ``upc``, ``gtin``, ``isbn``, ``asin``, ``*_mid``), case-insensitive
#: except for the camel-case ``Id`` suffix.
DEFAULT_ID_KEYS = (
    r"(?i:(^|[._\-\s])(ids?|uuid|guid|sku|ean|upc|gtin|isbn|asin|mid)$|^(ids?|uuid|guid|sku|ean|upc|gtin|isbn|asin)$)"
    r"|[a-z0-9](Id|ID|Ids|IDs)$"
)
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_attributes(raw: str | None) -> dict | None:
    """The JSON object in ``raw``, or ``None`` when it is null, blank, invalid or not an object."""
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def number_buckets(x: float, digits: int) -> list[str]:
    """``x`` truncated towards zero to 1 .. ``digits`` significant digits, as canonical strings.

    >>> number_buckets(19.99, 3)
    ['10', '19', '19.9']
    >>> number_buckets(-0.0042, 2)
    ['-0.004', '-0.0042']
    """
    if x == 0:
        return ["0"] * digits
    exponent = math.floor(math.log10(abs(x)))
    value = Decimal(repr(x))
    out = []
    for k in range(1, digits + 1):
        quantum = Decimal(1).scaleb(exponent - k + 1)
        truncated = (value / quantum).to_integral_value(rounding="ROUND_DOWN") * quantum
        out.append(format(truncated.normalize(), "f"))
    return out


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        try:
            number = float(Decimal(value.strip()))
        except (InvalidOperation, OverflowError):
            return None
        return number if math.isfinite(number) else None
    return None


def _features(obj: object, key: str, last_key: str, id_keys: re.Pattern, digits: int) -> Iterator[tuple[str, float]]:
    if last_key and id_keys.search(last_key):
        return
    if isinstance(obj, dict):
        for k, value in obj.items():
            yield from _features(value, f"{key}.{k}" if key else str(k), str(k), id_keys, digits)
    elif isinstance(obj, list):
        for item in obj:
            yield from _features(item, key, last_key, id_keys, digits)
    elif (number := _as_number(obj)) is not None:
        weight = 1.0 / math.sqrt(digits)
        for k, bucket in enumerate(number_buckets(number, digits), start=1):
            yield f"{key}~{k}={bucket}", weight
    elif isinstance(obj, bool) or obj is None or isinstance(obj, str):
        text = obj if isinstance(obj, str) else json.dumps(obj)
        yield f"{key}={text.strip().lower()}", 1.0


def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    return (h >> 1) % dim, (1.0 if h & 1 else -1.0)


def encode_attributes(raw: str | None, dim: int, id_keys: str = DEFAULT_ID_KEYS,
                      number_digits: int = 3) -> np.ndarray | None:
    """Hash the JSON attributes ``raw`` into a unit float32 vector of width ``dim`` (``None`` if no features).

    Args:
        raw: the ``attributes`` column (a JSON object as a string) or ``None``.
        dim: output width (``EmbeddingConfig.attributes_dim``).
        id_keys: regular expression (``re.search``) over each key; a matching key is dropped with its value
            (``EmbeddingConfig.attributes_id_keys``).
        number_digits: resolutions of a number's buckets, in significant digits
            (``EmbeddingConfig.attributes_number_digits``).
    """
    obj = parse_attributes(raw)
    if not obj:
        return None
    vec = np.zeros(dim, dtype=np.float64)
    for feature, value in _features(obj, "", "", _compiled(id_keys), number_digits):
        index, sign = _slot(feature, dim)
        vec[index] += sign * value
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:  # e.g. only identifiers, or features that cancelled exactly
        return None
    return (vec / norm).astype(np.float32)


_PATTERNS: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    if pattern not in _PATTERNS:
        _PATTERNS[pattern] = re.compile(pattern)
    return _PATTERNS[pattern]
