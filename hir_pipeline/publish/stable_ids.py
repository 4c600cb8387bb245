"""Stable cluster IDs: the same interest keeps its published ID across nightly model versions.

A retrained model numbers its prototypes arbitrarily, so published IDs are decoupled from the model's
own cluster indices. Per level, the new version's clusters are matched one-to-one to the previous
version's published clusters by the Hungarian algorithm (Kuhn, 1955; ``scipy.optimize.linear_sum_assignment``)
on membership overlap (Jaccard of the member sets); clusters left over (no shared members, e.g. a level
whose members are all new) are matched on prototype cosine similarity; whatever is still unmatched gets a
fresh ID above every ID ever published at that level, so an ID is never reused for a different interest.
Parent links are relabelled with the parent level's mapping, so the published hierarchy stays consistent.
Only clusters that hold members at the run date are published (:func:`published_tree`); an empty cluster keeps its
prototype in the model's own tables and gets no published ID.
Stability of a level = share of the entities present in both versions that keep their published cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

#: How a new cluster got its published ID.
BY_OVERLAP, BY_PROTOTYPE, FRESH = "overlap", "prototype", "fresh"


@dataclass(frozen=True)
class MatchConfig:
    """Thresholds of the matching.

    Args:
        min_jaccard: a Hungarian pair on membership is kept only if the Jaccard index of the two member
            sets is at least this (a cluster sharing a handful of members with an old one is a new interest).
        min_cosine: a Hungarian pair on prototypes (fallback) is kept only if their cosine similarity is at
            least this.
    """

    min_jaccard: float = 0.1
    min_cosine: float = 0.7


@dataclass(frozen=True)
class Clusters:
    """The clusters of one level of one model version.

    Args:
        ids: int ``[K]`` cluster IDs (model indices for a new version, published IDs for the previous one).
        sizes: int ``[K]`` number of member entities of each cluster at this level.
        prototypes: float ``[K, D]`` prototype vectors, or None when unknown (no prototype fallback then).
    """

    ids: np.ndarray
    sizes: np.ndarray
    prototypes: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", np.asarray(self.ids, dtype=np.int64))
        object.__setattr__(self, "sizes", np.asarray(self.sizes, dtype=np.int64))
        if len(self.ids) != len(self.sizes):
            raise ValueError(f"{len(self.ids)} ids but {len(self.sizes)} sizes")
        if len(np.unique(self.ids)) != len(self.ids):
            raise ValueError("cluster ids must be unique within a level")
        if self.prototypes is not None:
            protos = np.asarray(self.prototypes, dtype=np.float64).reshape(len(self.ids), -1)
            object.__setattr__(self, "prototypes", protos)


@dataclass
class LevelMatch:
    """The published IDs of one level of the new version.

    Attributes:
        mapping: new cluster ID (model index) -> published ID.
        method: new cluster ID -> :data:`BY_OVERLAP`, :data:`BY_PROTOTYPE` or :data:`FRESH`.
        next_id: the first ID still unused at this level after this version.
        stability: share of entities present in both versions that keep their cluster; None without a
            previous version (or when the versions share no entity).
    """

    mapping: dict[int, int]
    method: dict[int, str]
    next_id: int
    stability: float | None = None


@dataclass
class StableHierarchy:
    """Published IDs of every level and the relabelled parent links.

    Attributes:
        levels: one :class:`LevelMatch` per level, coarsest first.
        parents: per level, published ID -> published parent ID (None at level 0).
    """

    levels: list[LevelMatch]
    parents: list[dict[int, int | None]] = field(default_factory=list)

    def stability(self) -> dict[int, float | None]:
        """Level -> stability."""
        return {lvl: m.stability for lvl, m in enumerate(self.levels)}


def overlap_matrix(pairs: Sequence[tuple[int, int, int]], new_ids: np.ndarray, old_ids: np.ndarray) -> np.ndarray:
    """Dense ``[K_new, K_old]`` count of shared members from sparse ``(new_id, old_id, count)`` triples.

    Args:
        pairs: shared-member counts; pairs naming an ID outside ``new_ids`` / ``old_ids`` are ignored.
        new_ids: row order (new version's cluster IDs).
        old_ids: column order (previous version's published IDs).
    """
    rows = {int(c): i for i, c in enumerate(new_ids)}
    cols = {int(c): j for j, c in enumerate(old_ids)}
    out = np.zeros((len(new_ids), len(old_ids)), dtype=np.int64)
    for new, old, count in pairs:
        i, j = rows.get(int(new)), cols.get(int(old))
        if i is not None and j is not None:
            out[i, j] += int(count)
    return out


def _jaccard(overlap: np.ndarray, new_sizes: np.ndarray, old_sizes: np.ndarray) -> np.ndarray:
    union = new_sizes[:, None] + old_sizes[None, :] - overlap
    return np.divide(overlap, union, out=np.zeros(overlap.shape, dtype=np.float64), where=union > 0)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def _hungarian(score: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """Maximum-score one-to-one pairs whose score reaches ``threshold``."""
    if score.size == 0:
        return []
    rows, cols = linear_sum_assignment(score, maximize=True)
    return [(int(i), int(j)) for i, j in zip(rows, cols, strict=True) if score[i, j] >= threshold and score[i, j] > 0]


def match_level(
    new: Clusters,
    old: Clusters | None,
    overlap: np.ndarray | None,
    next_id: int,
    config: MatchConfig | None = None,
) -> LevelMatch:
    """Published IDs for one level of the new version.

    Args:
        new: the new version's clusters (model indices).
        old: the previous version's published clusters, or None for the first version.
        overlap: ``[K_new, K_old]`` shared-member counts (rows/columns in ``new.ids`` / ``old.ids`` order);
            None or all zero when the versions share no entity.
        next_id: first ID never published at this level (fresh IDs are ``next_id, next_id + 1, ...``).
        config: matching thresholds.
    """
    config = config or MatchConfig()
    mapping: dict[int, int] = {}
    method: dict[int, str] = {}
    if old is not None and len(old.ids) and len(new.ids):
        overlap = np.zeros((len(new.ids), len(old.ids)), np.int64) if overlap is None else np.asarray(overlap)
        if overlap.shape != (len(new.ids), len(old.ids)):
            raise ValueError(f"overlap shape {overlap.shape} != ({len(new.ids)}, {len(old.ids)})")
        for i, j in _hungarian(_jaccard(overlap, new.sizes, old.sizes), config.min_jaccard):
            mapping[int(new.ids[i])], method[int(new.ids[i])] = int(old.ids[j]), BY_OVERLAP
        # Fallback for clusters without a membership match: prototypes, when both versions share a space.
        if new.prototypes is not None and old.prototypes is not None \
                and new.prototypes.shape[1] == old.prototypes.shape[1]:
            taken = set(mapping.values())
            free_new = [i for i, c in enumerate(new.ids) if int(c) not in mapping]
            free_old = [j for j, c in enumerate(old.ids) if int(c) not in taken]
            score = _cosine(new.prototypes[free_new], old.prototypes[free_old]) if free_new and free_old \
                else np.zeros((0, 0))
            for a, b in _hungarian(score, config.min_cosine):
                i, j = free_new[a], free_old[b]
                mapping[int(new.ids[i])], method[int(new.ids[i])] = int(old.ids[j]), BY_PROTOTYPE
        next_id = max(next_id, int(old.ids.max()) + 1)
    for c in sorted(int(c) for c in new.ids if int(c) not in mapping):
        mapping[c], method[c] = next_id, FRESH
        next_id += 1
    stab = stability(overlap, new.ids, old.ids, mapping) if old is not None and overlap is not None else None
    return LevelMatch(mapping=mapping, method=method, next_id=next_id, stability=stab)


def stability(
    overlap: np.ndarray, new_ids: np.ndarray, old_ids: np.ndarray, mapping: Mapping[int, int]
) -> float | None:
    """Share of shared entities whose published cluster is unchanged (None if no entity is shared).

    Args:
        overlap: ``[K_new, K_old]`` shared-member counts.
        new_ids: row IDs (new version's model indices).
        old_ids: column IDs (previous published IDs).
        mapping: new model index -> published ID.
    """
    total = int(np.asarray(overlap).sum())
    if total == 0:
        return None
    col = {int(c): j for j, c in enumerate(old_ids)}
    kept = sum(int(overlap[i, col[mapping[int(c)]]]) for i, c in enumerate(new_ids)
               if int(c) in mapping and mapping[int(c)] in col)
    return kept / total


def orphans(sizes: Sequence[Mapping[int, int]], parents: Sequence[Mapping[int, int | None]]) -> list[set[int]]:
    """Per level, the clusters with members whose model parent has none at its own level.

    Top-1 assignments are made per level, so a parent prototype can be empty while a child holds members.

    Args:
        sizes: per level, model cluster -> number of members (clusters absent or 0 are empty).
        parents: per level, model cluster -> model parent at the level above (None at level 0).
    """
    out: list[set[int]] = [set() for _ in sizes]
    for lvl in range(1, len(sizes)):
        for c, n in sizes[lvl].items():
            parent = parents[lvl].get(c)
            if n > 0 and (parent is None or sizes[lvl - 1].get(parent, 0) <= 0):
                out[lvl].add(int(c))
    return out


def published_tree(
    sizes: Sequence[Mapping[int, int]],
    parents: Sequence[Mapping[int, int | None]],
    member_parents: Sequence[Mapping[int, int]] | None = None,
) -> tuple[list[list[int]], list[dict[int, int | None]]]:
    """Which model clusters to publish per level, and their parents: only clusters that hold members.

    A published cluster's parent is its model parent when that holds members too; otherwise (an orphan,
    :func:`orphans`) the cluster of the level above that holds most of its members, so every published parent is
    itself published. Empty clusters keep their prototypes in ``model_hierarchy`` but get no published ID.

    Args:
        sizes: per level, model cluster -> number of members (clusters absent or 0 are empty).
        parents: per level, model cluster -> model parent at the level above (None at level 0).
        member_parents: per level, orphan -> the model cluster of the level above holding most of its members
            (at least every orphan).

    Returns:
        ``(keep, tree)``: per level the published model clusters (sorted), and per level published model cluster
        -> its parent (None at level 0).
    """
    keep = [sorted(int(c) for c, n in level.items() if n > 0) for level in sizes]
    lost = orphans(sizes, parents)
    tree: list[dict[int, int | None]] = []
    for lvl, clusters in enumerate(keep):
        level_tree: dict[int, int | None] = {}
        for c in clusters:
            if lvl == 0:
                level_tree[c] = None
            elif c in lost[lvl]:
                found = (member_parents[lvl] if member_parents and lvl < len(member_parents) else {}).get(c)
                if found is None:
                    raise ValueError(f"cluster {c} of level {lvl}: its parent is empty and no member parent is given")
                level_tree[c] = int(found)
            else:
                level_tree[c] = parents[lvl].get(c)
        tree.append(level_tree)
    return keep, tree


def stabilize(
    new_levels: Sequence[Clusters],
    model_parents: Sequence[Mapping[int, int | None]],
    old_levels: Sequence[Clusters | None] | None = None,
    overlaps: Sequence[np.ndarray | None] | None = None,
    next_ids: Sequence[int] | None = None,
    config: MatchConfig | None = None,
) -> StableHierarchy:
    """Published IDs of every level, and the published parent map.

    Args:
        new_levels: per level (coarsest first) the new version's clusters to publish.
        model_parents: per level, model cluster -> model parent at the level above (None at level 0).
        old_levels: per level the previous version's published clusters (None: first version).
        overlaps: per level ``[K_new, K_old]`` shared-member counts.
        next_ids: per level the first ID never published before (default 0).
        config: matching thresholds.
    """
    n = len(new_levels)
    old_levels = list(old_levels) if old_levels is not None else [None] * n
    overlaps = list(overlaps) if overlaps is not None else [None] * n
    next_ids = list(next_ids) if next_ids is not None else [0] * n
    old_levels += [None] * (n - len(old_levels))
    overlaps += [None] * (n - len(overlaps))
    next_ids += [0] * (n - len(next_ids))
    levels = [match_level(new_levels[lvl], old_levels[lvl], overlaps[lvl], next_ids[lvl], config) for lvl in range(n)]
    parents: list[dict[int, int | None]] = []
    for lvl, match in enumerate(levels):
        up = levels[lvl - 1].mapping if lvl else {}
        level_parents: dict[int, int | None] = {}
        for model_id, published in match.mapping.items():
            model_parent = model_parents[lvl].get(model_id) if lvl else None
            if lvl and (model_parent is None or model_parent not in up):
                raise ValueError(f"level {lvl} cluster {model_id}: parent {model_parent} is not published")
            level_parents[published] = up[model_parent] if lvl else None
        parents.append(level_parents)
    return StableHierarchy(levels=levels, parents=parents)
