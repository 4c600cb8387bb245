"""The scorer interface every method implements, the embedding scorer of HIR, and ranked evaluation.

A scorer is fitted on :class:`~hir_pipeline.evaluation.data.EvalData` (it may only read ``train``, the id
lists and whatever side information it was built with) and then returns dense ``[B, I]`` score matrices for
batches of users. :func:`evaluate_per_user` ranks, per split, only that split's candidate items, never an item
the user engaged with in training, and returns each user's Recall@K / NDCG@K (what a paired comparison of two
methods needs); :func:`evaluate_scorer` averages them over users with targets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from hir_pipeline.evaluation.data import EvalData
from hir_pipeline.evaluation.metrics import hits_matrix, ndcg_at_k, recall_at_k


@runtime_checkable
class Scorer(Protocol):
    """A recommendation method under evaluation.

    Attributes:
        name: method name used in the report (``hir``, ``popularity``, ``als``, ...).
    """

    name: str

    def fit(self, data: EvalData) -> Scorer:
        """Learn from ``data.train`` (targets must not be read); returns ``self``."""
        ...

    def score(self, users: np.ndarray) -> np.ndarray:
        """float32 ``[len(users), data.n_items]`` scores (higher = more relevant) of the given user rows."""
        ...


class EmbeddingScorer:
    """Scores a user-item pair by the dot product of their embeddings (how HIR and downstream teams score).

    Args:
        user_embeddings: float ``[U, d]``, row ``u`` = ``data.user_ids[u]`` (zero rows for users without one).
        item_embeddings: float ``[I, d]``, row ``i`` = ``data.item_ids[i]`` (zero rows for items without one).
        name: method name in the report.
    """

    def __init__(self, user_embeddings: np.ndarray, item_embeddings: np.ndarray, name: str = "hir") -> None:
        self.name = name
        self.users = np.asarray(user_embeddings, dtype=np.float32)
        self.items = np.asarray(item_embeddings, dtype=np.float32)

    @classmethod
    def from_lookup(cls, data: EvalData, entity_ids: list[str], embeddings: np.ndarray,
                    name: str = "hir") -> EmbeddingScorer:
        """Align a per-entity embedding table with ``data``'s users and items (missing ids get zero rows).

        Args:
            data: the evaluation data whose ``user_ids`` / ``item_ids`` fix the row order.
            entity_ids: id of each row of ``embeddings``.
            embeddings: float ``[N, d]``.
            name: method name in the report.
        """
        pos = {e: i for i, e in enumerate(entity_ids)}
        emb = np.asarray(embeddings, dtype=np.float32)
        padded = np.vstack([emb, np.zeros((1, emb.shape[1]), np.float32)])
        missing = len(emb)
        users = padded[[pos.get(u, missing) for u in data.user_ids]]
        items = padded[[pos.get(i, missing) for i in data.item_ids]]
        return cls(users, items, name)

    def fit(self, data: EvalData) -> EmbeddingScorer:
        if self.users.shape[0] != data.n_users or self.items.shape[0] != data.n_items:
            raise ValueError(f"embeddings {self.users.shape[0]} x {self.items.shape[0]} do not match data "
                             f"{data.n_users} x {data.n_items}")
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        return self.users[users] @ self.items.T

    def mean_user(self, name: str | None = None) -> EmbeddingScorer:
        """The same items scored for every user against one vector: the mean of the users' vectors.

        A diagnostic: it ranks every user's list by a global prior alone, so the gap between a method and its
        mean-user version is what personalisation adds. Users without an embedding (zero rows) are left out
        of the mean; users keep their own training items excluded, as for every scorer.

        Args:
            name: method name in the report (default ``<name>_mean_user``).
        """
        known = np.linalg.norm(self.users, axis=1) > 0
        mean = self.users[known].mean(0) if known.any() else np.zeros(self.users.shape[1], np.float32)
        users = np.broadcast_to(mean.astype(np.float32), self.users.shape)
        return EmbeddingScorer(users, self.items, name or f"{self.name}_mean_user")


def top_k(scores: np.ndarray, allowed: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best allowed items per row, best first (``-1`` pads rows with fewer allowed).

    Ties are broken by item index, so a constant scorer ranks deterministically.

    Args:
        scores: float ``[B, I]``.
        allowed: bool ``[B, I]`` (or ``[I]``) items that may be ranked.
        k: list length.
    """
    s = np.where(allowed, scores.astype(np.float64), -np.inf)
    k_eff = min(k, s.shape[1])
    part = np.argpartition(-s, k_eff - 1, axis=1)[:, :k_eff] if k_eff < s.shape[1] else \
        np.tile(np.arange(s.shape[1]), (s.shape[0], 1))
    vals = np.take_along_axis(s, part, 1)
    order = np.lexsort((part, -vals), axis=1)  # score descending, then item index
    ranked = np.take_along_axis(part, order, 1)
    ranked = np.where(np.take_along_axis(vals, order, 1) == -np.inf, -1, ranked)
    if k_eff < k:
        ranked = np.hstack([ranked, np.full((s.shape[0], k - k_eff), -1, dtype=ranked.dtype)])
    return ranked


