"""User -> entity activity edges and catalog edges of the typed interaction graph.

An activity edge aggregates every event of one user on one entity: its type is the deepest funnel stage
reached (``impression < click < add_to_cart < conversion``), its weight the sum over events of
``stage_weight * 2 ** (-age_days / half_life_days)`` with the age counted from the *run date*
(time-decayed implicit feedback, as in Koren, "Collaborative filtering with temporal dynamics", KDD 2009).
Catalog edges come from ``relations``. Every edge is stored in both directions, the reverse one typed
``rev_<type>``, so that message passing and neighbourhood sampling see a symmetric graph.
"""

from __future__ import annotations

import datetime as dt
import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVENT_DATE_COLUMN, edge_type_vocabulary
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.index import index_entities


def relation_types(relations: DataFrame) -> tuple[str, ...]:
    """Distinct relation names, sorted (a handful of strings: collected to the driver)."""
    return tuple(sorted(r[0] for r in relations.select("relation").distinct().collect()))


def activity_edges(events: DataFrame, run_date: dt.date, config: GraphConfig) -> DataFrame:
    """Aggregate events into one forward edge per (user, entity), before indexing.

    Args:
        events: bronze events (``user_id``, ``entity_id``, ``event_type``, ``event_ts``, ``event_date``).
        run_date: the "as of" date; events after it are ignored and ages are counted to it.
        config: funnel, stage weights, half life and optional lookback.

    Returns:
        ``src_id, dst_id, edge_type, weight, n_events, last_event_ts``.
    """
    funnel = config.funnel
    day = F.col(EVENT_DATE_COLUMN) if EVENT_DATE_COLUMN in events.columns else F.to_date("event_ts")
    ev = events.select("user_id", "entity_id", "event_type", "event_ts", day.alias("_day"))
    keep = F.col("_day") <= F.lit(run_date)
    if config.lookback_days is not None:
        keep &= F.col("_day") > F.lit(run_date - dt.timedelta(days=config.lookback_days))
    stage = F.array_position(F.array(*[F.lit(s) for s in funnel]), F.col("event_type")).cast("int")
    ev = ev.where(keep).withColumn("_stage", stage).where(F.col("_stage") > 0)
    stage_weight = F.element_at(F.array(*[F.lit(float(w)) for w in config.stage_weights]), F.col("_stage"))
    age = F.datediff(F.lit(run_date), F.col("_day")).cast("double")
    # an old event keeps a tiny positive weight: 2 ** -age underflows to 0.0 past ~1074 half lives
    decay = F.greatest(F.pow(F.lit(2.0), -age / F.lit(float(config.half_life_days))), F.lit(sys.float_info.min))
    agg = ev.groupBy(F.col("user_id").alias("src_id"), F.col("entity_id").alias("dst_id")).agg(
        F.sum(stage_weight * decay).alias("weight"),
        F.count(F.lit(1)).alias("n_events"),
        F.max("_stage").alias("_deepest"),
        F.max("event_ts").alias("last_event_ts"),
    )
    edge_type = F.element_at(F.array(*[F.lit(s) for s in funnel]), F.col("_deepest"))
    return agg.select("src_id", "dst_id", edge_type.alias("edge_type"), "weight", "n_events", "last_event_ts")


def catalog_edges(relations: DataFrame) -> DataFrame:
    """One forward edge per (src, dst, relation); duplicate rows add up, null weight means 1.0.

    Non-finite or non-positive weights are dropped here (ingestion already quarantines them) so that the
    ``weight > 0, finite`` contract of ``graph_edges`` holds whatever the input.
    """
    w = F.coalesce(F.col("weight").cast("double"), F.lit(1.0))
    agg = relations.select("src_id", "dst_id", "relation", w.alias("w")).groupBy(
        "src_id", "dst_id", F.col("relation").alias("edge_type")
    ).agg(F.sum("w").alias("weight"))
    ok = F.col("weight") > 0
    ok &= ~F.isnan("weight") & (F.col("weight") < float("inf"))
    return agg.where(ok).select("src_id", "dst_id", "edge_type", "weight", F.lit(0).cast("long").alias("n_events"),
                                F.lit(None).cast("timestamp").alias("last_event_ts"))


def build_edges(
    entities: DataFrame,
    relations: DataFrame,
    events: DataFrame,
    run_date: dt.date,
    config: GraphConfig | None = None,
) -> DataFrame:
    """Build the ``graph_edges`` table: typed, weighted, decayed, symmetric (every edge plus its ``rev_``).

    Args:
        entities: bronze entities; they define the node index (:func:`~spark_jobs.graph.index.index_entities`).
        relations: bronze catalog relations (``src_id, dst_id, relation, weight``).
        events: bronze events (with ``event_date``).
        run_date: the "as of" date of this run: later events are excluded, decay and lookback count to it.
        config: graph settings; defaults to :class:`GraphConfig()`.

    Returns:
        A DataFrame with the ``graph_edges`` schema. Edges whose endpoint is not an entity are dropped
        (ingestion quarantines them, so there are none on bronze input).
    """
    config = config or GraphConfig()
    vocab = edge_type_vocabulary(config.funnel, relation_types(relations))
    type_ids = F.create_map(*[x for i, name in enumerate(vocab) for x in (F.lit(name), F.lit(i + 1))])
    forward = activity_edges(events, run_date, config).unionByName(catalog_edges(relations))
    index = index_entities(entities).select("node_idx", "entity_id")
    src = index.select(F.col("entity_id").alias("src_id"), F.col("node_idx").alias("src_idx"))
    dst = index.select(F.col("entity_id").alias("dst_id"), F.col("node_idx").alias("dst_idx"))
    # Index the forward edges, then emit each with its reverse from the same row: the joins with the node
    # index probe every forward edge once instead of once per direction.
    indexed = forward.join(src, "src_id").join(dst, "dst_id")
    directions = F.explode(F.array(
        F.struct("src_idx", "dst_idx", "src_id", "dst_id", "edge_type"),
        F.struct(F.col("dst_idx").alias("src_idx"), F.col("src_idx").alias("dst_idx"),
                 F.col("dst_id").alias("src_id"), F.col("src_id").alias("dst_id"),
                 F.concat(F.lit("rev_"), F.col("edge_type")).alias("edge_type")),
    )).alias("_e")
    both = indexed.select(directions, "weight", "n_events", "last_event_ts").select(
        "_e.*", "weight", "n_events", "last_event_ts")
    return both.select(
        "src_idx", "dst_idx", "src_id", "dst_id", "edge_type",
        type_ids[F.col("edge_type")].cast("int").alias("edge_type_id"),
        F.col("weight").cast("double").alias("weight"),
        F.col("n_events").cast("long").alias("n_events"),
        F.col("last_event_ts").cast("timestamp").alias("last_event_ts"),
        F.lit(run_date).alias("run_date"),
    )
