"""The cross-batch negatives' queue: first in, first out, and restored from a checkpoint."""

from __future__ import annotations

import pytest
import torch

from hir_pipeline.training.negative_queue import PairQueue


def _pairs(first_id: int, n: int) -> tuple[torch.Tensor, ...]:
    ids = torch.arange(first_id, first_id + n)
    emb = ids.float()[:, None].repeat(1, 2)
    return emb, -emb, ids, ids + 100


def test_the_oldest_pairs_leave_first_and_a_large_batch_keeps_its_last_pairs():
    queue = PairQueue(5, 2)
    assert len(queue) == 0
    queue.push(*_pairs(0, 3))
    assert len(queue) == 3 and queue.entries()[2].tolist() == [0, 1, 2]
    queue.push(*_pairs(3, 4))  # 7 pushed: 0 and 1 overwritten
    user_emb, item_emb, users, items = queue.entries()
    assert len(queue) == 5 and sorted(users.tolist()) == [2, 3, 4, 5, 6]
    torch.testing.assert_close(items, users + 100)
    torch.testing.assert_close(user_emb[:, 0], users.float())
    torch.testing.assert_close(item_emb, -user_emb)
    queue.push(*_pairs(10, 8))
    assert sorted(queue.entries()[2].tolist()) == [13, 14, 15, 16, 17]


def test_state_round_trip_restores_entries_and_write_position():
    queue = PairQueue(4, 2)
    queue.push(*_pairs(0, 6))
    restored = PairQueue(4, 2)
    restored.load_state_dict(queue.state_dict())
    queue.push(*_pairs(20, 1))
    restored.push(*_pairs(20, 1))
    for a, b in zip(queue.entries(), restored.entries(), strict=True):
        torch.testing.assert_close(a, b)


def test_entries_carry_no_gradient():
    queue = PairQueue(2, 2)
    emb = torch.ones(2, 2, requires_grad=True)
    queue.push(emb * 2, emb * 3, torch.tensor([0, 1]), torch.tensor([2, 3]))
    assert not any(t.requires_grad for t in queue.entries())


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="queue size"):
        PairQueue(0, 2)
