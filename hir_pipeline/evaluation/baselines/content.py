"""Content-only: a user is the funnel-weighted mean of the content embeddings of the items they engaged with."""

from __future__ import annotations

import numpy as np

from hir_pipeline.evaluation.data import EvalData


class ContentScorer:
    """Scores ``<user profile, item content>``, where the profile averages engaged items' content by weight.

    Works for cold items (they have content but no events), which is what it is the reference for.

    Args:
        item_content: float ``[I, Dc]`` content embedding of each item of the data (row order =
            ``data.item_ids``; zero rows for items without content).
    """

    name = "content"

    def __init__(self, item_content: np.ndarray) -> None:
        c = np.asarray(item_content, dtype=np.float32)
        norms = np.linalg.norm(c, axis=1, keepdims=True)
        self.items = np.where(norms > 0, c / np.maximum(norms, 1e-12), 0.0).astype(np.float32)
        self.users: np.ndarray | None = None

    @classmethod
    def from_lookup(cls, data: EvalData, entity_ids: list[str], content: np.ndarray) -> ContentScorer:
        """Align a per-entity content table with ``data.item_ids`` (missing items get zero rows).

        Args:
            data: the evaluation data.
            entity_ids: id of each row of ``content``.
            content: float ``[N, Dc]``.
        """
        pos = {e: i for i, e in enumerate(entity_ids)}
        c = np.asarray(content, dtype=np.float32)
        padded = np.vstack([c, np.zeros((1, c.shape[1]), np.float32)])
        return cls(padded[[pos.get(i, len(c)) for i in data.item_ids]])

    def fit(self, data: EvalData) -> ContentScorer:
        if self.items.shape[0] != data.n_items:
            raise ValueError(f"content has {self.items.shape[0]} rows for {data.n_items} items")
        weights = data.train.tocsr()
        totals = np.asarray(weights @ (np.linalg.norm(self.items, axis=1) > 0).astype(np.float32)).ravel()
        self.users = np.asarray(weights @ self.items) / np.maximum(totals, 1e-12)[:, None]
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        assert self.users is not None, "fit first"
        return self.users[users] @ self.items.T
