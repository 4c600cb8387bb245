"""Exact and coarse-to-fine (hierarchical) top-k retrieval by dot product (numpy only).

*Exact* retrieval scores every rankable item against the user vector. *Hierarchical* retrieval (IVF-style, with
the model's own interest clusters as the inverted lists) scores only a candidate set:

1. the centroid of each cluster of the *routing level* is the mean embedding of its member items (the items of
   the catalogue being ranked: :func:`build_index`'s ``members``);
2. the user is routed to ``clusters`` clusters: its own assigned cluster first (when given), then the clusters
   whose centroids have the highest dot product with the user vector; clusters passed as ``extra_clusters``
   (e.g. the strongest ``interest_supergraph`` neighbours of the user's cluster) are probed on top, and further
   clusters, in centroid order, only while fewer than ``k`` rankable candidates were found;
3. the candidates are the rankable members of the probed clusters, capped at ``candidates`` items (and at
   ``candidate_share`` of the rankable items, never below ``k``): when the cap bites, the candidates whose
   *fine-level* cluster (the finest level, when it is below the routing level; else the routing level itself)
   has the highest centroid score with the user are kept;
4. the candidates are ranked exactly by the dot product of the embeddings.

An item's dot product computed in step 4 is an item *scored*; centroid scores (steps 2 and 3, one per cluster,
not per item) are not counted. Exact retrieval scores every rankable item.

:func:`hierarchical_top_k` is the one implementation: the query API (``hir query recommend --retrieval
hierarchical``), the evaluation report (``hierarchical_*`` metrics of HIR) and
``benchmarks/hierarchical_retrieval.py`` call it on in-memory arrays. Ties rank by item index, as
:func:`hir_pipeline.evaluation.scoring.top_k` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

#: Retrieval modes of :func:`hir_pipeline.query.api.recommend`.
Retrieval = Literal["exact", "hierarchical"]
RETRIEVALS: tuple[str, ...] = get_args(Retrieval)


@dataclass(frozen=True)
class HierarchicalSettings:
    """Settings of hierarchical retrieval.

    Args:
        level: routing level (0 = coarsest, the default: its few broad clusters route best at a fifth of the items
            scored, docs/results.md); ``None``: the middle level, ``(levels - 1) // 2``.
        clusters: clusters probed at the routing level per query (the user's own cluster counts as one).
        candidates: most items scored per query (0: no cap by count).
        candidate_share: most items scored per query as a share of the rankable items (0: no cap by share);
            with ``candidates`` as well, the smaller cap applies; a cap is never below ``k``.
        neighbours: strongest ``interest_supergraph`` neighbours of the user's own cluster probed on top of
            ``clusters`` (the query API reads them from the publication; the evaluation, which has no super-graph,
            probes none).
    """

    level: int | None = 0
    clusters: int = 4
    candidates: int = 0
    candidate_share: float = 0.2
    neighbours: int = 0

    def __post_init__(self) -> None:
        if self.level is not None and self.level < 0:
            raise ValueError(f"level must be >= 0, got {self.level}")
        if self.clusters < 1:
            raise ValueError(f"clusters must be >= 1, got {self.clusters}")
        if self.candidates < 0:
            raise ValueError(f"candidates must be >= 0, got {self.candidates}")
        if not 0.0 <= self.candidate_share <= 1.0:
            raise ValueError(f"candidate_share must be in [0, 1], got {self.candidate_share}")
        if self.neighbours < 0:
            raise ValueError(f"neighbours must be >= 0, got {self.neighbours}")

    def routing_level(self, levels: int) -> int:
        """The routing level of a hierarchy of ``levels`` levels (an explicit level must exist)."""
        if levels < 1:
            raise ValueError("no cluster levels to route through")
        level = (levels - 1) // 2 if self.level is None else self.level
        if level >= levels:
            raise ValueError(f"routing level {level} does not exist (levels 0..{levels - 1})")
        return level

    def cap(self, rankable: int, k: int) -> int:
        """Most items scored for a query with ``rankable`` rankable items and cut-off ``k``."""
        caps = [rankable]
        if self.candidates:
            caps.append(self.candidates)
        if self.candidate_share:
            caps.append(math.floor(self.candidate_share * rankable))
        return max(min(caps), min(k, rankable))


@dataclass(frozen=True)
class Retrieved:
    """Top-k lists of a batch of queries.

    Args:
        items: int ``[B, k]`` item rows, best first (``-1`` pads a list shorter than ``k``).
        scores: float64 ``[B, k]`` their dot products (NaN where padded).
        scored: int ``[B]`` items whose dot product was computed per query.
        rankable: int ``[B]`` items each query could rank (allowed, with an embedding row).
        probed: int ``[B]`` clusters probed per query (0 for exact retrieval).
    """

    items: np.ndarray
    scores: np.ndarray
    scored: np.ndarray
    rankable: np.ndarray
    probed: np.ndarray

    @property
    def scored_share(self) -> np.ndarray:
        """float ``[B]``: scored / rankable per query (1.0 where nothing was rankable)."""
        return np.where(self.rankable > 0, self.scored / np.maximum(self.rankable, 1), 1.0)


@dataclass(frozen=True)
class ClusterIndex:
    """Items grouped by their cluster at the routing level, with the centroids retrieval routes by.

    Args:
        level: the routing level.
        levels: levels of the hierarchy it was built from.
        route: int ``[I]`` dense routing cluster of each item (``-1``: none, never a candidate).
        route_ids: int ``[C]`` the original cluster ID of each dense routing cluster.
        centroids: float32 ``[C, d]`` mean member embedding of each routing cluster.
        order: int ``[I']`` item rows with a routing cluster, grouped by cluster (ascending rows within each).
        starts: int ``[C + 1]`` where each cluster's members begin in ``order``.
        fine: int ``[I]`` dense fine-level cluster of each item (``-1``: none), ranking candidates under a cap.
        fine_centroids: float32 ``[F, d]`` mean member embedding of each fine cluster.
    """

    level: int
    levels: int
    route: np.ndarray
    route_ids: np.ndarray
    centroids: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    fine: np.ndarray
    fine_centroids: np.ndarray

    def dense(self, cluster_ids: np.ndarray) -> np.ndarray:
        """Dense routing clusters of original cluster IDs (``-1`` for an ID that no item has)."""
        ids = np.atleast_1d(np.asarray(cluster_ids, dtype=np.int64))
        if not len(self.route_ids):
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.route_ids, ids), 0, len(self.route_ids) - 1)
        return np.where(self.route_ids[pos] == ids, pos, -1)


def _dense_centroids(items: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cluster ids, dense cluster of each item or -1, mean member vector of each cluster)``."""
    clusters = np.asarray(clusters, dtype=np.int64)
    has = clusters >= 0
    ids, inverse = np.unique(clusters[has], return_inverse=True)
    dense = np.full(len(clusters), -1, dtype=np.int64)
    dense[has] = inverse
    sums = np.zeros((len(ids), items.shape[1]), dtype=np.float64)
    np.add.at(sums, inverse, items[has])
    counts = np.bincount(inverse, minlength=len(ids)).astype(np.float64)
    return ids, dense, (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)


def build_index(items: np.ndarray, item_clusters: Sequence[np.ndarray], level: int,
                members: np.ndarray | None = None) -> ClusterIndex:
    """The routing index of ``items`` at ``level``.

    Args:
        items: float ``[I, d]`` item embeddings.
        item_clusters: per level (coarsest first), int ``[I]`` cluster ID of each item (``-1``: none); IDs are any
            non-negative integers (published, stable IDs included).
        level: the routing level; the finest level (when finer) ranks candidates under a cap.
        members: bool ``[I]``: the items the index holds (the catalogue being ranked, e.g. an evaluation split's
            candidates); the others are in no cluster, so a centroid averages only items that can be returned
            (``None``: every item). Why: published rows of different item populations differ in length (a cold
            item's structure row is short), and a centroid dominated by items that cannot be returned routes badly.
    """
    items = np.asarray(items, dtype=np.float32)
    if not 0 <= level < len(item_clusters):
        raise ValueError(f"routing level {level} does not exist (levels 0..{len(item_clusters) - 1})")
    for lvl, c in enumerate(item_clusters):
        if len(c) != len(items):
            raise ValueError(f"level {lvl} has {len(c)} cluster ids for {len(items)} items")
    if members is not None:
        keep = np.asarray(members, dtype=bool)
        item_clusters = [np.where(keep, np.asarray(c, dtype=np.int64), -1) for c in item_clusters]
    route_ids, route, centroids = _dense_centroids(items, item_clusters[level])
    fine_level = len(item_clusters) - 1
    if fine_level > level:
        _, fine, fine_centroids = _dense_centroids(items, item_clusters[fine_level])
    else:
        fine, fine_centroids = route, centroids
    rows = np.flatnonzero(route >= 0)
    order = rows[np.argsort(route[rows], kind="stable")]
    starts = np.searchsorted(route[order], np.arange(len(route_ids) + 1))
    return ClusterIndex(level, len(item_clusters), route, route_ids, centroids, order, starts, fine, fine_centroids)


def _allowed_row(allowed: np.ndarray | None, b: int, n_items: int) -> np.ndarray:
    if allowed is None:
        return np.ones(n_items, dtype=bool)
    allowed = np.asarray(allowed, dtype=bool)
    return allowed if allowed.ndim == 1 else allowed[b]


def _rank(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``rows`` by ``scores`` (descending, ties by row), padded with ``-1`` / NaN."""
    out_rows = np.full(k, -1, dtype=np.int64)
    out_scores = np.full(k, np.nan)
    if not len(rows) or k <= 0:
        return out_rows, out_scores
    s = scores.astype(np.float64)
    if len(rows) > k:  # every row tied with the k-th score stays in, so ties break by row index
        kth = np.partition(-s, k - 1)[k - 1]
        keep = -s <= kth
        rows, s = rows[keep], s[keep]
    order = np.lexsort((rows, -s))[:k]
    out_rows[:len(order)] = rows[order]
    out_scores[:len(order)] = s[order]
    return out_rows, out_scores


def exact_top_k(users: np.ndarray, items: np.ndarray, k: int, allowed: np.ndarray | None = None) -> Retrieved:
    """Brute force: every rankable item scored by its dot product with each user vector.

    Args:
        users: float ``[B, d]`` user vectors.
        items: float ``[I, d]`` item vectors.
        k: list length.
        allowed: bool ``[I]`` or ``[B, I]`` items that may be ranked (``None``: all).
    """
    users, items = np.asarray(users, dtype=np.float32), np.asarray(items, dtype=np.float32)
    out = [np.full((len(users), k), -1, dtype=np.int64), np.full((len(users), k), np.nan)]
    rankable = np.zeros(len(users), dtype=np.int64)
    for b in range(len(users)):
        rows = np.flatnonzero(_allowed_row(allowed, b, len(items)))
        rankable[b] = len(rows)
        out[0][b], out[1][b] = _rank(rows, items[rows] @ users[b], k)
    return Retrieved(out[0], out[1], rankable.copy(), rankable, np.zeros(len(users), dtype=np.int64))


def hierarchical_top_k(
    users: np.ndarray,
    items: np.ndarray,
    item_clusters: Sequence[np.ndarray] | ClusterIndex,
    k: int,
    settings: HierarchicalSettings | None = None,
    *,
    allowed: np.ndarray | None = None,
    user_clusters: np.ndarray | None = None,
    extra_clusters: Sequence[Sequence[int]] | None = None,
) -> Retrieved:
    """Coarse-to-fine top-k lists (the module docstring gives the steps).

    Args:
        users: float ``[B, d]`` user vectors.
        items: float ``[I, d]`` item vectors (the same space; scored by dot product).
        item_clusters: per level (coarsest first), int ``[I]`` cluster ID of each item (``-1``: none; such an item
            is never a candidate); or a :func:`build_index` of ``items`` at the settings' routing level, built once
            and reused across calls.
        k: list length.
        settings: routing level, clusters probed and candidate caps (default :class:`HierarchicalSettings`).
        allowed: bool ``[I]`` or ``[B, I]`` items that may be ranked (``None``: all); a disallowed item is neither a
            candidate nor counted as rankable.
        user_clusters: int ``[B]`` each user's own cluster ID at the routing level (``-1``: none), probed first;
            ``None``: routing by centroids alone.
        extra_clusters: per user, cluster IDs at the routing level probed on top of ``clusters`` (e.g. the
            ``settings.neighbours`` strongest super-graph neighbours of the user's cluster); unknown IDs are ignored.
    """
    settings = settings or HierarchicalSettings()
    users, items = np.asarray(users, dtype=np.float32), np.asarray(items, dtype=np.float32)
    if isinstance(item_clusters, ClusterIndex):
        index = item_clusters
        if settings.routing_level(index.levels) != index.level:
            raise ValueError(f"the index routes at level {index.level}, the settings at level "
                             f"{settings.routing_level(index.levels)}")
    else:
        index = build_index(items, item_clusters, settings.routing_level(len(item_clusters)))
    n_clusters = len(index.route_ids)
    own = index.dense(np.asarray(user_clusters)) if user_clusters is not None else np.full(len(users), -1)
    route_scores = users @ index.centroids.T if n_clusters else np.zeros((len(users), 0), np.float32)
    fine_scores = users @ index.fine_centroids.T if len(index.fine_centroids) else route_scores
    out = [np.full((len(users), k), -1, dtype=np.int64), np.full((len(users), k), np.nan)]
    scored, rankable, probed = (np.zeros(len(users), dtype=np.int64) for _ in range(3))
    for b in range(len(users)):
        mask = _allowed_row(allowed, b, len(items))
        rankable[b] = int(mask.sum())
        if not n_clusters or not rankable[b]:
            continue
        # cluster order: own cluster, then centroid score (ties by dense id); extra clusters after the first slots
        by_score = np.lexsort((np.arange(n_clusters), -route_scores[b].astype(np.float64)))
        first = [int(own[b])] if own[b] >= 0 else []
        seq = list(dict.fromkeys(first + by_score.tolist()))
        extra = index.dense(np.asarray(extra_clusters[b], dtype=np.int64)) if extra_clusters is not None \
            and len(extra_clusters[b]) else np.zeros(0, dtype=np.int64)
        head = list(dict.fromkeys(seq[:settings.clusters] + [int(c) for c in extra if c >= 0]))
        taken = set(head)
        tail = [c for c in seq if c not in taken]
        parts, found = [], 0
        for i, c in enumerate(head + tail):
            if i >= len(head) and found >= k:
                break
            members = index.order[index.starts[c]:index.starts[c + 1]]
            members = members[mask[members]]
            parts.append(members)
            found += len(members)
            probed[b] = i + 1
        cand = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        cap = settings.cap(rankable[b], k)
        if len(cand) > cap:  # keep the candidates of the best fine clusters (ties: probe order, then row)
            fine = index.fine[cand]
            fs = np.where(fine >= 0, fine_scores[b][np.maximum(fine, 0)].astype(np.float64), -np.inf)
            cand = cand[np.lexsort((cand, np.arange(len(cand)), -fs))[:cap]]
        scored[b] = len(cand)
        out[0][b], out[1][b] = _rank(cand, items[cand] @ users[b], k)
    return Retrieved(out[0], out[1], scored, rankable, probed)
