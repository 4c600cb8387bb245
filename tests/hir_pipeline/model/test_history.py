"""Pooled engagement history (SVD++ / FISM): the neighbour CSR, the pooling against a plain-Python reference,
leaving a pair out, and the exact / hashed ID rows."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from hir_pipeline.model.features import hash_id_buckets, id_rows
from hir_pipeline.model.history import NeighbourHistory, pair_exclusions, pooled_history

N = 12


def _pairs(seed=0, p=40):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 5, p)
    items = rng.integers(5, N - 1, p)  # node N - 1 has no history
    weights = rng.integers(0, 4, p).astype(np.float32)  # some 0: not engagement
    return users, items, weights


def _reference(users, items, weights, cap=0):
    """Per node: {neighbour: summed weight}, capped to the heaviest ``cap`` (ties: lowest index)."""
    hist: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for u, i, w in zip(users.tolist(), items.tolist(), weights.tolist(), strict=True):
        if w > 0:
            hist[u][i] += w
            hist[i][u] += w
    if cap:
        for v, nb in hist.items():
            kept = sorted(nb.items(), key=lambda kv: (-kv[1], kv[0]))[:cap]
            hist[v] = defaultdict(float, kept)
    return hist


def _pool(ref, node, table, leave_out=None):
    nb = {j: w for j, w in ref.get(node, {}).items() if j != leave_out}
    total = sum(nb.values())
    if total == 0:
        return torch.zeros(table.shape[1], dtype=torch.float64)
    return sum(w * table[j].double() for j, w in nb.items()) / total


@pytest.mark.parametrize("cap", [0, 2])
def test_history_csr_equals_the_reference(cap):
    users, items, weights = _pairs()
    hist = NeighbourHistory.from_engagement(users, items, weights, N, max_neighbours=cap)
    ref = _reference(users, items, weights, cap)
    assert hist.num_nodes == N
    for v in range(N):
        a, b = int(hist.offsets[v]), int(hist.offsets[v + 1])
        got = dict(zip(hist.neighbours[a:b].tolist(), hist.weights[a:b].tolist(), strict=True))
        assert got == pytest.approx(dict(ref.get(v, {}))), v
        assert hist.neighbours[a:b].tolist() == sorted(got)  # rows sorted by neighbour
        assert float(hist.total[v]) == pytest.approx(sum(ref.get(v, {}).values()))
        if cap:
            assert b - a <= cap
    assert int(hist.offsets[N]) == int(hist.offsets[N - 1]) == len(hist.neighbours)  # node N - 1: empty row
    assert torch.equal(hist.keys, torch.sort(hist.keys).values)
    # pair look-ups: present pairs give their summed weight, absent ones 0
    owner = torch.tensor([v for v in ref for _ in ref[v]] + [0, N - 1])
    nbr = torch.tensor([j for v in ref for j in ref[v]] + [1, 0])
    expected = [ref[v][j] for v in ref for j in ref[v]] + [0.0, 0.0]
    assert hist.pair_weight(owner, nbr).tolist() == pytest.approx(expected)


def test_history_rejects_pairs_outside_the_graph():
    with pytest.raises(ValueError, match="outside"):
        NeighbourHistory.from_engagement(np.array([0]), np.array([N]), np.array([1.0]), N)


def test_pooled_history_is_the_weighted_mean_of_the_neighbours_rows():
    users, items, weights = _pairs()
    hist = NeighbourHistory.from_engagement(users, items, weights, N)
    ref = _reference(users, items, weights)
    torch.manual_seed(0)
    table = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    content = torch.randn(N, 4, dtype=torch.float64)
    row_of_node = torch.arange(N) % 7  # two nodes may share a row (hashed IDs)
    node_idx = torch.tensor([0, 5, 0, N - 1, 3, 7, 7])
    (pool_t, pool_c), has = pooled_history(hist, node_idx, [(table, row_of_node), (content, None)])
    for s, v in enumerate(node_idx.tolist()):
        torch.testing.assert_close(pool_t[s], _pool(ref, v, table.detach()[row_of_node]))
        torch.testing.assert_close(pool_c[s], _pool(ref, v, content))
        assert bool(has[s]) == (v in ref)
    pool_t.sum().backward()
    assert table.grad is not None and table.grad.abs().sum() > 0


def test_leaving_a_pair_out_equals_pooling_without_it():
    """Subtract-and-renormalise gives exactly the pool of the history with that pair removed; a node whose only
    neighbour is left out has an empty pool."""
    users = np.array([0, 0, 0, 1, 2, 2])
    items = np.array([5, 6, 7, 5, 6, 6])  # (2, 6) twice: one neighbour of summed weight
    weights = np.array([1.0, 2.0, 3.0, 1.0, 1.0, 2.0], dtype=np.float32)
    hist = NeighbourHistory.from_engagement(users, items, weights, N)
    torch.manual_seed(1)
    table = torch.randn(N, 4, dtype=torch.float64)
    node_idx = torch.tensor([0, 6, 0, 2, 6, 1, 5])
    exclude = torch.tensor([6, 0, -1, 6, 2, 5, -1])
    (pool,), has = pooled_history(hist, node_idx, [(table, None)], exclude)
    for s, (v, x) in enumerate(zip(node_idx.tolist(), exclude.tolist(), strict=True)):
        keep = ~(((users == v) & (items == x)) | ((users == x) & (items == v)))
        ref = _reference(users[keep], items[keep], weights[keep])
        torch.testing.assert_close(pool[s], _pool(ref, v, table), rtol=1e-6, atol=1e-9)
    full, _ = pooled_history(hist, node_idx, [(table, None)])
    assert not torch.allclose(pool[0], full[0][0])  # node 0 without item 6 differs from its full pool
    assert has.tolist() == [True, True, True, False, True, False, True]  # 2 -> only 6; 1 -> only 5
    assert not pool[3].any() and not pool[5].any()


def test_empty_history_pools_nothing():
    hist = NeighbourHistory.from_engagement(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), N)
    (pool,), has = pooled_history(hist, torch.tensor([0, 3]), [(torch.randn(N, 2), None)],
                                  torch.tensor([1, -1]))
    assert not has.any() and not pool.any()


def test_pair_exclusions_mark_both_ends_in_the_views_of_their_pair():
    # views: 0 = an anchor view (no pair), 1 = user view of (2, 9), 2 = item view of (2, 9); then padding
    node_idx = torch.tensor([2, 9, 4, 2, 9, 4, 9, 2, 0, 0])
    view_id = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 3, 3], dtype=torch.int32)
    got = pair_exclusions(node_idx, view_id, torch.tensor([-1, 2, 2]), torch.tensor([-1, 9, 9]))
    assert got.tolist() == [-1, -1, -1, 9, 2, -1, 2, 9, -1, -1]


def test_id_rows_are_exact_while_the_vocabulary_fits_then_hashed():
    ids = [f"e{i}" for i in range(10)]
    has = np.array([1, 0, 1, 1, 0, 1, 1, 0, 1, 1], dtype=bool)  # 7 nodes with history
    exact = id_rows(ids, has, 7)
    assert exact[has].tolist() == list(range(7))  # one row each, in node order
    hashed = id_rows(ids, has, 6)  # 7 > 6 rows: hashed
    assert torch.equal(hashed, hash_id_buckets(ids, 6))
    assert torch.equal(id_rows(ids, has, 64, exact=False), hash_id_buckets(ids, 64))
