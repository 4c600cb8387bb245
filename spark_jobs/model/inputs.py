"""Graph Delta tables -> :class:`~hir_pipeline.training.inputs.ModelInputs` (Spark -> numpy, on the driver).

The trainer runs on one machine, so the graph is collected to the driver once per training run, through Arrow
(``DataFrame.toArrow``: columnar batches, no per-row Python objects), and only as compact small-integer arrays:

==========================  =====================================================================================
what                         driver memory (``N`` nodes, ``V`` views of ``n`` nodes each, ``P`` pairs, ``Dc``)
==========================  =====================================================================================
node features                ``N * (3 small ints + Dc float32 + Ds float32)``, plus the ``N`` id strings
views                        ``V * (9 n + 2 n^2)`` bytes (int64 node ids, int8 types, int8 distances, uint8 edge
                             types), plus one small dict per view (~0.5 KB of Python overhead)
engagement pairs             ``24 P`` bytes (with their recency ranks), plus ``16 Q`` for the ``Q`` seen-only pairs
==========================  =====================================================================================

For example 1 M nodes with 384-d content, broad views of ~40 and narrow views of ~9 nodes and 5 M pairs need
about 1.5 GB (content) + 3.4 GB (views) + 0.1 GB (pairs) + 1 GB of dicts and ids: size the driver
(``spark.driver.memory``) and ``spark.driver.maxResultSize`` accordingly. Arrow batches are turned into numpy
one Arrow batch at a time (one copy of a batch's buffers), so no single buffer has to hold a whole column.

Nothing is collected that the model does not read: no degree maps, weights or entity text.

:func:`read_model_tables` reads the run date's rows of those tables from the lake, each pinned to an explicit
Delta version (logged with the model).

:func:`load_model_inputs` reports each collected part (what, how much, how long) to an optional ``progress``
callback (the asset passes ``context.log.info``; the Spark stages themselves are reported by the asset around it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import DEFAULT_FUNNEL, VIEW_BROAD, VIEW_NARROW
from hir_pipeline.timing import Stages
from hir_pipeline.training.inputs import ModelInputs, engagement_arrays, recency_ranks, views_from_flat
from spark_jobs.delta_io import MissingInput, latest_version, read_table
from spark_jobs.driver_collect import to_arrow
from spark_jobs.graph.fastrp import STRUCTURE_COLUMN
from spark_jobs.graph.views import GraphSnapshot

#: The graph tables a model is trained on (one snapshot per run date).
GRAPH_TABLES = ("graph_nodes", "graph_edges", "graph_views")
#: The content table (one current snapshot, read whole).
CONTENT_TABLE = "content_embeddings"


def default_engagement_weights(funnel: Sequence[str]) -> tuple[float, ...]:
    """Engagement weight per funnel stage, aligned with deep-funnel targets: 0 for the first stage (seen is not
    engaged), then geometric from 1 (the first engaged stage) to 10 (the deepest), so that the deepest stage, the
    one evaluation targets, dominates: ``impression 0, click 1, add_to_cart 3.16, conversion 10`` for the default
    funnel (the ratios of ``GraphConfig.stage_weights``)."""
    n = len(funnel)
    if n <= 2:
        return tuple(float(min(i, 1)) for i in range(n))
    return (0.0, *(float(10.0 ** ((i - 1) / (n - 2))) for i in range(1, n)))


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, values)`` of a list array, offsets rebased to start at 0 (zero-copy where Arrow allows)."""
    if arr.null_count:
        raise ValueError(f"unexpected null list in column of type {arr.type}")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values[offsets[0]:offsets[-1]]


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, bytes as uint8)`` of a binary array, read straight from its Arrow buffers, offsets rebased."""
    if arr.null_count:
        raise ValueError("unexpected null binary value")
    if len(arr) == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    _, offs, data = arr.buffers()
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(offs, dtype=width)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    values = np.zeros(0, dtype=np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
    return offsets - offsets[0], values[offsets[0]:offsets[-1]]


def collect_nodes(nodes_df: DataFrame) -> dict[str, np.ndarray]:
    """Node columns ordered by ``node_idx`` (which must be dense ``0..N-1``)."""
    table = to_arrow(nodes_df.select(
        F.col("node_idx").cast("long"), "entity_id", "entity_type", F.col("node_type").cast("int"),
        F.col("degree_bucket").cast("int"), F.col("has_history").cast("boolean"),
    ), "graph_nodes rows")
    idx = table.column("node_idx").to_numpy()
    order = np.argsort(idx, kind="stable")
    if not np.array_equal(idx[order], np.arange(len(idx))):
        raise ValueError("graph_nodes.node_idx must be dense 0..N-1 with no duplicates (one run_date only?)")
    return {
        "entity_ids": np.asarray(table.column("entity_id").to_pylist(), dtype=object)[order],
        "entity_types": np.asarray(table.column("entity_type").to_pylist(), dtype=object)[order],
        "node_type": table.column("node_type").to_numpy().astype(np.int64)[order],
        "degree_bucket": table.column("degree_bucket").to_numpy().astype(np.int64)[order],
        "has_history": table.column("has_history").to_numpy(zero_copy_only=False).astype(bool)[order],
    }


def collect_structure(nodes_df: DataFrame, num_nodes: int) -> np.ndarray | None:
    """``graph_nodes.structure_embedding`` as float32 ``[N, Ds]`` rows by ``node_idx`` (zero rows where null).

    ``None`` when the snapshot has no such column (written before it existed) or every row is null (the
    embedding was turned off in the graph settings).

    Args:
        nodes_df: the ``graph_nodes`` rows (``node_idx`` dense ``0..N-1``).
        num_nodes: ``N``.
    """
    if STRUCTURE_COLUMN not in nodes_df.columns:
        return None
    table = to_arrow(nodes_df.where(F.col(STRUCTURE_COLUMN).isNotNull())
                     .select(F.col("node_idx").cast("long"), F.col(STRUCTURE_COLUMN).cast("array<float>").alias("_v")),
                     "graph_nodes structure embeddings")
    structure, has = _rows_by_index(table, num_nodes, "graph_nodes.structure_embedding")
    return structure if has.any() else None


def collect_views(views_df: DataFrame, num_nodes: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """View dicts by view name (``broad`` / ``narrow``), each array a zero-copy slice of an Arrow batch.

    Args:
        views_df: ``graph_views`` rows.
        num_nodes: when given, every node index must be below it (views and nodes of the same run).
    """
    table = to_arrow(views_df.select(
        F.col("anchor_idx").cast("long"), "view", "nodes", "node_types", "dist", "edge_types"
    ), "graph_views rows")
    out: dict[str, list[dict[str, Any]]] = {VIEW_BROAD: [], VIEW_NARROW: []}
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        node_off, nodes = _list_parts(batch.column("nodes"))
        type_off, types = _list_parts(batch.column("node_types"))
        dist_off, dist = _binary_parts(batch.column("dist"))
        edge_off, edges = _binary_parts(batch.column("edge_types"))
        anchors = batch.column("anchor_idx").to_numpy()
        sizes = np.diff(node_off)
        if not (np.array_equal(node_off, type_off) and np.array_equal(sizes * sizes, np.diff(dist_off))
                and np.array_equal(dist_off, edge_off)):
            raise ValueError("graph_views rows must hold n node types and n*n dist / edge_types bytes")
        if np.any(sizes == 0) or not np.array_equal(nodes[node_off[:-1]], anchors):
            raise ValueError("every graph_views row must start with its anchor (nodes[0] == anchor_idx)")
        if num_nodes is not None and (nodes.min(initial=0) < 0 or nodes.max(initial=0) >= num_nodes):
            raise ValueError(f"a view references a node_idx outside 0..{num_nodes - 1}: views and nodes of "
                             "different runs?")
        # Own, writable copies of this batch's buffers: torch.from_numpy warns on (and must never write to)
        # read-only Arrow memory, and the Arrow batch can be freed once copied.
        views = views_from_flat(anchors, node_off, nodes.copy(), types.copy(), dist_off, dist.copy(), edges.copy())
        for name, view in zip(batch.column("view").to_pylist(), views, strict=True):
            if name not in out:
                raise ValueError(f"unknown view name {name!r}")
            out[name].append(view)
    return out


def collect_node_content(content_df: DataFrame | None, nodes_df: DataFrame, num_nodes: int,
                    column: str = "embedding") -> tuple[np.ndarray, np.ndarray]:
    """``(content float32 [N, Dc], has_content bool [N])`` from a ``content_embeddings`` frame.

    Rows are matched to nodes by ``entity_id`` in Spark, so only vectors of this graph's nodes are collected;
    entities without a row (or with a null vector) get a zero row and ``has_content = False``.

    Args:
        content_df: ``content_embeddings`` rows (one per entity), or ``None`` for no content at all.
        nodes_df: the ``graph_nodes`` rows of the same run.
        num_nodes: ``N``.
        column: the vector column (default the fused ``embedding``).
    """
    if content_df is None:
        return np.zeros((num_nodes, 0), dtype=np.float32), np.zeros(num_nodes, dtype=bool)
    table = to_arrow(
        content_df.where(F.col(column).isNotNull())
        .select("entity_id", F.col(column).cast("array<float>").alias("_v"))
        .join(nodes_df.select("entity_id", F.col("node_idx").cast("long")), "entity_id")
        .select("node_idx", "_v"),
        "content vectors",
    )
    return _rows_by_index(table, num_nodes, "content_embeddings")


def _rows_by_index(table: pa.Table, num_nodes: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(float32 [N, D] matrix, bool [N] has-row)`` from Arrow ``node_idx, _v`` rows (zero rows where absent).

    Args:
        table: ``node_idx long, _v array<float>`` (equal lengths, at most one row per node).
        num_nodes: ``N``.
        what: the table named in errors.
    """
    idx_parts, vec_parts, width = [], [], None
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        offsets, values = _list_parts(batch.column("_v"))
        lengths = np.unique(np.diff(offsets))
        if len(lengths) != 1 or (width is not None and lengths[0] != width):
            raise ValueError(f"{what} vectors of different widths: {sorted({*lengths.tolist(), width} - {None})}")
        width = int(lengths[0])
        idx_parts.append(batch.column("node_idx").to_numpy())
        vec_parts.append(np.asarray(values, dtype=np.float32).reshape(-1, width))
    matrix = np.zeros((num_nodes, width or 0), dtype=np.float32)
    has = np.zeros(num_nodes, dtype=bool)
    if idx_parts:
        idx = np.concatenate(idx_parts)
        if len(np.unique(idx)) != len(idx):
            raise ValueError(f"{what} holds more than one row for some entity (one snapshot only?)")
        matrix[idx] = np.concatenate(vec_parts)
        has[idx] = True
    return matrix, has


