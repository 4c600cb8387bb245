"""Spark's ``xxhash64`` of ``bigint`` columns, in numpy, so the driver can draw the same pseudo-random numbers.

Spark hashes a row of columns by chaining XXH64 (Collet, xxHash): ``h = 42; h = XXH64(c, seed=h)`` for each column
``c``; an 8-byte value takes XXH64's short path (``XXH64.hashLong`` in Spark's catalyst). Reproducing it
bit for bit lets :mod:`spark_jobs.graph.spectral` compute the random start rows of FastRP's projection
(:func:`spark_jobs.graph.fastrp.projection_row`) for ``N x p`` entries in one vectorised pass on the driver, where
the Spark expression evaluates ``p`` hashes per row through a higher-order function.
"""

from __future__ import annotations

import numpy as np

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
#: Spark's default seed of ``xxhash64``.
SPARK_SEED = 42


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = seed + _P5 + np.uint64(8)
        h ^= _rotl(value * _P2, 31) * _P1
        h = _rotl(h, 27) * _P1 + _P4
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def xxhash64_longs(*columns: np.ndarray | int, seed: int = SPARK_SEED) -> np.ndarray:
    """``F.xxhash64(*columns)`` for ``bigint`` columns (numpy arrays or ints, broadcast together), as ``int64``."""
    h = np.uint64(seed & (2**64 - 1))
    for column in columns:
        value = np.asarray(column, dtype=np.int64).view(np.uint64) if np.ndim(column) else \
            np.uint64(int(column) & (2**64 - 1))
        h = _hash_long(value, h)
    return np.asarray(h, dtype=np.uint64).view(np.int64)


def spark_unit_interval(h: np.ndarray) -> np.ndarray:
    """:func:`spark_jobs.graph.fastrp.unit_interval` of ``int64`` hashes in numpy: ``(h >>> 11 + 0.5) / 2**53``,
    exact in float64 (the views' sampler uses its own 52-bit :func:`spark_jobs.graph.sampling.unit_interval`)."""
    return ((np.asarray(h, dtype=np.int64).view(np.uint64) >> np.uint64(11)).astype(np.float64) + 0.5) / float(2**53)
