"""Prototype refinement: spherical k-means (Dhillon & Modha 2001) of the nodes' head projections, started from the
learned prototypes.

Self-distillation learns the prototypes slowly: a DINO run needs thousands of steps before its teacher targets
sharpen, and a short CPU schedule stops long before (the loss stays near ``log K`` per level and one prototype can
hold every item). Its encoder is still trained by the engagement objective, so the head projections of the nodes
already group by interest; a few Lloyd iterations over *all* nodes move each prototype to the mean direction of the
nodes it wins, so the published argmax clusters are the groups the embedding space holds. Starting from the learned
prototypes keeps what distillation found (a prototype that already sits on a group stays there), and an emptied
prototype is re-seeded at the node least similar to every prototype (farthest-first traversal, Gonzalez 1985), so
a level whose nodes all fell into one prototype is split instead of kept whole.

Deterministic: no random choice, ties broken by the lowest index.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


@torch.no_grad()
def spherical_kmeans(points: Tensor, init: Tensor, iters: int) -> Tensor:
    """Refined unit prototypes ``[K, D]`` after ``iters`` Lloyd iterations on the unit sphere.

    Each iteration assigns every point to its most similar prototype (cosine), moves each prototype to the
    normalised sum of its points and re-seeds every prototype left without points farthest-first: at the point
    least similar to all prototypes so far, one after the other (ties: the lowest index).

    Args:
        points: float ``[N, D]`` points (L2-normalised here).
        init: float ``[K, D]`` starting prototypes (L2-normalised here).
        iters: Lloyd iterations (0 returns the normalised ``init``).
    """
    z = F.normalize(points.float(), dim=-1)
    c = F.normalize(init.float().clone(), dim=-1)
    k = c.shape[0]
    for _ in range(iters):
        sim = z @ c.t()
        best, assign = sim.max(dim=1)
        sums = torch.zeros_like(c).index_add_(0, assign, z)
        counts = torch.bincount(assign, minlength=k)
        filled = counts > 0
        c = torch.where(filled[:, None], F.normalize(sums, dim=-1), c)
        best = (z @ c[filled].t()).max(dim=1).values if bool(filled.any()) else best
        for slot in torch.nonzero(~filled).flatten().tolist():
            # farthest-first: the point least similar to every prototype so far, then it serves its neighbours
            point = int(torch.argmin(best))
            c[slot] = z[point]
            best = torch.maximum(best, z @ z[point])
    return c


@torch.no_grad()
def assignment_sizes(points: Tensor, prototypes: Tensor) -> Tensor:
    """long ``[K]``: how many of ``points`` each prototype wins (cosine argmax)."""
    sim = F.normalize(points.float(), dim=-1) @ F.normalize(prototypes.float(), dim=-1).t()
    return torch.bincount(sim.argmax(dim=1), minlength=prototypes.shape[0])
