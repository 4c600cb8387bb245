"""Publish, ID matching: which published cluster ID each of the model's clusters gets.

Overlaps between the new and the previous version are aggregated in Spark to (cluster x cluster) counts; only
those reach the driver, where :mod:`hir_pipeline.publish.stable_ids` decides the published IDs and parents; the
decisions go back as a small table (:func:`stable_mapping`). :func:`previous_run_date` and
:func:`next_cluster_ids` read what is already published.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.publish.stable_ids import (
    Clusters,
    MatchConfig,
    StableHierarchy,
    orphans,
    overlap_matrix,
    published_tree,
    stabilize,
)

_MAPPING_DDL = "level int, model_cluster_id int, cluster_id int, parent_cluster_id int, match string"


# --- reading what is already published -----------------------------------------------------------


def previous_run_date(published: DataFrame | None, run_date: dt.date) -> dt.date | None:
    """Latest run date before ``run_date`` in a published table (None: nothing earlier)."""
    if published is None:
        return None
    return published.where(F.col("run_date") < F.lit(run_date)).agg(F.max("run_date")).first()[0]


def next_cluster_ids(profiles: DataFrame | None, run_date: dt.date, n_levels: int) -> list[int]:
    """Per level, the first cluster ID never published on an earlier run date (fresh IDs start there).

    Only earlier dates count, like every input of a run: re-running a date (even an old one, with later dates
    already published) mints the same IDs again, and forward in time an ID is never reused.
    """
    out = [0] * n_levels
    if profiles is None:
        return out
    rows = profiles.where(F.col("run_date") < F.lit(run_date)).groupBy("level").agg(F.max("cluster_id")).collect()
    for level, top in rows:
        if level < n_levels and top is not None:
            out[level] = int(top) + 1
    return out


# --- stable IDs ----------------------------------------------------------------------------------


@dataclass
class ClusterIds:
    """The published ID of every published model cluster.

    Attributes:
        table: ``level, model_cluster_id, cluster_id, parent_cluster_id, match`` (one row per published cluster).
        stable: the decisions: published IDs, parents and stability per level.
    """

    table: DataFrame
    stable: StableHierarchy


def _level_sizes(new_long: DataFrame) -> list[dict[int, int]]:
    sizes: dict[int, dict[int, int]] = defaultdict(dict)
    for level, cluster, n in new_long.groupBy("level", "model_cluster_id").count().collect():
        sizes[int(level)][int(cluster)] = int(n)
    return [sizes.get(lvl, {}) for lvl in range(max(sizes, default=-1) + 1)]


def stable_mapping(
    spark: SparkSession,
    new_long: DataFrame,
    hierarchy: DataFrame,
    previous_assignments: DataFrame | None,
    previous_profiles: DataFrame | None,
    next_ids: Sequence[int],
    config: MatchConfig,
) -> ClusterIds:
    """Decide the published ID and parent of every published model cluster.

    Args:
        spark: session for the small result table.
        new_long: :func:`long_assignments` of the new version.
        hierarchy: the new version's ``model_hierarchy`` rows (``level, cluster_id, parent_cluster_id,
            prototype``).
        previous_assignments: ``cluster_assignments`` of the previous publication (None: first version).
        previous_profiles: ``cluster_profiles`` of the previous publication (sizes, prototypes).
        next_ids: per level, the first never-published ID.
        config: matching thresholds.

    Returns:
        The decisions and their table (the table is persisted: it is joined by every published table).
    """
    hier = hierarchy.select("level", "cluster_id", "parent_cluster_id", "prototype").collect()
    n_levels = max(int(r["level"]) for r in hier) + 1 if hier else 0
    sizes = _level_sizes(new_long)
    if len(sizes) > n_levels:
        raise ValueError(f"model_outputs has {len(sizes)} levels but model_hierarchy only {n_levels}")
    sizes += [{} for _ in range(n_levels - len(sizes))]
    parents: list[dict[int, int | None]] = [{} for _ in range(n_levels)]
    protos: list[dict[int, np.ndarray]] = [{} for _ in range(n_levels)]
    for r in hier:
        lvl, c = int(r["level"]), int(r["cluster_id"])
        parents[lvl][c] = None if r["parent_cluster_id"] is None else int(r["parent_cluster_id"])
        protos[lvl][c] = np.asarray(r["prototype"], dtype=np.float64) if r["prototype"] is not None else None
    for lvl, level_sizes in enumerate(sizes):
        unknown = set(level_sizes) - set(parents[lvl])
        if unknown:
            raise ValueError(f"level {lvl}: clusters {sorted(unknown)[:5]} are assigned but not in model_hierarchy")
    lost = orphans(sizes, parents)
    keep, tree = published_tree(sizes, parents, _member_parents(new_long, lost) if any(lost) else None)
    new_levels = [
        Clusters(ids, [sizes[lvl].get(c, 0) for c in ids], _stack([protos[lvl].get(c) for c in ids]))
        for lvl, ids in enumerate(keep)
    ]
    old_levels: list[Clusters | None] = [None] * n_levels
    overlaps: list[np.ndarray | None] = [None] * n_levels
    if previous_assignments is not None and previous_profiles is not None:
        old_rows: dict[int, list] = defaultdict(list)
        for r in previous_profiles.select("level", "cluster_id", "size", "prototype").collect():
            old_rows[int(r["level"])].append(r)
        pairs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        prev = previous_assignments.select("entity_id", "level", F.col("cluster_id").alias("old_cluster_id"))
        shared = new_long.join(prev, ["entity_id", "level"]).groupBy("level", "model_cluster_id", "old_cluster_id")
        for lvl, new, old, n in shared.count().collect():
            pairs[int(lvl)].append((int(new), int(old), int(n)))
        for lvl in range(n_levels):
            rows = sorted(old_rows.get(lvl, []), key=lambda r: r["cluster_id"])
            if not rows:
                continue
            old_levels[lvl] = Clusters([r["cluster_id"] for r in rows], [r["size"] for r in rows],
                                       _stack([r["prototype"] for r in rows]))
            overlaps[lvl] = overlap_matrix(pairs.get(lvl, []), new_levels[lvl].ids, old_levels[lvl].ids)
    stable = stabilize(new_levels, tree, old_levels, overlaps, next_ids, config)
    rows = [
        (lvl, model_id, published, stable.parents[lvl][published], match.method[model_id])
        for lvl, match in enumerate(stable.levels)
        for model_id, published in sorted(match.mapping.items())
    ]
    return ClusterIds(spark.createDataFrame(rows, _MAPPING_DDL).persist(), stable)


def _member_parents(new_long: DataFrame, lost: Sequence[set[int]]) -> list[dict[int, int]]:
    """Per level, each cluster of ``lost`` -> the model cluster of the level above holding most of its members
    (the smallest ID on a tie), counted in Spark.

    Args:
        new_long: :func:`~spark_jobs.publish.transform.long_assignments` of the new version.
        lost: per level, the clusters whose model parent is empty (:func:`hir_pipeline.publish.stable_ids.orphans`).
    """
    wanted = [(lvl, c) for lvl, clusters in enumerate(lost) for c in sorted(clusters)]
    child = new_long.join(
        F.broadcast(new_long.sparkSession.createDataFrame(wanted, "level int, model_cluster_id int")),
        ["level", "model_cluster_id"]).select("entity_id", "level", F.col("model_cluster_id").alias("child"))
    up = new_long.select("entity_id", (F.col("level") + 1).alias("level"), F.col("model_cluster_id").alias("parent"))
    best: dict[tuple[int, int], tuple[int, int]] = {}
    for lvl, c, parent, n in child.join(up, ["entity_id", "level"]).groupBy("level", "child", "parent").count() \
            .collect():
        key, cand = (int(lvl), int(c)), (int(n), -int(parent))
        best[key] = max(best.get(key, cand), cand)
    out: list[dict[int, int]] = [{} for _ in lost]
    for (lvl, c), (_, neg_parent) in best.items():
        out[lvl][c] = -neg_parent
    return out


def _stack(vectors: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """``[K, D]`` prototypes, or None when any is missing or the dimensions disagree."""
    if not vectors or any(v is None for v in vectors) or len({len(v) for v in vectors}) != 1:
        return None
    return np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
