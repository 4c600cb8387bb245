"""Ranking and clustering metrics on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from hir_pipeline.evaluation.data import COLD, WARM, EvalData
from hir_pipeline.evaluation.metrics import (
    cluster_usage,
    hits_matrix,
    mean_top_probability,
    ndcg_at_k,
    nmi,
    parent_agreement,
    recall_at_k,
)
from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_scorer, top_k
from hir_pipeline.model.tree import majority_parents


def test_recall_and_ndcg_by_hand():
    ranked = np.array([[3, 1, 7], [5, 6, 2]])
    hits = hits_matrix(ranked, [{1, 9}, {2, 5, 6, 8}])
    assert hits.tolist() == [[False, True, False], [True, True, True]]
    np.testing.assert_allclose(recall_at_k(hits, np.array([2, 4])), [0.5, 0.75])
    # user 0: one hit at rank 2 -> DCG = 1/log2(3); ideal (2 targets) = 1 + 1/log2(3)
    # user 1: three hits out of three places, ideal is also three -> 1
    expected0 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    np.testing.assert_allclose(ndcg_at_k(hits, np.array([2, 4])), [expected0, 1.0])


def test_top_k_excludes_disallowed_and_breaks_ties_by_index():
    scores = np.array([[0.5, 0.9, 0.9, 0.1], [1.0, 1.0, 1.0, 1.0]])
    allowed = np.array([[True, True, True, False], [False, True, True, True]])
    assert top_k(scores, allowed, 2).tolist() == [[1, 2], [1, 2]]
    # fewer allowed items than k: padded with -1, never a disallowed item
    assert top_k(scores, np.array([True, False, False, False]), 3).tolist() == [[0, -1, -1], [0, -1, -1]]


def test_evaluate_excludes_train_items_and_splits_candidates():
    # items a, b (warm: they have training pairs), c (cold); user u engaged with a in training
    data = EvalData.from_pairs(
        (["u", "v"], ["a", "b"], [1.0, 1.0]),
        {WARM: (["u", "u"], ["a", "b"]), COLD: (["u"], ["c"])},
        items=["a", "b", "c"], cold_items=["c"])
    # the target (u, a) was engaged in training, so it is not a target; (u, b) is
    assert data.targets[WARM].toarray().tolist() == [[0, 1, 0], [0, 0, 0]]
    assert data.candidates[WARM].tolist() == [True, True, False]
    assert data.candidates[COLD].tolist() == [False, False, True]
    # a scorer that loves a, then c, then b: a is excluded (trained), c is not a warm candidate -> b first
    scorer = EmbeddingScorer(np.ones((2, 1)), np.array([[3.0], [1.0], [2.0]])).fit(data)
    got = evaluate_scorer(scorer, data, k=1)
    assert got[WARM] == {"recall_at_1": 1.0, "ndcg_at_1": 1.0, "users": 1.0}
    assert got[COLD] == {"recall_at_1": 1.0, "ndcg_at_1": 1.0, "users": 1.0}


def test_nmi_known_values():
    assert nmi([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    assert nmi([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0, abs=1e-12)
    # [0,0,1,1] vs [0,0,0,1]: H(a)=ln2, H(b)=H(1/4,3/4), I = H(a) - H(a|b) = ln2 - 3/4 H(1/3, 2/3)
    h = lambda *p: -sum(x * math.log(x) for x in p)  # noqa: E731
    mi = math.log(2) - 0.75 * h(1 / 3, 2 / 3)
    assert nmi([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(mi / ((math.log(2) + h(0.25, 0.75)) / 2))
    assert nmi(["x"] * 3, [1, 1, 1]) == 1.0


def test_nmi_rejects_empty_and_mismatched_labelings():
    for a, b in (([], []), ([0, 1], [0]), (np.zeros((2, 2)), np.zeros((2, 2)))):
        with pytest.raises(ValueError):
            nmi(a, b)


def test_nmi_agrees_with_contingency_formula_on_random_labels():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 500), rng.integers(0, 7, 500)
    table = sp.coo_matrix((np.ones(500), (a, b))).toarray() / 500
    pa, pb = table.sum(1), table.sum(0)
    nz = table > 0
    mi = (table[nz] * np.log(table[nz] / np.outer(pa, pb)[nz])).sum()
    ha, hb = -(pa * np.log(pa)).sum(), -(pb * np.log(pb)).sum()
    assert nmi(a, b) == pytest.approx(mi / ((ha + hb) / 2))


def test_cluster_usage():
    got = cluster_usage(np.array([0, 0, 1, 3]), 8)
    assert got["clusters_used"] == 3 and got["used_share"] == 3 / 8 and got["largest_share"] == 0.5
    assert got["usage_perplexity"] == pytest.approx(math.exp(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))))


def test_mean_top_probability():
    assert mean_top_probability(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])) == pytest.approx((0.5 + 0.9 + 0.8) / 3)
    assert mean_top_probability(np.full((4, 8), 1 / 8)) == pytest.approx(1 / 8)


def test_majority_parents_and_agreement():
    fine = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    coarse = np.array([1, 1, 0, 0, 0, 1, 0, 0, 1])
    # fine 0: two of three in coarse 1; fine 1: both in 0; fine 2: a tie 2-2 -> the lowest id; fine 3 is empty
    parents = majority_parents(fine, coarse, 4, fallback=np.array([1, 1, 1, 1]))
    assert parents.tolist() == [1, 0, 0, 1]
    assert majority_parents(fine, coarse, 4).tolist() == [1, 0, 0, 0]
    # agreement: nodes whose coarse cluster is their fine cluster's parent: 2 + 2 + 2 of 9
    assert parent_agreement(fine, coarse, parents) == pytest.approx(6 / 9)
    # a perfectly nested labelling agrees everywhere
    nested_coarse = np.array([0, 0, 0, 1, 1, 0, 0, 0, 0])
    assert parent_agreement(fine, nested_coarse, majority_parents(fine, nested_coarse, 4)) == 1.0
