"""Spark -> numpy for the evaluation: the split's pairs and item content, on the driver.

Only what the evaluation reads is collected, through Arrow: ``(user, item, weight)`` training pairs (one row per
pair), target pairs and one content vector per item (the planted hierarchy of a synthetic source is read by
:meth:`spark_jobs.ingestion.sources.spec.SourceSpec.ground_truth`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVENT_DATE_COLUMN
from hir_pipeline.evaluation.data import EvalData
from spark_jobs.evaluation.split import EvaluationSplit


def training_pairs(train_events: DataFrame, funnel: Sequence[str], stage_weights: Sequence[float]) -> DataFrame:
    """``user_id, entity_id, weight``: the summed stage weight of a user's training events on an item.

    Undecayed on purpose: every method sees the same plain funnel-weighted matrix (HIR gets its own decayed
    graph from the same events).
    """
    if len(funnel) != len(stage_weights):
        raise ValueError(f"{len(stage_weights)} stage weights for a funnel of {len(funnel)} stages")
    stage = F.array_position(F.array(*[F.lit(s) for s in funnel]), F.col("event_type")).cast("int")
    weight = F.element_at(F.array(*[F.lit(float(w)) for w in stage_weights]), stage)
    return (train_events.where(stage > 0).groupBy("user_id", "entity_id").agg(F.sum(weight).alias("weight"))
            .where(F.col("weight") > 0))


def item_universe(events: DataFrame, run_date: dt.date) -> DataFrame:
    """``entity_id`` of every item: entities with any event up to ``run_date``."""
    day = F.col(EVENT_DATE_COLUMN) if EVENT_DATE_COLUMN in events.columns else F.to_date("event_ts")
    return events.where(day <= F.lit(run_date)).select("entity_id").distinct()


def collect_eval_data(
    split: EvaluationSplit,
    events: DataFrame,
    run_date: dt.date,
    funnel: Sequence[str],
    stage_weights: Sequence[float],
) -> EvalData:
    """Collect a split into :class:`EvalData` (users x items matrices over dense local indices).

    Args:
        split: the split (:func:`spark_jobs.evaluation.split.split_events`).
        events: the events the split was drawn from (they define the item universe).
        run_date: the split's run date.
        funnel: event types, shallow to deep (``GraphConfig.funnel``).
        stage_weights: weight of one event per stage in the training matrix, aligned with ``funnel``
            (``GraphConfig.stage_weights``).
    """
    pairs = training_pairs(split.train_events, funnel, stage_weights).toArrow()
    targets = split.targets.toArrow()
    items = item_universe(events, run_date).toArrow().column("entity_id").to_pylist()
    cold = split.cold_items.toArrow().column("entity_id").to_pylist()
    t_split = np.asarray(targets.column("split").to_pylist(), dtype=object)
    t_user = np.asarray(targets.column("user_id").to_pylist(), dtype=object)
    t_item = np.asarray(targets.column("entity_id").to_pylist(), dtype=object)
    by_split = {s: (t_user[t_split == s].tolist(), t_item[t_split == s].tolist()) for s in ("warm", "cold")}
    return EvalData.from_pairs(
        (pairs.column("user_id").to_pylist(), pairs.column("entity_id").to_pylist(),
         pairs.column("weight").to_numpy()),
        by_split, items, cold)


def collect_entity_content(content_df: DataFrame | None, entity_ids: Sequence[str],
                    column: str = "embedding") -> np.ndarray | None:
    """float32 ``[len(entity_ids), Dc]`` content vectors in the given order (zero rows where missing).

    Args:
        content_df: ``content_embeddings`` rows, or ``None``.
        entity_ids: the ids wanted (e.g. ``EvalData.item_ids``).
        column: the vector column.

    Returns:
        The matrix, or ``None`` when there is no content at all.
    """
    if content_df is None:
        return None
    spark = content_df.sparkSession
    wanted = spark.createDataFrame([(e,) for e in entity_ids], "entity_id string")
    table = (content_df.where(F.col(column).isNotNull()).join(wanted, "entity_id")
             .select("entity_id", F.col(column).cast("array<float>").alias("v")).toArrow())
    if table.num_rows == 0:
        return None
    ids = table.column("entity_id").to_pylist()
    vecs = np.asarray(table.column("v").to_pylist(), dtype=np.float32)
    pos = {e: i for i, e in enumerate(entity_ids)}
    out = np.zeros((len(entity_ids), vecs.shape[1]), dtype=np.float32)
    out[[pos[e] for e in ids]] = vecs
    return out