@dataclass(frozen=True)
class UserScores:
    """Per-user ranking metrics of one method on one split.

    Args:
        users: int ``[B]`` row indices (into ``data.user_ids``) of the users with at least one target, ascending;
            the same for every method evaluated on the same data, so two methods pair up user by user.
        recall: float64 ``[B]`` Recall@K of each of those users.
        ndcg: float64 ``[B]`` NDCG@K of each of those users.
    """

    users: np.ndarray
    recall: np.ndarray
    ndcg: np.ndarray


def evaluate_per_user(scorer: Scorer, data: EvalData, k: int = 20, batch_size: int = 1024) -> dict[str, UserScores]:
    """Recall@K and NDCG@K of a fitted scorer for every user with targets, on every split of ``data``.

    Args:
        scorer: a fitted scorer.
        data: the evaluation data.
        k: cut-off.
        batch_size: users scored per batch (bounds the ``[B, I]`` score matrix).
    """
    return evaluate_rankings(lambda batch, allowed: top_k(scorer.score(batch), allowed, k), data, k, batch_size)


#: ``rank(users, allowed)``: int ``[B, K]`` ranked item indices (``-1`` pads) of user rows ``users`` among the
#: bool ``[B, I]`` ``allowed`` items (and the split that is ranked is the caller's).
Ranker = Callable[[np.ndarray, np.ndarray], np.ndarray]


def evaluate_rankings(rank: Ranker, data: EvalData, k: int = 20, batch_size: int = 1024,
                      splits: Sequence[str] | None = None) -> dict[str, UserScores]:
    """Recall@K and NDCG@K of ranked lists for every user with targets, on every split of ``data``.

    Each split ranks only its candidate items, never an item the user engaged with in training: ``rank`` gets
    those as ``allowed``.

    Args:
        rank: ranks a batch of users among their allowed items (:data:`Ranker`).
        data: the evaluation data.
        k: cut-off.
        batch_size: users ranked per batch.
        splits: the splits evaluated (default: every split of ``data``).
    """
    out: dict[str, UserScores] = {}
    engaged = data.train.astype(bool).tocsr()
    for split in (data.splits if splits is None else splits):
        targets = data.targets[split]
        users = np.flatnonzero(targets.getnnz(axis=1) > 0)
        candidates = data.candidates[split]
        recalls, ndcgs = [np.zeros(0)], [np.zeros(0)]
        for start in range(0, len(users), batch_size):
            batch = users[start:start + batch_size]
            allowed = candidates[None, :] & ~engaged[batch].toarray()
            ranked = rank(batch, allowed)
            rows = targets[batch]
            hits = hits_matrix(ranked, rows)
            n_targets = rows.getnnz(axis=1)
            recalls.append(recall_at_k(hits, n_targets))
            ndcgs.append(ndcg_at_k(hits, n_targets))
        out[split] = UserScores(users, np.concatenate(recalls), np.concatenate(ndcgs))
    return out


def summarize(per_user: dict[str, UserScores], k: int) -> dict[str, dict[str, float]]:
    """Per split: ``recall_at_<k>``, ``ndcg_at_<k>`` (means over users; NaN when none) and ``users``.

    Args:
        per_user: per split, the per-user metrics (:func:`evaluate_per_user`).
        k: the cut-off they were computed at (names the metrics).
    """
    return {split: {f"recall_at_{k}": float(got.recall.mean()) if got.recall.size else float("nan"),
                    f"ndcg_at_{k}": float(got.ndcg.mean()) if got.ndcg.size else float("nan"),
                    "users": float(len(got.users))}
            for split, got in per_user.items()}


def evaluate_scorer(scorer: Scorer, data: EvalData, k: int = 20, batch_size: int = 1024) -> dict[str, dict[str, float]]:
    """Recall@K and NDCG@K of a fitted scorer on every split of ``data``, averaged over users with targets.

    Args:
        scorer: a fitted scorer.
        data: the evaluation data.
        k: cut-off.
        batch_size: users scored per batch (bounds the ``[B, I]`` score matrix).

    Returns:
        Per split: ``recall_at_<k>``, ``ndcg_at_<k>`` (means over users with targets; NaN when none) and
        ``users`` (how many users were evaluated).
    """
    return summarize(evaluate_per_user(scorer, data, k, batch_size), k)
