"""Hierarchy of prototype heads (multi-level interest clusters) and Sinkhorn-Knopp balancing.

Each level ``l`` (0 = coarsest) holds ``K_l`` learnable prototypes on the unit sphere; the logit of a node for
a cluster is the cosine similarity of its (projected) embedding and the prototype, as in DINO's
weight-normalised last layer (Caron et al. 2021) and SwAV's prototypes (Caron et al. 2020).

**Tree design.** A fine cluster belongs to exactly one coarse cluster. During training the levels are aligned
because every level is distilled from the same teacher view of the same node. The published tree is read off
the nodes: a fine cluster's parent is the coarse cluster most of its members fall into
(``hir_pipeline.model.tree.majority_parents``, applied by ``training.inference.infer``), so a parent
always contains most of its child; a fine cluster without members takes the level ``l - 1`` prototype most
similar to its own (:meth:`PrototypeHierarchy.parent_maps`). ``hierarchy_consistency`` with those maps is the
share of nodes whose argmax coarse cluster is their argmax fine cluster's parent (the agreement).

**No collapse.** The teacher targets are either DINO centering + sharpening
(``hir_pipeline.model.distillation``) or Sinkhorn-Knopp equipartition (:func:`sinkhorn_knopp`) per level.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class PrototypeHierarchy(nn.Module):
    """Per-level cosine prototype heads.

    Args:
        in_dim: width of the input embedding.
        level_sizes: prototypes per level, coarsest first.
    """

    def __init__(self, in_dim: int, level_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.level_sizes = tuple(level_sizes)
        self.prototypes = nn.ParameterList(
            nn.Parameter(F.normalize(torch.randn(k, in_dim), dim=-1)) for k in self.level_sizes
        )

    def forward(self, z: Tensor) -> list[Tensor]:
        """Cosine-similarity logits ``[B, K_l]`` per level for inputs ``z`` ``[B, in_dim]``."""
        z = F.normalize(z, dim=-1)
        return [z @ F.normalize(p, dim=-1).t() for p in self.prototypes]

    @torch.no_grad()
    def parent_maps(self) -> list[Tensor]:
        """For each level ``l >= 1``, long ``[K_l]``: the index of each prototype's parent at level ``l - 1``."""
        protos = [F.normalize(p, dim=-1) for p in self.prototypes]
        return [(protos[i] @ protos[i - 1].t()).argmax(dim=-1) for i in range(1, len(protos))]


@torch.no_grad()
def hierarchy_consistency(probs: list[Tensor], parent_maps: list[Tensor]) -> list[float]:
    """Fraction of nodes whose argmax cluster at level ``l`` has their argmax level ``l - 1`` cluster as parent.

    Args:
        probs: per level ``[B, K_l]`` probabilities (coarsest first).
        parent_maps: from :meth:`PrototypeHierarchy.parent_maps`.
    """
    out = []
    for lvl in range(1, len(probs)):
        fine = probs[lvl].argmax(-1)
        coarse = probs[lvl - 1].argmax(-1)
        out.append(float((parent_maps[lvl - 1][fine] == coarse).float().mean()))
    return out


@torch.no_grad()
def sinkhorn_knopp(logits: Tensor, temperature: float, n_iters: int = 3) -> Tensor:
    """Balanced soft assignments by Sinkhorn-Knopp (Cuturi 2013; SwAV, Caron et al. 2020).

    Alternately normalises rows (one unit of mass per sample) and columns (equal mass per cluster), so each of
    the ``K`` clusters receives ``B / K`` of the batch: no cluster can absorb everything.

    Args:
        logits: ``[B, K]`` teacher scores.
        temperature: softmax temperature applied before balancing.
        n_iters: alternating normalisation rounds.

    Returns:
        ``[B, K]`` assignments, each row summing to 1.
    """
    logits = logits.float() / temperature
    q = torch.exp(logits - logits.max()).t()  # [K, B]
    k, b = q.shape
    q = q / q.sum()
    for _ in range(n_iters):
        q = q / q.sum(dim=1, keepdim=True).clamp_min(1e-30) / k
        q = q / q.sum(dim=0, keepdim=True).clamp_min(1e-30) / b
    return (q * b).t()


@torch.no_grad()
def cluster_perplexity(probs: Tensor) -> float:
    """``exp(H(mean_b p_b))``: effective number of clusters used by a batch (``K`` = perfectly spread).

    Args:
        probs: ``[B, K]`` assignment probabilities.
    """
    mean = probs.float().mean(0)
    return float(torch.exp(-(mean * torch.log(mean.clamp_min(1e-12))).sum()))
