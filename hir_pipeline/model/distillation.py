"""Self-distillation objectives: hierarchical DINO loss (Caron et al. 2021, "Emerging Properties in
Self-Supervised Vision Transformers"), cross-entity distillation (a node's clusters follow those of the nodes it
interacted with), the EMA teacher update, and the engagement InfoNCE loss (van den Oord et al. 2018) with
in-batch negatives, known positives masked and a fixed or learned temperature."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hir_pipeline.model.hierarchy import sinkhorn_knopp


class HierarchicalDINOLoss(nn.Module):
    """DINO cross-entropy between teacher and student cluster distributions, one term per level.

    The teacher distribution is sharpened (low ``teacher_temp``) and either centred (a running mean of the
    teacher logits is subtracted, DINO) or balanced by Sinkhorn-Knopp. Sharpening alone collapses to one
    cluster, centering alone to the uniform distribution; together they keep every level in use.

    Args:
        level_sizes: prototypes per level, coarsest first.
        student_temp: student softmax temperature.
        teacher_temp: teacher softmax temperature.
        center_momentum: EMA momentum of the per-level centers.
        target: ``"centering"`` or ``"sinkhorn"``.
        sinkhorn_iters: Sinkhorn-Knopp iterations for ``target == "sinkhorn"``.
        center_sync: maps this process's ``(sum of the batch's teacher logits [1, K_l], its row count)`` to the mean
            over the data-parallel ranks' rows (DINO all-reduces the center so every rank keeps the same one);
            ``None`` in one process. Sinkhorn targets are balanced over this rank's batch only.
    """

    def __init__(self, level_sizes: tuple[int, ...], student_temp: float = 0.1, teacher_temp: float = 0.04,
                 center_momentum: float = 0.9, target: str = "centering", sinkhorn_iters: int = 3,
                 center_sync: Callable[[Tensor, int], Tensor] | None = None) -> None:
        super().__init__()
        self.center_sync = center_sync
        self.level_sizes = tuple(level_sizes)
        self.student_temp = student_temp
        self.teacher_temp = teacher_temp
        self.center_momentum = center_momentum
        self.target = target
        self.sinkhorn_iters = sinkhorn_iters
        for i, k in enumerate(self.level_sizes):
            self.register_buffer(f"center_{i}", torch.zeros(1, k))

    def center(self, level: int) -> Tensor:
        return getattr(self, f"center_{level}")

    @torch.no_grad()
    def teacher_probs(self, teacher_logits: list[Tensor]) -> list[Tensor]:
        """Per-level teacher targets ``[B, K_l]`` (no gradient)."""
        out = []
        for lvl, logits in enumerate(teacher_logits):
            logits = logits.float()
            if self.target == "sinkhorn":
                out.append(sinkhorn_knopp(logits, self.teacher_temp, self.sinkhorn_iters))
            else:
                out.append(torch.softmax((logits - self.center(lvl)) / self.teacher_temp, dim=-1))
        return out

    def forward(self, student_logits: list[Tensor], teacher_logits: list[Tensor],
                teacher_index: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
        """Returns ``(sum over levels, per-level losses)`` and updates the centers.

        Args:
            student_logits: per level ``[S, K_l]`` student scores (one row per student crop).
            teacher_logits: per level ``[B, K_l]`` teacher scores (the anchors' broad views).
            teacher_index: long ``[S]``, the teacher row each student row is matched with (several student crops
                of one anchor share its teacher target, DINO multi-crop); ``None`` = row ``i`` with row ``i``. The
                centers are updated from each teacher row once, however many crops use it.
        """
        targets = self.teacher_probs(teacher_logits)
        losses = []
        for s, t in zip(student_logits, targets, strict=True):
            if teacher_index is not None:
                t = t[teacher_index]
            losses.append(soft_cross_entropy(s, t, self.student_temp).mean())
        self.update_center(teacher_logits)
        return torch.stack(losses).sum(), losses

    @torch.no_grad()
    def update_center(self, teacher_logits: list[Tensor]) -> None:
        """EMA of the batch mean teacher logits (DINO eq. 4); with ``center_sync``, of the global batch's mean (the
        ranks' sums over their total row count)."""
        for lvl, logits in enumerate(teacher_logits):
            c = self.center(lvl)
            logits = logits.float()
            if self.center_sync is None:
                batch_mean = logits.mean(0, keepdim=True)
            else:
                batch_mean = self.center_sync(logits.sum(0, keepdim=True), len(logits))
            c.mul_(self.center_momentum).add_(batch_mean, alpha=1 - self.center_momentum)


def soft_cross_entropy(student_logits: Tensor, targets: Tensor, student_temp: float) -> Tensor:
    """Per row ``-sum_k targets_k log softmax(student_logits / student_temp)_k`` (``[B]``).

    Args:
        student_logits: ``[B, K]`` student scores.
        targets: ``[B, K]`` target distributions (no gradient flows into them).
        student_temp: student softmax temperature.
    """
    log_p = F.log_softmax(student_logits.float() / student_temp, dim=-1)
    return -(targets.detach() * log_p).sum(-1)


@torch.no_grad()
def cross_entity_targets(
    anchors: Tensor,
    indptr: Tensor,
    partners: Tensor,
    weights: Tensor,
    bank: list[Tensor],
    filled: Tensor,
) -> tuple[list[Tensor], Tensor]:
    """Cross-entity targets: per anchor, the weighted mean of its partners' teacher cluster distributions.

    A user's partners are the items it interacted with and an item's its users; the weight of a partner is the
    pair's funnel weight. Partners without a teacher distribution yet (``filled`` False) are left out; an
    anchor none of whose partners has one gets no target (``has_target`` False, zero rows).

    Args:
        anchors: long ``[B]`` anchor nodes.
        indptr: long ``[N + 1]`` CSR row pointers of the symmetric partner lists.
        partners: long ``[E]`` partner node of each entry.
        weights: float ``[E]`` weight of each entry (``> 0``).
        bank: per level ``[N, K_l]`` latest teacher distribution of every node.
        filled: bool ``[N]`` which rows of ``bank`` hold one.

    Returns:
        ``(targets, has_target)``: per level ``[B, K_l]`` distributions (rows sum to 1 where ``has_target``)
        and bool ``[B]``.
    """
    starts, stops = indptr[anchors], indptr[anchors + 1]
    counts = stops - starts
    row = torch.repeat_interleave(torch.arange(len(anchors), device=anchors.device), counts)
    # Entry positions of every anchor's partner list, without a Python loop over anchors.
    offsets = torch.arange(int(counts.sum()), device=anchors.device) - torch.repeat_interleave(
        torch.cumsum(counts, 0) - counts, counts)
    entry = torch.repeat_interleave(starts, counts) + offsets
    nodes = partners[entry]
    w = weights[entry].float() * filled[nodes].float()
    total = torch.zeros(len(anchors), device=anchors.device).index_add_(0, row, w)
    has_target = total > 0
    targets = []
    for level_bank in bank:
        acc = torch.zeros(len(anchors), level_bank.shape[1], device=anchors.device)
        acc.index_add_(0, row, level_bank[nodes].float() * w[:, None])
        targets.append(acc / total.clamp_min(1e-12)[:, None])
    return targets, has_target


class EngagementTemperature(nn.Module):
    """Temperature of the engagement InfoNCE: fixed, or learned as ``exp(log_temp)`` clamped at ``min_temp``.

    Args:
        init: starting (or fixed) temperature.
        learned: train ``log_temp`` (CLIP's learned logit scale, Radford et al. 2021).
        min_temp: lower bound of the learned temperature (a too sharp softmax overfits the batch).
    """

    def __init__(self, init: float, learned: bool, min_temp: float) -> None:
        super().__init__()
        self.min_temp = min_temp
        self.log_temp = nn.Parameter(torch.tensor(float(init)).log(), requires_grad=learned)

    def forward(self) -> Tensor:
        return self.log_temp.exp().clamp_min(self.min_temp)


@torch.no_grad()
def ema_update(teacher: nn.Module, student: nn.Module, momentum: float) -> None:
    """``teacher <- momentum * teacher + (1 - momentum) * student`` for parameters; buffers are copied.

    Args:
        teacher: the EMA model (same architecture as ``student``).
        student: the trained model.
        momentum: EMA momentum in ``[0, 1]`` (1 = frozen teacher).
    """
    for pt, ps in zip(teacher.parameters(), student.parameters(), strict=True):
        pt.mul_(momentum).add_(ps.detach(), alpha=1 - momentum)
    for bt, bs in zip(teacher.buffers(), student.buffers(), strict=True):
        bt.copy_(bs)


@dataclass(frozen=True)
class InBatchNegatives:
    """What :func:`engagement_infonce` knows about the candidates of a batch of ``P`` pairs, to mask false negatives
    and correct for sampling bias; every field is optional (``None``: no masking / no correction).

    Args:
        user_ids: ``[P]`` node id of each row's user; rows of the same user are not negatives of each other.
        item_ids: ``[P]`` node id of each row's item; rows of the same item are not negatives of each other.
        user_log_q: ``[P]`` log-probability that the row's user is drawn into a batch; subtracted from the logits
            of that candidate (logQ correction, Yi et al. 2019, "Sampling-Bias-Corrected Neural Modeling for Large
            Corpus Item Recommendations"), so that popular candidates, which are in-batch negatives more often, are
            not pushed down for it.
        item_log_q: ``[P]`` the same for the row's item.
        positive_mask: bool ``[P, P]``: ``[r, c]`` True when user ``r`` engaged with item ``c`` in training; such a
            candidate is a negative neither of user ``r`` nor of item ``c`` (the diagonal is ignored: it holds the
            positives).
    """

    user_ids: Tensor | None = None
    item_ids: Tensor | None = None
    user_log_q: Tensor | None = None
    item_log_q: Tensor | None = None
    positive_mask: Tensor | None = None


def engagement_infonce(
    user_emb: Tensor,
    item_emb: Tensor,
    weight: Tensor,
    temperature: float | Tensor = 0.1,
    negatives: InBatchNegatives | None = None,
) -> Tensor:
    """Symmetric in-batch-negatives InfoNCE over engaged (user, item) pairs, weighted by funnel depth.

    Row ``i`` pairs ``user_emb[i]`` with ``item_emb[i]``; the other items (users) of the batch are negatives.
    Duplicate ids in the batch are not used as negatives of each other (they are the same node), nor are known
    positives (see :class:`InBatchNegatives`).

    Args:
        user_emb: ``[P, D]`` L2-normalised user embeddings.
        item_emb: ``[P, D]`` L2-normalised item embeddings.
        weight: ``[P]`` pair weights (deeper funnel stage = larger; all ones when pairs were drawn by weight).
        temperature: softmax temperature (a float, or a scalar tensor when it is learned).
        negatives: ids, log-probabilities and known positives of the batch's candidates; ``None``: no masking and
            no correction.
    """
    neg = InBatchNegatives() if negatives is None else negatives
    user_ids, item_ids, positive_mask = neg.user_ids, neg.item_ids, neg.positive_mask
    user_log_q, item_log_q = neg.user_log_q, neg.item_log_q
    logits = user_emb @ item_emb.t() / temperature
    logits_i = logits.t()
    if item_log_q is not None:
        logits = logits - item_log_q.to(logits.dtype)[None, :]
    if user_log_q is not None:
        logits_i = logits_i - user_log_q.to(logits.dtype)[None, :]
    p = logits.shape[0]
    eye = torch.eye(p, dtype=torch.bool, device=logits.device)
    if item_ids is not None:
        dup_items = (item_ids[None, :] == item_ids[:, None]) & ~eye
        logits_u = logits.masked_fill(dup_items, float("-inf"))
    else:
        logits_u = logits
    if user_ids is not None:
        dup_users = (user_ids[None, :] == user_ids[:, None]) & ~eye
        logits_i = logits_i.masked_fill(dup_users, float("-inf"))
    if positive_mask is not None:
        known = positive_mask.to(torch.bool) & ~eye
        logits_u = logits_u.masked_fill(known, float("-inf"))
        logits_i = logits_i.masked_fill(known.t(), float("-inf"))
    target = torch.arange(p, device=logits.device)
    loss = 0.5 * (F.cross_entropy(logits_u, target, reduction="none")
                  + F.cross_entropy(logits_i, target, reduction="none"))
    w = weight.to(loss.dtype)
    return (loss * w).sum() / w.sum().clamp_min(1e-12)
