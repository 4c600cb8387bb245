"""Implicit-feedback ALS (Hu, Koren, Volinsky, ICDM 2008) with the ``implicit`` library and a small grid.

The grid is searched on the data's inner tuning split (``EvalData.tuning``: the reported split's rules applied
to its training events), or, for data without one, on a seeded random hold-out of the training pairs
(:func:`~hir_pipeline.evaluation.data.validation_split`); then the best setting is refitted on all of them.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import numpy as np

from hir_pipeline.evaluation.data import VALIDATION, EvalData, validation_split

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ALSConfig:
    """ALS grid.

    Args:
        factors: latent dimensions tried.
        regularization: L2 weights tried.
        alpha: confidence scales tried (confidence = ``alpha * funnel weight``).
        iterations: ALS sweeps per fit.
        validation_fraction: share of each user's training pairs held out to pick the grid point, for data
            without a tuning split (``EvalData.tuning``).
        k: cut-off of the Recall@K the grid maximises (the evaluation sets it to its own ``k``).
        seed: seed of the factor initialisation and of the validation split (the evaluation sets it to its own
            ``seed``).
        num_threads: threads of ``implicit`` (0 = all cores).
    """

    factors: tuple[int, ...] = (32, 64)
    regularization: tuple[float, ...] = (0.01, 0.1)
    alpha: tuple[float, ...] = (1.0, 10.0)
    iterations: int = 15
    validation_fraction: float = 0.1
    k: int = 20
    seed: int = 0
    num_threads: int = 0


class ALSScorer:
    """ALS user/item factors; the score is their dot product.

    Args:
        config: the grid and fit settings.
    """

    name = "als"

    def __init__(self, config: ALSConfig | None = None) -> None:
        self.config = config or ALSConfig()
        self.best: dict[str, float] = {}
        self.grid: list[dict[str, float]] = []
        self.user_factors: np.ndarray | None = None
        self.item_factors: np.ndarray | None = None

    def _fit_once(self, train, factors: int, reg: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        from implicit.cpu.als import AlternatingLeastSquares
        from threadpoolctl import threadpool_limits

        c = self.config
        # implicit parallelises over users itself; a multi-threaded BLAS underneath oversubscribes the cores
        with threadpool_limits(1, "blas"):
            model = AlternatingLeastSquares(factors=factors, regularization=reg, alpha=alpha,
                                            iterations=c.iterations, random_state=c.seed, num_threads=c.num_threads)
            model.fit(train.tocsr().astype(np.float32), show_progress=False)
        return np.asarray(model.user_factors), np.asarray(model.item_factors)

    def fit(self, data: EvalData) -> ALSScorer:
        from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_scorer

        c = self.config
        inner = data.tuning if data.tuning is not None else validation_split(data, c.validation_fraction, c.seed)
        best_score, best = -1.0, None
        for factors, reg, alpha in itertools.product(c.factors, c.regularization, c.alpha):
            u, i = self._fit_once(inner.train, factors, reg, alpha)
            got = evaluate_scorer(EmbeddingScorer(u, i, self.name), inner, c.k)[VALIDATION][f"recall_at_{c.k}"]
            got = 0.0 if np.isnan(got) else got
            self.grid.append({"factors": factors, "regularization": reg, "alpha": alpha, f"recall_at_{c.k}": got})
            log.info("ALS factors=%d reg=%g alpha=%g: validation recall@%d %.4f", factors, reg, alpha, c.k, got)
            if got > best_score:
                best_score, best = got, (factors, reg, alpha)
        assert best is not None
        self.best = {"factors": best[0], "regularization": best[1], "alpha": best[2],
                     f"validation_recall_at_{c.k}": best_score}
        self.user_factors, self.item_factors = self._fit_once(data.train, *best)
        return self

    def score(self, users: np.ndarray) -> np.ndarray:
        assert self.user_factors is not None and self.item_factors is not None, "fit first"
        return self.user_factors[users] @ self.item_factors.T
