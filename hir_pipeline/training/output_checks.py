"""Checks of a trained model's outputs, run in memory before anything is written or registered.

A model that diverged (NaN weights), collapsed (every node at one point) or put every node in one cluster still
"finishes" training; publishing it would hand downstream readers a useless space. These checks are the gate in
front of the ``model_outputs`` write and the model registration (the ``interest_model`` asset runs them as
blocking asset checks), so such a model never reaches a table.

NumPy only: the same checks run in a test, on a GPU machine, or inside the asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Names of the checks, as the ``interest_model`` asset's blocking asset checks show them.
FINITE_UNIT_NORM = "embeddings_finite_unit_norm"
CLUSTERS_USED = "every_level_uses_several_clusters"
NOT_COLLAPSED = "embedding_space_not_collapsed"
CHECK_NAMES = (FINITE_UNIT_NORM, CLUSTERS_USED, NOT_COLLAPSED)


@dataclass(frozen=True)
class OutputCheckConfig:
    """Thresholds of the model-output checks.

    Args:
        norm_tolerance: largest allowed ``| ||e|| - 1 |`` of a published embedding (they are L2-normalised).
        min_clusters_used: fewest clusters every level must hold at least one node's top-1 assignment in.
        max_mean_cosine: largest allowed mean cosine similarity between two different nodes' embeddings; a
            collapsed space (every node near one point) is close to 1.
        min_effective_rank: smallest allowed effective rank (exponential of the entropy of the normalised
            singular values, Roy & Vetterli 2007) of the centred embeddings; a space squeezed onto a line is 1.
    """

    norm_tolerance: float = 1e-3
    min_clusters_used: int = 2
    max_mean_cosine: float = 0.9
    min_effective_rank: float = 2.0

    def __post_init__(self) -> None:
        if self.norm_tolerance <= 0:
            raise ValueError("norm_tolerance must be > 0")
        if self.min_clusters_used < 1:
            raise ValueError("min_clusters_used must be >= 1")
        if not -1.0 <= self.max_mean_cosine <= 1.0:
            raise ValueError("max_mean_cosine must be in [-1, 1]")
        if self.min_effective_rank < 1.0:
            raise ValueError("min_effective_rank must be >= 1")


@dataclass(frozen=True)
class CheckOutcome:
    """One check's verdict.

    Args:
        name: one of :data:`CHECK_NAMES`.
        passed: whether the outputs pass.
        description: what was checked, for the asset check's description.
        details: measured values (asset check metadata).
    """

    name: str
    passed: bool
    description: str
    details: dict[str, Any] = field(default_factory=dict)


def mean_pairwise_cosine(embeddings: np.ndarray) -> float:
    """Mean cosine between two *different* rows of unit-norm ``embeddings`` ``[N, d]``, exactly, in O(N d).

    ``sum_{i != j} <e_i, e_j> = ||sum_i e_i||^2 - sum_i ||e_i||^2``: no N x N matrix.
    """
    n = len(embeddings)
    if n < 2:
        return 0.0
    x = embeddings.astype(np.float64)
    total = x.sum(axis=0)
    return float((total @ total - (x * x).sum()) / (n * (n - 1)))


def effective_rank(embeddings: np.ndarray) -> float:
    """Effective rank of the centred rows (Roy & Vetterli 2007): ``exp(entropy(s / sum(s)))`` of the singular
    values ``s``; 1 for points on a line, ``d`` for an isotropic cloud."""
    if len(embeddings) < 2:
        return 1.0
    x = embeddings.astype(np.float64)
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    if s.sum() <= 0:
        return 1.0
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def check_finite_unit_norm(embeddings: np.ndarray, config: OutputCheckConfig) -> CheckOutcome:
    finite = np.isfinite(embeddings).all(axis=1)
    norms = np.linalg.norm(np.where(np.isfinite(embeddings), embeddings, 0.0), axis=1)
    off_norm = finite & (np.abs(norms - 1.0) > config.norm_tolerance)
    details = {"nodes": int(len(embeddings)), "non_finite_rows": int((~finite).sum()),
               "rows_off_unit_norm": int(off_norm.sum()),
               "max_norm_error": float(np.abs(norms[finite] - 1.0).max()) if finite.any() else float("nan")}
    passed = len(embeddings) > 0 and finite.all() and not off_norm.any()
    return CheckOutcome(FINITE_UNIT_NORM, bool(passed),
                        f"Every embedding is finite with L2 norm 1 +- {config.norm_tolerance}.", details)


def check_clusters_used(probs: Sequence[np.ndarray], config: OutputCheckConfig) -> CheckOutcome:
    used = [int(len(np.unique(np.asarray(p).argmax(axis=1)))) if len(p) else 0 for p in probs]
    sizes = [int(np.asarray(p).shape[1]) for p in probs]
    # a level cannot use more clusters than it has or than there are nodes
    needed = [min(config.min_clusters_used, k, len(p)) for k, p in zip(sizes, probs, strict=True)]
    finite = all(np.isfinite(np.asarray(p)).all() for p in probs)
    passed = bool(probs) and finite and all(u >= n for u, n in zip(used, needed, strict=True))
    return CheckOutcome(CLUSTERS_USED, passed,
                        f"Every level's top-1 assignments use at least {config.min_clusters_used} clusters.",
                        {"clusters_used": used, "level_sizes": sizes, "probabilities_finite": finite})


def check_not_collapsed(embeddings: np.ndarray, config: OutputCheckConfig) -> CheckOutcome:
    finite = bool(np.isfinite(embeddings).all())
    cosine = mean_pairwise_cosine(embeddings) if finite else float("nan")
    rank = effective_rank(embeddings) if finite else float("nan")
    # a space of fewer nodes than the required rank cannot reach it: demand what the nodes can span
    needed_rank = min(config.min_effective_rank, max(1.0, len(embeddings) - 1.0))
    passed = finite and cosine <= config.max_mean_cosine and rank >= needed_rank
    return CheckOutcome(NOT_COLLAPSED, bool(passed),
                        f"Mean cosine between nodes <= {config.max_mean_cosine} and effective rank >= "
                        f"{config.min_effective_rank}.",
                        {"mean_pairwise_cosine": cosine, "effective_rank": rank})


def check_outputs(embeddings: np.ndarray, probs: Sequence[np.ndarray],
                  config: OutputCheckConfig | None = None,
                  encoder_embeddings: np.ndarray | None = None) -> list[CheckOutcome]:
    """All model-output checks, in :data:`CHECK_NAMES` order.

    Args:
        embeddings: float ``[N, d]`` published embeddings (row = node).
        probs: per level, float ``[N, K_l]`` cluster probabilities.
        config: thresholds (default :class:`OutputCheckConfig`).
        encoder_embeddings: the transformer's own embeddings when the published rows also carry the structure
            part (``InferenceResult.encoder_embeddings``): the collapse check reads these, as a model collapses
            there; ``None``: ``embeddings``.
    """
    config = config or OutputCheckConfig()
    embeddings = np.asarray(embeddings)
    encoder = embeddings if encoder_embeddings is None else np.asarray(encoder_embeddings)
    return [check_finite_unit_norm(embeddings, config), check_clusters_used(probs, config),
            check_not_collapsed(encoder, config)]
