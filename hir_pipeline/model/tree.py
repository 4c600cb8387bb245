"""The published cluster tree, read off the nodes' assignments (NumPy only).

Kept free of torch so that evaluation (imported by the Dagster code location) can compute parent agreement
without loading the model stack; ``hir_pipeline.model.hierarchy`` documents the tree design.
"""

from __future__ import annotations

import numpy as np


def majority_parents(fine: np.ndarray, coarse: np.ndarray, num_fine: int,
                     fallback: np.ndarray | None = None) -> np.ndarray:
    """Parent of each fine cluster: the coarse cluster most of its members fall into (ties: the lowest id).

    Args:
        fine: int ``[N]`` fine cluster of each node.
        coarse: int ``[N]`` coarse cluster of each node (the level above).
        num_fine: number of fine clusters ``K``.
        fallback: int ``[K]`` parent of a fine cluster without members (e.g. the most similar coarse prototype);
            default 0.

    Returns:
        int64 ``[K]``.
    """
    fine = np.asarray(fine, dtype=np.int64)
    coarse = np.asarray(coarse, dtype=np.int64)
    out = np.zeros(num_fine, dtype=np.int64) if fallback is None else np.asarray(fallback, dtype=np.int64).copy()
    if fine.size == 0:
        return out
    counts = np.zeros((num_fine, int(coarse.max()) + 1), dtype=np.int64)
    np.add.at(counts, (fine, coarse), 1)
    has = counts.sum(1) > 0
    out[has] = counts[has].argmax(1)
    return out
