"""The paired bootstrap: nominal coverage on synthetic paired data, pairing, seeding, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.evaluation.bootstrap import paired_bootstrap


def _coverage(draw, true_diff: float, true_ratio: float, trials: int = 300) -> tuple[float, float]:
    rng = np.random.default_rng(123)
    hit_d = hit_r = 0
    for t in range(trials):
        a, b = draw(rng)
        got = paired_bootstrap(a, b, samples=400, confidence=0.95, seed=t)
        hit_d += got.diff_low <= true_diff <= got.diff_high
        hit_r += got.ratio_low <= true_ratio <= got.ratio_high
    return hit_d / trials, hit_r / trials


def test_covers_the_true_difference_and_ratio_of_recall_like_values():
    # per-user recall is mostly 0 or 1: a correlated pair of Bernoullis, P(b) = 0.2, P(a) = 0.25, a >= b
    def draw(rng):
        u = rng.random(300)
        return (u < 0.25).astype(float), (u < 0.2).astype(float)

    cov_d, cov_r = _coverage(draw, 0.05, 1.25)
    # 300 trials: the binomial standard error of a 0.95 coverage is 0.013
    assert 0.90 <= cov_d <= 0.99 and 0.90 <= cov_r <= 0.99


def test_covers_the_true_difference_of_continuous_values():
    def draw(rng):
        b = rng.beta(2, 5, 150)
        return b + 0.03 + rng.normal(0, 0.2, 150), b

    cov_d, _ = _coverage(draw, 0.03, float("nan"))
    assert 0.90 <= cov_d <= 0.99


def test_pairing_removes_the_shared_spread():
    b = np.random.default_rng(0).random(200)
    got = paired_bootstrap(b + 0.01, b, samples=200)
    # every user gains exactly 0.01: the difference is certain however spread out the users are
    assert got.diff_low == pytest.approx(0.01) and got.diff_high == pytest.approx(0.01)
    assert got.mean_a == pytest.approx(b.mean() + 0.01) and got.ratio == pytest.approx(got.mean_a / got.mean_b)
    assert got.ratio_low <= got.ratio <= got.ratio_high


def test_seeded_and_validated():
    rng = np.random.default_rng(1)
    a, b = rng.random(50), rng.random(50)
    assert paired_bootstrap(a, b, seed=4) == paired_bootstrap(a, b, seed=4)
    assert paired_bootstrap(a, b, seed=4) != paired_bootstrap(a, b, seed=5)
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap(a, b[:10])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap(a, b, confidence=1.0)
    empty = paired_bootstrap(np.zeros(0), np.zeros(0))
    assert empty.users == 0 and np.isnan(empty.diff)
    zero = paired_bootstrap(a, np.zeros(50))
    assert np.isnan(zero.ratio) and np.isnan(zero.ratio_low) and zero.diff == pytest.approx(a.mean())
