"""numpy model results -> the ``model_outputs`` and ``model_hierarchy`` DataFrames (schemas in contracts.py).

The arrays come from the driver (the model ran there), so the frames are built from Arrow tables in one
transfer: ``N * (4 * out_dim + 8 * levels)`` bytes of vectors plus the ids, no per-row Python objects.
:func:`write_model_outputs` replaces the run date's rows of both tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import MODEL_HIERARCHY_DDL, MODEL_OUTPUTS_DDL
from spark_jobs.arrow_columns import list_column
from spark_jobs.delta_io import latest_version, replace_run_date

#: The model's internal tables, one snapshot per run date.
OUTPUT_TABLES = ("model_outputs", "model_hierarchy")


def _conform(spark: SparkSession, table: pa.Table, ddl: str) -> DataFrame:
    """The Arrow table as a DataFrame with exactly the column names, order and types of ``ddl``."""
    schema = spark.createDataFrame([], ddl).schema
    df = spark.createDataFrame(table)
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def top_clusters(probs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(cluster_ids int32 [N, L], confidences float32 [N, L])``: the most probable cluster per level and its
    probability (levels coarsest first).

    Args:
        probs: per level ``[N, K_l]`` cluster probabilities.
    """
    ids = np.stack([p.argmax(axis=1) for p in probs], axis=1).astype(np.int32)
    conf = np.stack([p[np.arange(len(p)), p.argmax(axis=1)] for p in probs], axis=1).astype(np.float32)
    return ids, conf


def model_outputs_frame(
    spark: SparkSession,
    entity_ids: Sequence[str],
    entity_types: Sequence[str],
    embeddings: np.ndarray,
    probs: Sequence[np.ndarray],
    has_view: np.ndarray,
    model_version: str,
    run_date: dt.date,
) -> DataFrame:
    """One ``model_outputs`` row per node.

    Args:
        spark: the session.
        entity_ids, entity_types: per node, in node order.
        embeddings: float ``[N, D]``; L2-normalised here (again) so the contract holds whatever the caller did.
        probs: per level ``[N, K_l]`` cluster probabilities.
        has_view: bool ``[N]``.
        model_version: the registered model version.
        run_date: the run date.
    """
    emb = np.asarray(embeddings, dtype=np.float32)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    ids, conf = top_clusters(probs)
    n = len(entity_ids)
    table = pa.table({
        "entity_id": pa.array(list(entity_ids), type=pa.string()),
        "entity_type": pa.array(list(entity_types), type=pa.string()),
        "embedding": list_column(emb, pa.float32()),
        "cluster_ids": list_column(ids, pa.int32()),
        "confidences": list_column(conf, pa.float32()),
        "has_view": pa.array(np.asarray(has_view, dtype=bool)),
        "model_version": pa.array([model_version] * n, type=pa.string()),
        "run_date": pa.array([run_date] * n, type=pa.date32()),
    })
    return _conform(spark, table, MODEL_OUTPUTS_DDL)


def model_hierarchy_frame(
    spark: SparkSession,
    prototypes: Sequence[np.ndarray],
    parent_maps: Sequence[np.ndarray],
    model_version: str,
    run_date: dt.date,
) -> DataFrame:
    """One ``model_hierarchy`` row per prototype.

    Args:
        spark: the session.
        prototypes: per level ``[K_l, D]`` prototype vectors (coarsest first).
        parent_maps: per level ``l >= 1``, ``[K_l]`` parent cluster at level ``l - 1``.
        model_version: the registered model version.
        run_date: the run date.
    """
    if len(parent_maps) != len(prototypes) - 1:
        raise ValueError(f"{len(parent_maps)} parent maps for {len(prototypes)} levels")
    levels, clusters, parents, vectors = [], [], [], []
    for lvl, protos in enumerate(prototypes):
        k = len(protos)
        levels.append(np.full(k, lvl, dtype=np.int32))
        clusters.append(np.arange(k, dtype=np.int32))
        parents.append([None] * k if lvl == 0 else np.asarray(parent_maps[lvl - 1], dtype=np.int32).tolist())
        vectors.append(np.asarray(protos, dtype=np.float32))
    n = sum(len(c) for c in clusters)
    table = pa.table({
        "level": pa.array(np.concatenate(levels)),
        "cluster_id": pa.array(np.concatenate(clusters)),
        "parent_cluster_id": pa.array([p for part in parents for p in part], type=pa.int32()),
        "prototype": list_column(np.concatenate(vectors), pa.float32()),
        "model_version": pa.array([model_version] * n, type=pa.string()),
        "run_date": pa.array([run_date] * n, type=pa.date32()),
    })
    return _conform(spark, table, MODEL_HIERARCHY_DDL)


def write_model_outputs(spark: SparkSession, path: Callable[[str], str], day: dt.date, outputs: DataFrame,
                        hierarchy: DataFrame) -> dict[str, int]:
    """Replace the ``day`` rows of ``model_outputs`` and ``model_hierarchy`` (one Delta commit each).

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        day: the run date.
        outputs: :func:`model_outputs_frame`.
        hierarchy: :func:`model_hierarchy_frame`.

    Returns:
        table -> the Delta version written.
    """
    versions = {}
    for table, df in zip(OUTPUT_TABLES, (outputs, hierarchy), strict=True):
        replace_run_date(df, path(table), day)
        versions[table] = latest_version(spark, path(table))
    return versions


def relabel_model_version(spark: SparkSession, path: Callable[[str], str], day: dt.date, written: str,
                          registered: str) -> dict[str, int]:
    """Give the run date's rows written as model version ``written`` the version the registry assigned.

    The outputs are written before the model is registered, under the version the registry was expected to
    assign; if another registration took that number in between, this one Delta ``UPDATE`` per table corrects
    it. Returns table -> the Delta version written.
    """
    from delta.tables import DeltaTable

    versions = {}
    for table in OUTPUT_TABLES:
        DeltaTable.forPath(spark, path(table)).update(
            (F.col("run_date") == F.lit(day)) & (F.col("model_version") == F.lit(written)),
            {"model_version": F.lit(registered)})
        versions[table] = latest_version(spark, path(table))
    return versions