def collect_engagement(edges_df: DataFrame, funnel: Sequence[str], stage_weights: Sequence[float]):
    """Funnel-weighted ``(user_idx, item_idx, weight)`` pairs from the forward activity edges.

    A forward activity edge (``edge_type`` = a funnel stage, ``src`` = the user) carries the deepest stage
    the user reached on the item; its pair weight is ``stage_weights[stage]``. Pairs of weight 0 are dropped
    (by default the shallowest stage, impressions: seen is not engaged; see :func:`collect_activity`).
    """
    return collect_activity(edges_df, funnel, stage_weights)[0]


def collect_activity(edges_df: DataFrame, funnel: Sequence[str], stage_weights: Sequence[float]):
    """``(engagement, seen, recency)`` from the forward activity edges, in one pass: the funnel-weighted engaged
    pairs (as :func:`collect_engagement`), the ``(user_idx, item_idx)`` pairs whose deepest stage has weight 0
    (seen, not engaged), both sorted by (user, item), and each engaged pair's recency rank among its user's
    engaged pairs (:func:`~hir_pipeline.training.inputs.recency_ranks` of ``last_event_ts``; ``None`` for a
    ``graph_edges`` snapshot written before that column existed)."""
    if len(stage_weights) != len(funnel):
        raise ValueError(f"{len(stage_weights)} engagement weights for a funnel of {len(funnel)} stages")
    stage = F.array_position(F.array(*[F.lit(s) for s in funnel]), F.col("edge_type"))
    weight = F.element_at(F.array(*[F.lit(float(w)) for w in stage_weights]), stage.cast("int"))
    timed = "last_event_ts" in edges_df.columns
    columns = [F.col("src_idx").cast("long"), F.col("dst_idx").cast("long"), weight.cast("float").alias("w")]
    if timed:
        columns.append(F.unix_micros(F.col("last_event_ts").cast("timestamp")).alias("t"))
    table = to_arrow(edges_df.where(stage > 0).select(*columns), "engagement pairs")
    src, dst, w = (table.column(c).to_numpy() for c in ("src_idx", "dst_idx", "w"))
    engaged = w > 0
    seen = engagement_arrays(src[~engaged], dst[~engaged], np.zeros(int((~engaged).sum()), dtype=np.float32))
    engagement = engagement_arrays(src[engaged], dst[engaged], w[engaged])
    recency = None
    if timed:
        t = table.column("t").to_numpy(zero_copy_only=False)[engaged]
        ranks = recency_ranks(src[engaged], t)
        recency = ranks[np.lexsort((dst[engaged], src[engaged]))]  # the order of engagement_arrays
    return engagement, seen[:2], recency


