"""Published rows (hir_pipeline.model.publication): unit norm, and a user's dot products order items as the
score ``h_u . h_i + kappa s_u . s_i`` does."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.model.publication import published_rows


def _inputs(seed: int = 0, n: int = 40, d: int = 8, ds: int = 5):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    s = rng.normal(size=(n, ds)) * rng.gamma(1.0, size=(n, 1))  # rows of unequal norm (popularity)
    s[3] = 0.0  # a node without a structure row
    is_user = np.arange(n) < 15
    return h, s, is_user


@pytest.mark.parametrize("kappa", [0.3, 1.0, 4.0])
def test_rows_are_unit_norm_and_rank_items_as_the_score(kappa):
    h, s, is_user = _inputs()
    rows = published_rows(h, s, kappa, is_user)
    assert rows.shape == (len(h), h.shape[1] + s.shape[1] + 1) and rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    score = h[is_user] @ h[~is_user].T + kappa * s[is_user] @ s[~is_user].T
    published = rows[is_user] @ rows[~is_user].T
    # per user, the published dot product is the score times a positive constant: same order, exactly
    z = np.concatenate([h, np.sqrt(kappa) * s], 1)
    scale = 1.0 / (np.linalg.norm(z[is_user], axis=1) * np.linalg.norm(z[~is_user], axis=1).max())
    np.testing.assert_allclose(published, score * scale[:, None], atol=1e-6)
    np.testing.assert_array_equal(np.argsort(-published, axis=1)[:, :5], np.argsort(-score, axis=1)[:, :5])


def test_user_pairs_are_cosines_and_longer_item_rows_score_higher():
    h, s, is_user = _inputs(1)
    rows = published_rows(h, s, 1.0, is_user)
    z = np.concatenate([h, s], 1)
    zu = z[is_user] / np.linalg.norm(z[is_user], axis=1, keepdims=True)
    np.testing.assert_allclose(rows[is_user] @ rows[is_user].T, zu @ zu.T, atol=1e-6)
    # an item whose structure row is a longer copy of another's scores higher with a user aligned with it
    h2, s2 = h.copy(), s.copy()
    h2[20], s2[20], s2[21] = h2[21], 2.0 * s2[21], s2[21]
    h2[0], s2[0] = h2[21], s2[21]
    r2 = published_rows(h2, s2, 1.0, is_user)
    assert r2[0] @ r2[20] > r2[0] @ r2[21]


def test_without_users_or_structure():
    h, s, _ = _inputs(2)
    rows = published_rows(h, np.zeros_like(s), 1.0, np.zeros(len(h), dtype=bool))
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(rows[:, :h.shape[1]] @ rows[:, :h.shape[1]].T, h @ h.T, atol=1e-6)  # R = 1
