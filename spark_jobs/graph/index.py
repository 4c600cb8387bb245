"""Dense, deterministic node indices shared by the node and edge tables."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from hir_pipeline.contracts import ENTITY_TYPES


def index_entities(entities: DataFrame) -> DataFrame:
    """Give every entity a dense ``node_idx`` in ``0..N-1``: its rank in ``entity_id`` order.

    The index depends only on the set of entity ids, so :func:`~spark_jobs.graph.edges.build_edges` and
    :func:`~spark_jobs.graph.nodes.build_nodes` compute the same one independently. The global window runs
    in one task; that is a sort of N short strings, far below the cost of the event aggregation, and it avoids
    the partition-offset bookkeeping that a multi-task dense index would need.

    Args:
        entities: bronze entities (``entity_id`` unique, ``entity_type`` in ``contracts.ENTITY_TYPES``).

    Returns:
        ``node_idx long, entity_id string, entity_type string, node_type int``.
    """
    type_idx = F.array_position(F.array(*[F.lit(t) for t in ENTITY_TYPES]), F.col("entity_type")) - 1
    return entities.select(
        (F.row_number().over(Window.orderBy("entity_id")) - 1).cast("long").alias("node_idx"),
        "entity_id",
        "entity_type",
        type_idx.cast("int").alias("node_type"),
    )
