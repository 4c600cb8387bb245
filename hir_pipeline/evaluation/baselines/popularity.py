"""Popularity: every user gets the items with the most funnel-weighted training engagement."""

from __future__ import annotations

import numpy as np

from hir_pipeline.evaluation.data import EvalData


class PopularityScorer:
    """Item score = summed training weight of the item (the same list for every user)."""

    name = "popularity"

    def __init__(self) -> None:
        self.item_scores: np.ndarray | None = None

    def fit(self, data: EvalData) -> PopularityScorer:
        self.item_scores = np.asarray(data.train.sum(axis=0), dtype=np.float32).ravel()
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        assert self.item_scores is not None, "fit first"
        return np.broadcast_to(self.item_scores, (len(users), len(self.item_scores))).copy()
