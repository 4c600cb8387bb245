"""Hand-made publications written through the real Spark writer (:func:`spark_jobs.publish.write_publication`).

Seven entities in a 3-D space (similar directions = similar interests), two coarse clusters, a tiny super-graph:
small enough to check every query answer by hand, and written exactly as a publish run writes them (the four
tables, then the ``publications`` manifest row), so readers are tested against the real layout.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession

from hir_pipeline.publish.stable_ids import StableHierarchy
from spark_jobs.delta_io import replace_run_date
from spark_jobs.publish import PublicationFrames, write_publication

D1, D2 = dt.date(2024, 6, 1), dt.date(2024, 6, 2)
#: entity -> (type, direction)
ENTITIES = {
    "u1": ("user", [1.0, 0.1, 0.0]),
    "p1": ("product", [1.0, 0.0, 0.0]),
    "p2": ("product", [0.9, 0.2, 0.0]),
    "a1": ("ad", [0.95, 0.05, 0.1]),
    "p3": ("product", [0.0, 1.0, 0.0]),
    "p4": ("product", [0.0, 0.0, 1.0]),
    "c1": ("campaign", [1.0, 0.05, 0.0]),
}
DDL = {
    "cluster_assignments": "entity_id string, entity_type string, level int, cluster_id int, confidence float, "
                           "model_version string, run_date date",
    "interest_supergraph": "level int, src_cluster int, dst_cluster int, weight double, n_edges long, "
                           "model_version string, run_date date",
    "cluster_profiles": "level int, cluster_id int, parent_cluster_id int, size long, label string, "
                        "top_members array<string>, model_version string, run_date date",
    "node_embeddings": "entity_id string, entity_type string, embedding array<float>, model_version string, "
                       "run_date date",
}


def unit(v) -> list[float]:
    v = np.asarray(v, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def frames(spark: SparkSession, day: dt.date, version: str, flip: bool = False) -> PublicationFrames:
    """The four tables of one publication; ``flip`` swaps the coarse clusters (a different model)."""
    ids = list(ENTITIES)
    coarse = {e: (0 if ENTITIES[e][1][0] > 0.5 else 1) for e in ids}
    if flip:
        coarse = {e: 1 - c for e, c in coarse.items()}
    rows = {
        "cluster_assignments": [(e, ENTITIES[e][0], 0, coarse[e], 0.5 + 0.05 * i, version, day)
                                for i, e in enumerate(ids)],
        "interest_supergraph": [(0, s, d, w, n, version, day)
                                for s, d, w, n in ((0, 0, 5.0, 4), (0, 1, 1.5, 2), (1, 0, 1.5, 2), (1, 1, 2.0, 2))],
        "cluster_profiles": [(0, k, None, sum(1 for c in coarse.values() if c == k), label, [top], version, day)
                             for k, label, top in ((0, f"first v{version}", "p1"), (1, f"other v{version}", "p3"))],
        "node_embeddings": [(e, ENTITIES[e][0], unit(ENTITIES[e][1]), version, day) for e in ids],
    }
    tables = {t: spark.createDataFrame(r, DDL[t]) for t, r in rows.items()}
    # write_publication reads only the tables and the model version; no cluster matching happened here
    return PublicationFrames(tables, StableHierarchy(levels=[]), version, None)


def publish(spark: SparkSession, lake: Path, day: dt.date, version: str, flip: bool = False
            ) -> dict[str, tuple[int, int]]:
    """One publish run's writes for ``day`` (the four tables, then the manifest); returns what it wrote."""
    return write_publication(spark, frames(spark, day, version, flip), lambda t: str(lake / t), day)


def write_edges(spark: SparkSession, lake: Path, day: dt.date, pairs: list[tuple[str, str]]) -> None:
    """A ``graph_edges`` snapshot of ``day`` (what ``recommend`` excludes as already seen)."""
    df = spark.createDataFrame([(s, d, 1.0, day) for s, d in pairs], "src_id string, dst_id string, weight double, "
                               "run_date date")
    replace_run_date(df, str(lake / "graph_edges"), day)
