"""Prototype hierarchy, Sinkhorn-Knopp balancing, DINO loss, EMA teacher and engagement loss."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hir_pipeline.model import (
    HierarchicalDINOLoss,
    InBatchNegatives,
    PrototypeHierarchy,
    cluster_perplexity,
    ema_update,
    engagement_infonce,
    sinkhorn_knopp,
)
from hir_pipeline.model.distillation import EngagementTemperature, cross_entity_targets
from hir_pipeline.model.hierarchy import hierarchy_consistency


def test_sinkhorn_balances_a_collapsed_batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 8, generator=g) * 0.1
    logits[:, 3] += 2.0  # every sample prefers cluster 3
    plain = torch.softmax(logits / 0.05, -1)
    q = sinkhorn_knopp(logits, temperature=0.05, n_iters=10)
    torch.testing.assert_close(q.sum(1), torch.ones(64), atol=1e-4, rtol=0)
    torch.testing.assert_close(q.sum(0), torch.full((8,), 64 / 8), atol=0.05, rtol=0)
    assert cluster_perplexity(plain) < 1.5
    assert cluster_perplexity(q) > 7.9


def test_prototype_hierarchy_parent_maps():
    torch.manual_seed(0)
    hier = PrototypeHierarchy(8, (2, 4, 16))
    z = torch.randn(10, 8)
    logits = hier(z)
    assert [lg.shape for lg in logits] == [(10, 2), (10, 4), (10, 16)]
    assert float(logits[2].detach().abs().max()) <= 1.0 + 1e-5
    parents = hier.parent_maps()
    assert [p.shape for p in parents] == [(4,), (16,)]
    assert int(parents[0].max()) < 2 and int(parents[1].max()) < 4
    # a node sitting exactly on a fine prototype is consistent with that prototype's parent
    with torch.no_grad():
        on_proto = hier.prototypes[2][:5].clone()
    probs = [torch.softmax(lg / 0.01, -1) for lg in hier(on_proto)]
    expected = (parents[1][probs[2].argmax(-1)] == probs[1].argmax(-1)).float().mean()
    assert hierarchy_consistency(probs, parents)[1] == float(expected)


def test_dino_loss_centering_and_gradients():
    loss_fn = HierarchicalDINOLoss((3, 5), student_temp=0.1, teacher_temp=0.04, center_momentum=0.5)
    teacher = [torch.tensor([[2.0, 0.0, 0.0]] * 4), torch.eye(4, 5)]
    student = [torch.randn(4, 3, requires_grad=True), torch.randn(4, 5, requires_grad=True)]
    total, per_level = loss_fn(student, teacher)
    assert len(per_level) == 2 and torch.isclose(total, per_level[0] + per_level[1])
    total.backward()
    assert student[0].grad is not None and student[0].grad.abs().sum() > 0
    torch.testing.assert_close(loss_fn.center(0), torch.tensor([[1.0, 0.0, 0.0]]))  # 0.5 * 0 + 0.5 * mean
    # the student minimising the loss matches the teacher's (centred, sharpened) distribution
    t = loss_fn.teacher_probs(teacher)
    matching = [torch.log(p) * 0.1 for p in t]
    worse = [torch.zeros_like(p) for p in t]
    loss_fn.center_momentum = 1.0
    assert loss_fn(matching, teacher)[0] < loss_fn(worse, teacher)[0]


def test_ema_update():
    torch.manual_seed(0)
    student, teacher = nn.Linear(3, 2), nn.Linear(3, 2)
    before = teacher.weight.detach().clone()
    ema_update(teacher, student, momentum=0.9)
    torch.testing.assert_close(teacher.weight, 0.9 * before + 0.1 * student.weight.detach())
    ema_update(teacher, student, momentum=0.0)
    torch.testing.assert_close(teacher.weight, student.weight.detach())


def test_engagement_infonce_prefers_aligned_pairs_and_weights():
    g = torch.Generator().manual_seed(0)
    users = nn.functional.normalize(torch.randn(6, 4, generator=g), dim=-1)
    aligned = engagement_infonce(users, users, torch.ones(6), temperature=0.1)
    shuffled = engagement_infonce(users, users.roll(1, 0), torch.ones(6), temperature=0.1)
    assert aligned < shuffled
    items = users.clone()
    items[0] = -items[0]  # pair 0 is badly embedded
    light = engagement_infonce(users, items, torch.tensor([0.1, 1, 1, 1, 1, 1]), 0.1)
    heavy = engagement_infonce(users, items, torch.tensor([4.0, 1, 1, 1, 1, 1]), 0.1)
    assert heavy > light
    # duplicate item ids are not negatives of each other
    ids = torch.tensor([0, 0, 1, 2, 3, 4])
    dup = torch.stack([items[1], items[1], *items[2:]])
    masked = engagement_infonce(users, dup, torch.ones(6), 0.1,
                                InBatchNegatives(user_ids=torch.arange(6), item_ids=ids))
    unmasked = engagement_infonce(users, dup, torch.ones(6), 0.1)
    assert masked < unmasked


def test_engagement_logq_correction_stops_penalising_popular_candidates():
    g = torch.Generator().manual_seed(1)
    users = nn.functional.normalize(torch.randn(8, 4, generator=g), dim=-1)
    items = nn.functional.normalize(users + 0.3 * torch.randn(8, 4, generator=g), dim=-1)
    ones = torch.ones(8)
    uniform = torch.full((8,), -2.0)  # equal sampling probabilities shift every logit alike: no change
    torch.testing.assert_close(engagement_infonce(users, items, ones, 0.1),
                               engagement_infonce(users, items, ones, 0.1,
                                                  InBatchNegatives(user_log_q=uniform, item_log_q=uniform)))
    # item 0 is very popular: as a negative it is corrected down, so the other pairs' loss drops
    pop = torch.tensor([0.0, -5, -5, -5, -5, -5, -5, -5])
    plain = engagement_infonce(users, items, torch.tensor([0.0, 1, 1, 1, 1, 1, 1, 1]), 0.1)
    corrected = engagement_infonce(users, items, torch.tensor([0.0, 1, 1, 1, 1, 1, 1, 1]), 0.1,
                                   InBatchNegatives(item_log_q=pop))
    assert corrected < plain


def test_known_positive_is_never_a_negative():
    """User 0 also engaged item 1 (the positive of row 1): with the mask, item 1 is no negative of user 0 nor user 0
    of item 1; the loss equals the cross-entropy over the other candidates, computed by hand."""
    g = torch.Generator().manual_seed(2)
    users = nn.functional.normalize(torch.randn(4, 5, generator=g), dim=-1)
    items = nn.functional.normalize(torch.randn(4, 5, generator=g), dim=-1)
    known = torch.eye(4, dtype=torch.bool)
    known[0, 1] = True
    only_row = torch.tensor([1.0, 0, 0, 0])  # the weighted mean picks row 0's loss
    got = engagement_infonce(users, items, only_row, 0.2, InBatchNegatives(positive_mask=known))
    logits = users @ items.t() / 0.2
    by_user = -torch.log_softmax(logits[0, [0, 2, 3]], 0)[0]  # item 1 left out
    by_item = -torch.log_softmax(logits[:, 0], 0)[0]  # item 0's candidates: every user
    torch.testing.assert_close(got, 0.5 * (by_user + by_item))
    row1 = engagement_infonce(users, items, torch.tensor([0.0, 1, 0, 0]), 0.2, InBatchNegatives(positive_mask=known))
    by_item1 = -torch.log_softmax(logits[[1, 2, 3], 1], 0)[0]  # user 0 is no negative of item 1
    torch.testing.assert_close(row1, 0.5 * (-torch.log_softmax(logits[1], 0)[1] + by_item1))
    # the similarity of a masked pair gets no gradient at all
    u = users.clone().requires_grad_(True)
    engagement_infonce(u, items, torch.tensor([1.0, 0, 0, 0]), 0.2, InBatchNegatives(positive_mask=known)).backward()
    grad_dir = u.grad[0]
    u2 = users.clone().requires_grad_(True)
    items_moved = items.clone()
    items_moved[1] = -items_moved[1]  # moving the known positive changes nothing for row 0
    known_only = InBatchNegatives(positive_mask=known)
    engagement_infonce(u2, items_moved, torch.tensor([1.0, 0, 0, 0]), 0.2, known_only).backward()
    torch.testing.assert_close(grad_dir, u2.grad[0])


def test_learned_engagement_temperature():
    fixed = EngagementTemperature(0.1, learned=False, min_temp=0.01)
    assert not fixed.log_temp.requires_grad and float(fixed()) == pytest.approx(0.1)
    learned = EngagementTemperature(0.1, learned=True, min_temp=0.05)
    opt = torch.optim.SGD(learned.parameters(), lr=1.0)
    g = torch.Generator().manual_seed(0)
    users = nn.functional.normalize(torch.randn(16, 4, generator=g), dim=-1)
    for _ in range(20):  # perfectly aligned pairs: a sharper softmax lowers the loss, down to the bound
        opt.zero_grad()
        engagement_infonce(users, users, torch.ones(16), learned()).backward()
        opt.step()
    assert float(learned().detach()) == pytest.approx(0.05)
    assert float(learned.log_temp.detach().exp()) < 0.05


def test_cross_entity_targets_are_the_partners_teacher_probabilities():
    # node 0 (a user) engaged items 2 (weight 1) and 3 (weight 3) and saw item 4 (weight 0.5); item 3's teacher
    # distribution is not known yet; node 1 has no partner with a known one.
    indptr = torch.tensor([0, 3, 4, 5, 6, 7])
    partners = torch.tensor([2, 3, 4, 3, 0, 0, 0])
    weights = torch.tensor([1.0, 3.0, 0.5, 1.0, 1.0, 3.0, 0.5])
    bank = [torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1], [0.2, 0.8], [0.3, 0.7]]), torch.eye(5)]
    filled = torch.tensor([True, True, True, False, True])
    targets, has = cross_entity_targets(torch.tensor([0, 1, 2]), indptr, partners, weights, bank, filled)
    assert has.tolist() == [True, False, True]
    expected0 = (1.0 * bank[0][2] + 0.5 * bank[0][4]) / 1.5  # item 3 left out (no teacher target yet)
    torch.testing.assert_close(targets[0][0], expected0)
    torch.testing.assert_close(targets[1][0], (1.0 * bank[1][2] + 0.5 * bank[1][4]) / 1.5)
    torch.testing.assert_close(targets[0][2], bank[0][0])  # item 2's only partner is user 0
    torch.testing.assert_close(targets[0].sum(1)[has], torch.ones(2))


def test_dino_multi_crop_shares_teacher_targets_and_centers_once():
    loss_fn = HierarchicalDINOLoss((3,), student_temp=0.1, teacher_temp=0.04, center_momentum=0.5)
    teacher = [torch.tensor([[2.0, 0.0, 0.0], [0.0, 4.0, 0.0]])]
    student = [torch.randn(3, 3)]  # crops of anchors 0, 1 and a second crop of anchor 0
    idx = torch.tensor([0, 1, 0])
    targets = loss_fn.teacher_probs(teacher)[0]
    total, _ = loss_fn(student, teacher, idx)
    log_p = torch.log_softmax(student[0] / 0.1, -1)
    torch.testing.assert_close(total, -(targets[idx] * log_p).sum(-1).mean())
    torch.testing.assert_close(loss_fn.center(0), torch.tensor([[0.5, 1.0, 0.0]]))  # mean of the 2 teacher rows
