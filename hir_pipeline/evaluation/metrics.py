"""Ranking and clustering metrics.

Ranking: for one user with held-out target set ``T`` and a ranked list ``R`` (train items excluded by the
ranker), ``Recall@K = |R[:K] & T| / |T|`` and ``NDCG@K = DCG / IDCG`` with binary gains,
``DCG = sum_{r < K, R[r] in T} 1 / log2(r + 2)`` and ``IDCG`` the DCG of a perfect list of
``min(K, |T|)`` hits (He et al., "LightGCN", SIGIR 2020, use the same definitions). Both are averaged over
users with at least one target.

Clustering: normalised mutual information with the arithmetic-mean normalisation
``NMI = I(U; V) / ((H(U) + H(V)) / 2)``, by scikit-learn (``normalized_mutual_info_score``, whose default this is);
cluster usage and sharpness (mean top probability) per level; and the tree of the hierarchy: a fine cluster's
parent is the coarse cluster most of its members fall into (:func:`hir_pipeline.model.tree.majority_parents`),
and the agreement is the share of nodes whose coarse cluster is their fine cluster's parent (:func:`parent_agreement`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))


def hits_matrix(top_k: np.ndarray, targets: Sequence[set[int]] | sp.csr_matrix) -> np.ndarray:
    """Bool ``[B, K]``: whether the item at each rank is a target of that row's user.

    Args:
        top_k: int ``[B, K]`` ranked item indices (``-1`` = no item at that rank).
        targets: per row, the target item set, or a ``[B, I]`` CSR whose non-zeros are the targets.
    """
    hits = np.zeros(top_k.shape, dtype=bool)
    for b in range(top_k.shape[0]):
        if sp.issparse(targets):
            row = targets.indices[targets.indptr[b]:targets.indptr[b + 1]]
        else:
            row = np.fromiter(targets[b], dtype=np.int64)
        hits[b] = np.isin(top_k[b], row) & (top_k[b] >= 0)
    return hits


def recall_at_k(hits: np.ndarray, n_targets: np.ndarray) -> np.ndarray:
    """Per-user Recall@K from a ``[B, K]`` hit matrix and the number of targets of each user (``> 0``)."""
    return hits.sum(1) / np.asarray(n_targets, dtype=np.float64)


def ndcg_at_k(hits: np.ndarray, n_targets: np.ndarray) -> np.ndarray:
    """Per-user NDCG@K (binary relevance) from a ``[B, K]`` hit matrix and per-user target counts (``> 0``)."""
    k = hits.shape[1]
    disc = _discounts(k)
    dcg = (hits * disc).sum(1)
    ideal = np.cumsum(disc)[np.minimum(np.asarray(n_targets), k) - 1]
    return dcg / ideal


def entropy(counts: np.ndarray) -> float:
    """Shannon entropy (nats) of a count vector."""
    p = np.asarray(counts, dtype=np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


def nmi(labels_true: Sequence, labels_pred: Sequence) -> float:
    """Normalised mutual information (arithmetic normalisation) of two labelings of the same items.

    Computed by :func:`sklearn.metrics.normalized_mutual_info_score` with ``average_method="arithmetic"``
    (named explicitly: it is the normalisation this module documents).

    Args:
        labels_true: reference labels (any hashable values, e.g. planted interest ids).
        labels_pred: predicted labels, same length.

    Returns:
        A value in ``[0, 1]``; 1.0 when both labelings are identical up to renaming (including the case where
        both put everything in one cluster).

    Raises:
        ValueError: the labelings are not 1-D, differ in length, or are empty (scikit-learn would score 1.0).
    """
    from sklearn.metrics import normalized_mutual_info_score  # imported on use: sklearn is slow to import

    if len(labels_true) == 0 and len(labels_pred) == 0:
        raise ValueError("no labels")
    return float(normalized_mutual_info_score(labels_true, labels_pred, average_method="arithmetic"))


def cluster_usage(assignments: np.ndarray, num_clusters: int) -> dict[str, float]:
    """How a level's prototypes are used by hard assignments.

    Args:
        assignments: int ``[N]`` cluster index of each node (argmax of its probabilities).
        num_clusters: prototypes at that level.

    Returns:
        ``clusters_used`` (distinct clusters with a member), ``used_share`` (that over ``num_clusters``),
        ``usage_perplexity`` (``exp`` of the entropy of cluster sizes: the effective number of clusters) and
        ``largest_share`` (fraction of nodes in the biggest cluster).
    """
    counts = np.bincount(np.asarray(assignments, dtype=np.int64), minlength=num_clusters)
    total = max(int(counts.sum()), 1)
    used = int((counts > 0).sum())
    return {
        "clusters_used": float(used),
        "used_share": used / num_clusters,
        "usage_perplexity": float(np.exp(entropy(counts))) if counts.sum() else 0.0,
        "largest_share": float(counts.max() / total) if counts.size else 0.0,
    }


def mean_top_probability(probs: np.ndarray) -> float:
    """Mean over nodes of the largest cluster probability (``1 / K`` = uniform, 1 = hard assignments).

    Args:
        probs: float ``[N, K]`` cluster probabilities of one level.
    """
    p = np.asarray(probs, dtype=np.float64)
    return float(p.max(axis=1).mean()) if p.size else float("nan")


def parent_agreement(fine: np.ndarray, coarse: np.ndarray, parents: np.ndarray) -> float:
    """Share of nodes whose coarse cluster is the parent of their fine cluster.

    Args:
        fine: int ``[N]`` fine cluster of each node.
        coarse: int ``[N]`` coarse cluster of each node.
        parents: int ``[K]`` parent of each fine cluster (:func:`hir_pipeline.model.tree.majority_parents`).
    """
    fine = np.asarray(fine, dtype=np.int64)
    return float((np.asarray(parents)[fine] == np.asarray(coarse)).mean()) if fine.size else float("nan")
