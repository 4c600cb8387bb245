"""Self-distillation objectives: hierarchical DINO loss (Caron et al. 2021, "Emerging Properties in
Self-Supervised Vision Transformers"), the EMA teacher update, and the engagement InfoNCE loss
(van den Oord et al. 2018) with in-batch negatives weighted by funnel depth."""

from __future__ import annotations

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
    """

    def __init__(self, level_sizes: tuple[int, ...], student_temp: float = 0.1, teacher_temp: float = 0.04,
                 center_momentum: float = 0.9, target: str = "centering", sinkhorn_iters: int = 3) -> None:
        super().__init__()
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

    def forward(self, student_logits: list[Tensor], teacher_logits: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """Returns ``(sum over levels, per-level losses)`` and updates the centers.

        Args:
            student_logits: per level ``[B, K_l]`` student scores.
            teacher_logits: per level ``[B, K_l]`` teacher scores (same anchors, other view).
        """
        targets = self.teacher_probs(teacher_logits)
        losses = []
        for s, t in zip(student_logits, targets, strict=True):
            log_p = F.log_softmax(s.float() / self.student_temp, dim=-1)
            losses.append(-(t * log_p).sum(-1).mean())
        self.update_center(teacher_logits)
        return torch.stack(losses).sum(), losses

    @torch.no_grad()
    def update_center(self, teacher_logits: list[Tensor]) -> None:
        """EMA of the batch mean teacher logits (DINO eq. 4)."""
        for lvl, logits in enumerate(teacher_logits):
            c = self.center(lvl)
            c.mul_(self.center_momentum).add_(logits.float().mean(0, keepdim=True), alpha=1 - self.center_momentum)


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


def engagement_infonce(
    user_emb: Tensor,
    item_emb: Tensor,
    weight: Tensor,
    temperature: float = 0.1,
    user_ids: Tensor | None = None,
    item_ids: Tensor | None = None,
    user_log_q: Tensor | None = None,
    item_log_q: Tensor | None = None,
) -> Tensor:
    """Symmetric in-batch-negatives InfoNCE over engaged (user, item) pairs, weighted by funnel depth.

    Row ``i`` pairs ``user_emb[i]`` with ``item_emb[i]``; the other items (users) of the batch are negatives.
    Duplicate ids in the batch are not used as negatives of each other (they are the same node).

    Args:
        user_emb: ``[P, D]`` L2-normalised user embeddings.
        item_emb: ``[P, D]`` L2-normalised item embeddings.
        weight: ``[P]`` pair weights (deeper funnel stage = larger).
        temperature: softmax temperature.
        user_ids, item_ids: optional ``[P]`` node ids for masking duplicate false negatives.
        user_log_q, item_log_q: optional ``[P]`` log-probabilities that the row's user (item) is drawn into a
            batch; subtracted from the logits of that candidate (logQ correction, Yi et al. 2019, "Sampling-Bias-
            Corrected Neural Modeling for Large Corpus Item Recommendations"), so that popular candidates, which
            are in-batch negatives more often, are not pushed down for it.
    """
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
    target = torch.arange(p, device=logits.device)
    loss = 0.5 * (F.cross_entropy(logits_u, target, reduction="none")
                  + F.cross_entropy(logits_i, target, reduction="none"))
    w = weight.to(loss.dtype)
    return (loss * w).sum() / w.sum().clamp_min(1e-12)