def load_model_inputs(
    graph: GraphSnapshot,
    content_df: DataFrame | None,
    *,
    funnel: Sequence[str] = DEFAULT_FUNNEL,
    engagement_weights: Sequence[float] | None = None,
    content_column: str = "embedding",
    provenance: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ModelInputs:
    """Collect one graph (all frames of the same run date) into :class:`ModelInputs`.

    Args:
        graph: the run date's ``graph_nodes`` (``node_idx`` dense ``0..N-1``), ``graph_edges`` (the engagement
            pairs) and ``graph_views`` rows over the same node index (broad and narrow views).
        content_df: ``content_embeddings`` rows (one per entity, matched by ``entity_id``), or ``None``.
        funnel: event types, shallow to deep (``GraphConfig.funnel``): which edge types are activity.
        engagement_weights: weight of an engaged pair per funnel stage, aligned with ``funnel``; default
            :func:`default_engagement_weights`.
        content_column: vector column of ``content_df``.
        provenance: stored on the result as is (e.g. the Delta versions that were read).
        progress: called with one line per collected part (nodes, views, content, engagement pairs), e.g.
            ``context.log.info``.
    """
    if graph.views is None:
        raise ValueError(f"the graph of {graph.run_date} has no views: the model trains on views")
    nodes_df, edges_df, views_df = graph.nodes, graph.edges, graph.views
    funnel = tuple(funnel)
    weights = default_engagement_weights(funnel) if engagement_weights is None else tuple(engagement_weights)
    stages = Stages()

    def done(stage: str, what: str) -> None:
        if progress is not None:
            progress(f"collected {what} in {stages.seconds[stage]:.1f}s")

    nodes = stages.run("nodes", lambda: collect_nodes(nodes_df))
    n = len(nodes["entity_ids"])
    done("nodes", f"{n:,} nodes")
    structure = stages.run("structure", lambda: collect_structure(nodes_df, n))
    if structure is not None:
        done("structure", f"structure embeddings of {int(structure.any(axis=1).sum()):,} nodes "
             f"(dim {structure.shape[1]})")
    views = stages.run("views", lambda: collect_views(views_df, n))
    done("views", f"{len(views[VIEW_BROAD]):,} broad and {len(views[VIEW_NARROW]):,} narrow views")
    content, has_content = stages.run("content", lambda: collect_node_content(content_df, nodes_df, n, content_column))
    done("content", f"content vectors of {int(has_content.sum()):,} nodes (dim {content.shape[1]})")
    engagement, seen, recency = stages.run("engagement", lambda: collect_activity(edges_df, funnel, weights))
    done("engagement", f"{len(engagement[0]):,} engagement pairs and {len(seen[0]):,} seen-only pairs")
    # The model sees edge types only through the views: their largest id sizes the edge-type bias table.
    max_edge_type = max((int(v["edge_types"].max(initial=0)) for vs in views.values() for v in vs), default=0)
    return ModelInputs(
        entity_ids=nodes["entity_ids"], entity_types=nodes["entity_types"], node_type=nodes["node_type"],
        degree_bucket=nodes["degree_bucket"], has_history=nodes["has_history"], content=content,
        has_content=has_content, broad_views=views[VIEW_BROAD], narrow_views=views[VIEW_NARROW],
        engagement=engagement, max_edge_type=int(max_edge_type), provenance=dict(provenance or {}),
        structure=structure,
        seen_pairs=seen,
        engagement_recency=recency,
    )


def read_model_tables(spark: SparkSession, path: Callable[[str], str], day: dt.date, require_content: bool = True
                      ) -> dict[str, tuple[DataFrame, str, int]]:
    """The run date's rows of every input table of the model, pinned to the table's current Delta version.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        day: the run date.
        require_content: a missing ``content_embeddings`` table is an error (else it is left out).

    Returns:
        ``{table: (rows, path, delta_version)}`` for :data:`GRAPH_TABLES` and :data:`CONTENT_TABLE`;
        ``content_embeddings`` is absent when it does not exist and ``require_content`` is False. Tables with a
        ``run_date`` column are filtered to ``day``; a table without one (a single snapshot) is read whole.

    Raises:
        MissingInput: a table does not exist in the lake.
    """
    out = {}
    for table in (*GRAPH_TABLES, CONTENT_TABLE):
        table_path = path(table)
        version = latest_version(spark, table_path)
        if version is None:
            if table == CONTENT_TABLE and not require_content:
                continue
            raise MissingInput(f"{table} does not exist in the lake: materialize {table} for {day} first")
        df = read_table(spark, table_path, version)
        if "run_date" in df.columns:
            df = df.where(F.col("run_date") == F.lit(day))
        out[table] = (df, table_path, version)
    return out
