"""Engagement sampling: draws in proportion to funnel weight, logQ of that distribution, known positives, the
partner lists of cross-entity distillation, and the removal of a pair's target from its views."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.model.batch import view_arrays
from hir_pipeline.training.collate import drop_node
from hir_pipeline.training.sampling import EngagementSampler, pair_keys, partner_lists

# users 0, 1; items 2, 3, 4. Pair (1, 4) has weight 0 (seen, not engaged); pair (0, 4) has no view.
USERS = np.array([0, 0, 1, 1, 0])
ITEMS = np.array([2, 3, 2, 4, 4])
WEIGHT = np.array([1.0, 3.0, 10.0, 0.0, 10.0], dtype=np.float32)
USABLE = np.array([True, True, True, True, False])


def test_weighted_draws_follow_the_funnel_weight_and_skip_unengaged_pairs():
    s = EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, num_nodes=5)
    assert list(zip(s.users, s.items, strict=True)) == [(0, 2), (0, 3), (1, 2)]  # weight 0 and viewless left out
    rng = np.random.default_rng(0)
    rows = np.concatenate([s.draw(rng, 3) for _ in range(40_000)])  # at most len(s) rows per draw
    freq = np.bincount(rows, minlength=3) / len(rows)
    np.testing.assert_allclose(freq, [1 / 14, 3 / 14, 10 / 14], atol=0.005)
    assert s.loss_weight.tolist() == [1.0, 1.0, 1.0]  # the draw already weights pairs
    uniform = EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, num_nodes=5, sampling="uniform")
    rows = np.concatenate([uniform.draw(rng, 3) for _ in range(40_000)])
    freq = np.bincount(rows, minlength=3) / len(rows)
    np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.005)
    assert uniform.loss_weight.tolist() == [1.0, 3.0, 10.0]
    assert len(s.draw(np.random.default_rng(0), 10)) == 3  # never more rows than pairs
    assert EngagementSampler.build((USERS, ITEMS, np.zeros(5, dtype=np.float32)), USABLE, 5) is None


def test_logq_is_the_share_of_the_sampling_distribution():
    s = EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, num_nodes=5)
    # item 2 is in pairs of weight 1 and 10 (of 14), item 3 in the pair of weight 3; user 0 holds 1 + 3
    np.testing.assert_allclose(np.exp(s.item_log_q[[2, 3]]), [11 / 14, 3 / 14], rtol=1e-6)
    np.testing.assert_allclose(np.exp(s.user_log_q[[0, 1]]), [4 / 14, 10 / 14], rtol=1e-6)
    uniform = EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, num_nodes=5, sampling="uniform")
    np.testing.assert_allclose(np.exp(uniform.item_log_q[[2, 3]]), [2 / 3, 1 / 3], rtol=1e-6)
    assert EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, 5, logq=False).item_log_q is None


def test_known_positive_mask():
    s = EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, num_nodes=5)
    mask = s.positive_mask(np.array([0, 2, 1]))  # pairs (0, 2), (1, 2), (0, 3)
    # user 0 engaged items 2 and 3; user 1 engaged item 2 only (its item 4 was seen, not engaged)
    assert mask.tolist() == [[True, True, True], [True, True, False], [True, True, True]]
    assert np.isin(pair_keys([0], [4], 5), s.known).all()  # a pair without views is still a known positive
    assert not np.isin(pair_keys([1], [4], 5), s.known).any()
    assert EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, 5, mask_known_positives=False
                                   ).positive_mask(np.array([0])) is None


def test_partner_lists_are_symmetric_and_weight_seen_pairs_low():
    seen = (np.array([1]), np.array([3]))
    indptr, partners, weights = partner_lists((USERS, ITEMS, WEIGHT), 5, seen=seen, seen_weight=0.1)

    def row(node):
        a, b = indptr[node], indptr[node + 1]
        return {p: round(float(w), 6) for p, w in zip(partners[a:b].tolist(), weights[a:b], strict=True)}

    assert row(0) == {2: 1.0, 3: 3.0, 4: 10.0}
    assert row(1) == {2: 10.0, 3: 0.1, 4: 0.1}  # (1, 4) has funnel weight 0: seen, like the seen pair (1, 3)
    assert row(2) == {0: 1.0, 1: 10.0} and row(4) == {0: 10.0, 1: 0.1}
    indptr, partners, _ = partner_lists((USERS, ITEMS, WEIGHT), 5, seen=seen, seen_weight=0.0)
    assert 4 not in partners[indptr[1]:indptr[2]] and len(partners) == 8  # seen pairs left out at weight 0


def _view(nodes, edges):
    n = len(nodes)
    e = np.zeros((n, n), dtype=np.uint8)
    for a, b, t in edges:
        e[a, b] = e[b, a] = t
    d = np.where(e > 0, 1, 2).astype(np.int8)
    np.fill_diagonal(d, 0)
    return {"anchor_idx": nodes[0], "nodes": nodes, "node_types": [0] * n, "dist": d.tobytes(),
            "edge_types": e.tobytes()}


def test_drop_node_removes_the_target_and_its_edges():
    view = _view([7, 3, 9, 4], [(0, 1, 1), (0, 2, 3), (1, 2, 5), (2, 3, 9)])
    out = drop_node(view, 9)
    nodes, _, dist, edges = view_arrays(out)
    assert nodes.tolist() == [7, 3, 4]
    assert edges.reshape(3, 3).tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    assert dist.reshape(3, 3).tolist() == [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    assert drop_node(view, 5) is view  # not in the view
    assert drop_node(view, 7) is view  # the anchor stays


@pytest.mark.parametrize("bad", [{"sampling": "popular"}])
def test_unknown_sampling_is_refused(bad):
    with pytest.raises(ValueError, match="sampling"):
        EngagementSampler.build((USERS, ITEMS, WEIGHT), USABLE, 5, **bad)
