"""Random scores: the floor every method must clear (used as a sanity reference, not reported by default)."""

from __future__ import annotations

import numpy as np

from hir_pipeline.evaluation.data import EvalData


class RandomScorer:
    """Seeded uniform scores, fixed per (user, item).

    Args:
        seed: seed of the scores.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.n_items = 0

    def fit(self, data: EvalData) -> RandomScorer:
        self.n_items = data.n_items
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        return np.stack([np.random.default_rng([self.seed, int(u)]).random(self.n_items, dtype=np.float32)
                         for u in users]) if len(users) else np.zeros((0, self.n_items), np.float32)
