"""Paired bootstrap intervals over users: how sure is "method A beats method B" on this set of users?

Two methods evaluated on the same data are scored on the same users, so their per-user metrics pair up. The
percentile bootstrap (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993) resamples users with
replacement and recomputes the mean difference ``mean(a) - mean(b)`` and the ratio of means
``mean(a) / mean(b)`` of each resample; the central ``confidence`` share of those values is the interval.
Pairing keeps each resampled user's two values together, so what both methods find hard (a user with one
obscure target) cancels out and the interval measures the difference, not the spread of users.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Resampled user indices held in memory at once (bounds the ``[chunk, n]`` index matrix).
_MAX_CELLS = 2_000_000


@dataclass(frozen=True)
class PairedInterval:
    """A paired comparison of method ``a`` with method ``b`` over the same users.

    Args:
        users: users compared.
        mean_a: mean metric of ``a``.
        mean_b: mean metric of ``b``.
        diff: ``mean_a - mean_b``.
        diff_low: lower end of the interval of the difference.
        diff_high: upper end of it.
        ratio: ``mean_a / mean_b`` (NaN when ``mean_b`` is 0).
        ratio_low: lower end of the interval of the ratio (resamples where ``b``'s mean is 0 are left out).
        ratio_high: upper end of it.
        confidence: the interval's nominal coverage (e.g. 0.95).
        samples: bootstrap resamples drawn.
    """

    users: int
    mean_a: float
    mean_b: float
    diff: float
    diff_low: float
    diff_high: float
    ratio: float
    ratio_low: float
    ratio_high: float
    confidence: float
    samples: int


def paired_bootstrap(a: np.ndarray, b: np.ndarray, samples: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> PairedInterval:
    """Percentile-bootstrap interval of ``mean(a) - mean(b)`` and ``mean(a) / mean(b)``, resampling pairs.

    Args:
        a: float ``[n]`` per-user metric of the first method.
        b: float ``[n]`` per-user metric of the second method, user for user the same users as ``a``.
        samples: resamples of the ``n`` users.
        confidence: nominal coverage of the interval, in ``(0, 1)``.
        seed: seed of the resampling.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"paired values must be 1-D and equally long, got {a.shape} and {b.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    n = a.size
    mean_a, mean_b = (float(a.mean()), float(b.mean())) if n else (float("nan"), float("nan"))
    ratio = mean_a / mean_b if n and mean_b > 0 else float("nan")
    if n == 0:
        nan = float("nan")
        return PairedInterval(0, nan, nan, nan, nan, nan, nan, nan, nan, confidence, samples)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(samples, _MAX_CELLS // n))
    diffs, ratios = [], []
    for start in range(0, samples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, samples - start), n))
        ma, mb = a[idx].mean(1), b[idx].mean(1)
        diffs.append(ma - mb)
        ratios.append(np.divide(ma, mb, out=np.full_like(ma, np.nan), where=mb > 0))
    tail = (1.0 - confidence) / 2.0
    d_lo, d_hi = np.quantile(np.concatenate(diffs), [tail, 1.0 - tail])
    r = np.concatenate(ratios)
    r = r[np.isfinite(r)]
    r_lo, r_hi = np.quantile(r, [tail, 1.0 - tail]) if r.size else (float("nan"), float("nan"))
    return PairedInterval(n, mean_a, mean_b, mean_a - mean_b, float(d_lo), float(d_hi), ratio, float(r_lo),
                          float(r_hi), confidence, samples)
