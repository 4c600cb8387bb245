"""Engagement pairs of the training loop: how a step's pairs are drawn, their sampling-bias (logQ) correction,
the known positives masked among in-batch negatives, and the partner lists of cross-entity distillation
(numpy only).

Pairs are drawn with replacement, either in proportion to their funnel weight (``"weighted"``) or uniformly
(``"uniform"``). The logQ correction subtracts ``log q(node)``, the probability that one drawn pair holds the
node, computed from that same sampling distribution: ``q(item) = sum of the sampling probabilities of the pairs
holding it`` (Yi et al. 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hir_pipeline.model.config import ENGAGEMENT_SAMPLING


def pair_keys(users: np.ndarray, items: np.ndarray, num_nodes: int) -> np.ndarray:
    """One int64 key per (user, item) pair: ``user * num_nodes + item``.

    Args:
        users: int ``[P]`` user nodes.
        items: int ``[P]`` item nodes.
        num_nodes: number of nodes ``N`` (keys are unique for nodes ``< N``).
    """
    return np.asarray(users, dtype=np.int64) * int(num_nodes) + np.asarray(items, dtype=np.int64)


@dataclass
class EngagementSampler:
    """Draws a step's engagement pairs and supplies their logQ and known-positive mask.

    Build it with :meth:`build`.

    Args:
        users: int64 ``[P]`` user of each drawable pair.
        items: int64 ``[P]`` item of each drawable pair.
        weight: float32 ``[P]`` funnel weight of each pair (``> 0``).
        cdf: float64 ``[P]`` cumulative sampling probability (last entry 1), or ``None`` for uniform draws.
        loss_weight: float32 ``[P]`` weight of each pair in the loss: 1 when pairs are drawn by weight (the
            draw already weights them), the funnel weight when drawn uniformly.
        user_log_q: float32 ``[N]`` log-probability that a drawn pair holds each node as user, or ``None``.
        item_log_q: float32 ``[N]`` the same for items, or ``None``.
        known: sorted int64 :func:`pair_keys` of every engaged training pair (also those without views), or
            ``None`` when known positives are not masked.
        num_nodes: ``N``.
    """

    users: np.ndarray
    items: np.ndarray
    weight: np.ndarray
    cdf: np.ndarray | None
    loss_weight: np.ndarray
    user_log_q: np.ndarray | None
    item_log_q: np.ndarray | None
    known: np.ndarray | None
    num_nodes: int

    @classmethod
    def build(cls, engagement: tuple[np.ndarray, np.ndarray, np.ndarray], usable: np.ndarray, num_nodes: int,
              sampling: str = "weighted", logq: bool = True, mask_known_positives: bool = True
              ) -> EngagementSampler | None:
        """The sampler of the engaged pairs (funnel weight ``> 0``) that ``usable`` keeps; ``None`` if none is left.

        Args:
            engagement: ``(user_idx, item_idx, weight)`` of every training pair.
            usable: bool ``[P]``, pairs that can be drawn (both nodes have a student view).
            num_nodes: ``N``.
            sampling: ``"weighted"`` or ``"uniform"`` (``ModelConfig.engagement_sampling``).
            logq: compute the logQ correction.
            mask_known_positives: keep the keys of every engaged pair for :meth:`positive_mask`.
        """
        if sampling not in ENGAGEMENT_SAMPLING:
            raise ValueError(f"unknown engagement sampling {sampling!r}; one of {ENGAGEMENT_SAMPLING}")
        users, items, weight = (np.asarray(a) for a in engagement)
        engaged = weight > 0
        keep = engaged & np.asarray(usable, dtype=bool)
        if not keep.any():
            return None
        u, i = users[keep].astype(np.int64), items[keep].astype(np.int64)
        w = weight[keep].astype(np.float32)
        if sampling == "weighted":
            prob = w.astype(np.float64) / float(w.sum(dtype=np.float64))
            cdf = np.cumsum(prob)
            cdf[-1] = 1.0
            loss_weight = np.ones_like(w)
        else:
            prob = np.full(len(w), 1.0 / len(w))
            cdf, loss_weight = None, w
        user_log_q = item_log_q = None
        if logq:
            user_log_q, item_log_q = (
                np.log(np.maximum(np.bincount(ids, weights=prob, minlength=num_nodes), 1e-12)).astype(np.float32)
                for ids in (u, i))
        known = None
        if mask_known_positives:
            known = np.unique(pair_keys(users[engaged], items[engaged], num_nodes))
        return cls(u, i, w, cdf, loss_weight, user_log_q, item_log_q, known, int(num_nodes))

    def __len__(self) -> int:
        return len(self.users)

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Rows of ``size`` pairs drawn with replacement (at most ``len(self)`` of them).

        Args:
            rng: the epoch's generator.
            size: pairs per step (``TrainConfig.engagement_batch_size``).
        """
        size = min(int(size), len(self))
        if self.cdf is None:
            return rng.integers(0, len(self), size=size)
        return np.minimum(np.searchsorted(self.cdf, rng.random(size), side="right"), len(self) - 1)

    def positive_mask(self, rows: np.ndarray) -> np.ndarray | None:
        """Bool ``[P, P]`` for drawn ``rows``: ``[r, c]`` True when user ``r`` engaged item ``c`` in training (the
        diagonal included); ``None`` when known positives are not masked.

        Args:
            rows: drawn rows (from :meth:`draw`).
        """
        if self.known is None:
            return None
        keys = pair_keys(self.users[rows][:, None], self.items[rows][None, :], self.num_nodes)
        pos = np.searchsorted(self.known, keys)
        return self.known[np.minimum(pos, len(self.known) - 1)] == keys


def partner_lists(engagement: tuple[np.ndarray, np.ndarray, np.ndarray], num_nodes: int,
                  seen: tuple[np.ndarray, np.ndarray] | None = None, seen_weight: float = 0.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric CSR partner lists of cross-entity distillation: a user's items and an item's users.

    Args:
        engagement: ``(user_idx, item_idx, weight)``; a pair's entry weight is its funnel weight, or
            ``seen_weight`` when that is 0 (seen, not engaged).
        num_nodes: ``N``.
        seen: optional ``(user_idx, item_idx)`` of pairs seen but not engaged (weight ``seen_weight``).
        seen_weight: weight of a seen-but-not-engaged pair (``ModelConfig.cross_entity_impression_weight``).

    Returns:
        ``(indptr int64 [N + 1], partners int64 [E], weights float32 [E])``; entries of weight 0 are left out.
    """
    users, items, weight = (np.asarray(a) for a in engagement)
    w = np.where(weight > 0, weight, seen_weight).astype(np.float32)
    src, dst = [users.astype(np.int64)], [items.astype(np.int64)]
    ws = [w]
    if seen is not None and len(seen[0]):
        src.append(np.asarray(seen[0], dtype=np.int64))
        dst.append(np.asarray(seen[1], dtype=np.int64))
        ws.append(np.full(len(seen[0]), seen_weight, dtype=np.float32))
    u, i, w = np.concatenate(src), np.concatenate(dst), np.concatenate(ws)
    rows, cols, vals = np.concatenate([u, i]), np.concatenate([i, u]), np.concatenate([w, w])
    keep = vals > 0
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return indptr, cols, vals
