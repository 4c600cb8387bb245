"""Per-user ranking metrics and the mean-user diagnostic scorer, on a hand-checkable example."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hir_pipeline.evaluation.data import WARM, EvalData
from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_per_user, evaluate_scorer


@pytest.fixture
def tiny():
    """Users u, v, w, x; items a, b, c, d, each trained on by one user (so all four are warm candidates).

    Targets: u -> {c, d}, v -> {a}, w -> {d}; x has none.
    """
    return EvalData.from_pairs(
        (["u", "v", "w", "x"], ["a", "b", "c", "d"], [1.0, 1.0, 1.0, 1.0]),
        {WARM: (["u", "u", "v", "w"], ["c", "d", "a", "d"])},
        items=["a", "b", "c", "d"])


def test_per_user_recall_and_ndcg_by_hand(tiny):
    # every user gets the list a > b > c > d minus their own training item
    scorer = EmbeddingScorer(np.ones((4, 1)), np.array([[4.0], [3.0], [2.0], [1.0]])).fit(tiny)
    got = evaluate_per_user(scorer, tiny, k=2)[WARM]
    # u: a trained -> [b, c]: c hit at rank 2 of 2 targets; v: b trained -> [a, c]: a hit at rank 1;
    # w: c trained -> [a, b]: d missed
    assert got.users.tolist() == [0, 1, 2]
    np.testing.assert_allclose(got.recall, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(got.ndcg, [(1 / math.log2(3)) / (1 + 1 / math.log2(3)), 1.0, 0.0])
    mean = evaluate_scorer(scorer, tiny, k=2)[WARM]
    assert mean == {"recall_at_2": pytest.approx(0.5), "ndcg_at_2": pytest.approx(got.ndcg.mean()), "users": 3.0}


def test_per_user_rows_pair_up_across_methods(tiny):
    a = EmbeddingScorer(np.ones((4, 1)), np.array([[4.0], [3.0], [2.0], [1.0]]))
    b = EmbeddingScorer(np.ones((4, 1)), np.array([[1.0], [2.0], [3.0], [4.0]]))
    ga, gb = (evaluate_per_user(s.fit(tiny), tiny, k=2)[WARM] for s in (a, b))
    np.testing.assert_array_equal(ga.users, gb.users)
    # reversed order: u gets [d, c] (both hits), v gets [d, c] (miss), w gets [d, b] (hit)
    np.testing.assert_allclose(gb.recall, [1.0, 0.0, 1.0])


def test_mean_user_scores_every_user_with_the_mean_vector(tiny):
    users = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # x has no embedding
    items = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, -1.0], [0.5, 0.5]])
    mean = EmbeddingScorer(users, items, "hir").mean_user()
    assert mean.name == "hir_mean_user"
    expected = np.array([2 / 3, 2 / 3]) @ items.T  # x's zero row is left out of the mean
    np.testing.assert_allclose(mean.fit(tiny).score(np.arange(4)), np.tile(expected, (4, 1)), rtol=1e-6)
