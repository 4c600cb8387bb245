"""Node table of the interaction graph: dense index plus cheap structural features.

Degree, weighted degree and their log / quantile buckets are the structural encodings the graph
transformer embeds (degree centrality encoding of Graphormer, Ying et al., "Do Transformers Really Perform
Bad for Graph Representation?", NeurIPS 2021). Quantiles of weighted degree stand in for PageRank-style
centrality: one aggregation instead of an iterative job, and on a symmetric bipartite-like graph the two
rank nodes very similarly. The graph-wide structure embedding (``structure_method``: spectral,
:mod:`spark_jobs.graph.spectral`, or FastRP, :mod:`spark_jobs.graph.fastrp`) is the one iterative part.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from hir_pipeline.contracts import DEGREE_BUCKETS
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN, structure_embeddings
from spark_jobs.graph.index import index_entities
from spark_jobs.graph.spectral import spectral_embeddings

#: Column order of the ``graph_nodes`` table (contracts.py, "Graph tables").
NODE_COLUMNS = ("node_idx", "entity_id", "entity_type", "node_type", "has_history", "degree", "weighted_degree",
                "degree_by_type", "degree_bucket", "centrality_bucket", STRUCTURE_COLUMN, "run_date")


def build_nodes(
    entities: DataFrame,
    edges: DataFrame,
    run_date: dt.date,
    config: GraphConfig | None = None,
) -> DataFrame:
    """Build the ``graph_nodes`` table: every entity, isolated ones included (degree 0).

    Args:
        entities: bronze entities; the same ones given to :func:`~spark_jobs.graph.edges.build_edges`.
        edges: the ``graph_edges`` table (symmetric, so out-degree is the degree).
        run_date: written to ``run_date``.
        config: funnel (which edge types are activity, for ``has_history``), ``centrality_buckets`` and the
            ``structure_*`` settings.

    Returns:
        A DataFrame with the ``graph_nodes`` schema. ``degree_bucket = min(floor(log2(degree + 1)), 15)``;
        ``centrality_bucket = min(floor(percent_rank(weighted_degree) * B), B - 1)`` so ties share a bucket;
        ``structure_embedding`` is the structure embedding of ``config.structure_method`` (null for nodes without
        edges, and for every node when ``config.structure_embedding`` is off). With it on, it is computed during this
        call (spectral: on the driver; FastRP: as Spark jobs).
    """
    config = config or GraphConfig()
    activity = list(config.funnel) + [f"rev_{s}" for s in config.funnel]
    by_type = edges.groupBy("src_idx", "edge_type").agg(F.count(F.lit(1)).alias("n"), F.sum("weight").alias("w"))
    stats = by_type.groupBy(F.col("src_idx").alias("node_idx")).agg(
        F.sum("n").alias("degree"),
        F.sum("w").alias("weighted_degree"),
        F.map_from_entries(F.array_sort(F.collect_list(F.struct("edge_type", "n")))).alias("degree_by_type"),
        F.max(F.col("edge_type").isin(*activity)).alias("has_history"),
    )
    index = index_entities(entities)
    if config.structure_embedding:
        embed = spectral_embeddings if config.structure_method == "spectral" else structure_embeddings
        index = index.join(embed(index, edges, config), "node_idx", "left")
    else:
        index = index.withColumn(STRUCTURE_COLUMN, F.lit(None).cast("array<float>"))
    nodes = index.join(stats, "node_idx", "left").select(
        "node_idx", "entity_id", "entity_type", "node_type",
        F.coalesce("has_history", F.lit(False)).alias("has_history"),
        F.coalesce("degree", F.lit(0)).cast("long").alias("degree"),
        F.coalesce("weighted_degree", F.lit(0.0)).cast("double").alias("weighted_degree"),
        F.coalesce("degree_by_type", F.create_map().cast("map<string,bigint>")).alias("degree_by_type"),
        STRUCTURE_COLUMN,
    )
    log_bucket = F.floor(F.log2(F.col("degree") + 1)).cast("int")
    rank = F.percent_rank().over(Window.orderBy("weighted_degree"))
    buckets = config.centrality_buckets
    return nodes.select(
        *nodes.columns,
        F.least(log_bucket, F.lit(DEGREE_BUCKETS - 1)).alias("degree_bucket"),
        F.least(F.floor(rank * buckets).cast("int"), F.lit(buckets - 1)).alias("centrality_bucket"),
        F.lit(run_date).alias("run_date"),
    ).select(*NODE_COLUMNS)
