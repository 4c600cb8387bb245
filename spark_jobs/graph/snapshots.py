"""Graph snapshots in the lake, and the rule that decides when a run date's views are built incrementally.

Every graph table keeps **one snapshot per run date**: it is Delta-partitioned by ``run_date`` and a run of date
D replaces exactly the ``run_date = D`` partition (:func:`spark_jobs.delta_io.replace_run_date`), so re-running D
never duplicates and never touches other dates. The commit records the run date, so a snapshot that was built
empty (a graph without edges) is told apart from one never built (:func:`require_snapshot`).

Increment of the views (:func:`plan_views`): with the latest earlier snapshot P (normally yesterday), the
anchors whose views can differ are the nodes within ``hops`` of a node whose edges changed other than by one
common factor, plus new entities (:func:`spark_jobs.graph.views.anchors_to_recompute`); only they are sampled
again, every other view is copied from P with its node indices re-mapped (equal to a full rebuild, tested). A
full rebuild runs instead when there is no P, when the increment is switched off, or when P was built with other
view settings, other edge-type ids or other entity types (:func:`increment_blocker`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.timing import Stages
from spark_jobs.delta_io import (
    MissingInput,
    read_run_date,
    read_table,
    replace_run_date,
    run_date_metadata,
    table_exists,
)
from spark_jobs.graph import sampling
from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.views import GraphSnapshot, anchors_to_recompute, build_views, update_views

#: The graph tables, in build order.
GRAPH_TABLES = ("graph_edges", "graph_nodes", "graph_views")


def require_snapshot(spark: SparkSession, path: Callable[[str], str], table: str, day: dt.date) -> DataFrame:
    """The ``day`` snapshot of a graph table.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        table: ``graph_edges``, ``graph_nodes`` or ``graph_views``.
        day: the run date.

    Raises:
        MissingInput: that date was never built (an empty snapshot is legitimate, so presence is decided by
            the commit history).
    """
    if run_date_metadata(spark, path(table), day) is None:
        raise MissingInput(f"{table} has no snapshot for run date {day}: materialize {table} for {day} first")
    return read_run_date(spark, path(table), day)


def views_fingerprint(config: GraphConfig) -> str:
    """Hash of the settings that shape a view given the graph (sampling, caps, truncation, sampler version).

    Edge-level settings (weights, half life, lookback, funnel) are left out on purpose: their effect shows up in
    the edges, which the increment diffs directly.
    """
    fields = {"broad_fanout": config.broad_fanout, "narrow_fanout": config.narrow_fanout, "max_dist": config.max_dist,
              "max_view_nodes": config.max_view_nodes, "hub_cap": config.hub_cap, "seed": config.seed,
              "sampler": sampling.SAMPLER_VERSION}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def write_views(views: DataFrame, path: str, day: dt.date, config: GraphConfig) -> None:
    """Replace the ``day`` snapshot of ``graph_views``, recording :func:`views_fingerprint` in the commit."""
    replace_run_date(views, path, day, {"views_config": views_fingerprint(config)})


def previous_snapshot(spark: SparkSession, path: Callable[[str], str], day: dt.date) -> dt.date | None:
    """Latest run date before ``day`` for which views, nodes and edges snapshots all exist."""
    if not table_exists(spark, path("graph_views")):
        return None
    prev = (read_table(spark, path("graph_views")).where(F.col("run_date") < F.lit(day))
            .agg(F.max("run_date")).first()[0])
    if prev is None:
        return None
    for table in ("graph_nodes", "graph_edges"):
        if run_date_metadata(spark, path(table), prev) is None:
            return None
    return prev


def increment_blocker(spark: SparkSession, path: Callable[[str], str], prev: dt.date, config: GraphConfig,
                      nodes: DataFrame, edges: DataFrame) -> str | None:
    """Why this run's views cannot be derived from those of ``prev`` (None: they can).

    Carried-over views keep their node types, edge-type ids and sampling; so the increment requires the same view
    settings, the same id for every edge type present on both dates, and the same type for every surviving
    entity. Any other change is seen by the edge diff of :func:`spark_jobs.graph.views.affected_anchors`.

    Args:
        spark: the session.
        path: table name -> Delta path.
        prev: run date of the previous snapshot (:func:`previous_snapshot`).
        config: this run's graph settings.
        nodes: this run's ``graph_nodes`` rows.
        edges: this run's ``graph_edges`` rows.
    """
    meta = run_date_metadata(spark, path("graph_views"), prev)
    if meta is None or meta.get("views_config") != views_fingerprint(config):
        return f"view settings of {prev} unknown or different"
    old_types = read_run_date(spark, path("graph_edges"), prev).select("edge_type", "edge_type_id").distinct()
    new_types = edges.select("edge_type", F.col("edge_type_id").alias("_new_id")).distinct()
    if not old_types.join(new_types, "edge_type").where(F.col("edge_type_id") != F.col("_new_id")).isEmpty():
        return "edge type ids changed (new relation type)"
    old_nodes = read_run_date(spark, path("graph_nodes"), prev).select("entity_id", "node_type")
    retyped = old_nodes.join(nodes.select("entity_id", F.col("node_type").alias("_new_type")), "entity_id")
    if not retyped.where(F.col("node_type") != F.col("_new_type")).isEmpty():
        return "an entity changed type"
    return None


@dataclass
class ViewsPlan:
    """How a run date's views are built: the (lazy) views and what was decided.

    Attributes:
        views: the ``graph_views`` rows of the run date (computed when written).
        mode: ``incremental`` (carried over from ``previous_run_date``) or ``full``.
        anchors: nodes of the run date (each gets a broad and a narrow view).
        recomputed: anchors sampled again (all of them in a full build).
        previous_run_date: the snapshot the increment starts from (None: full build).
        full_build_reason: why the increment was not possible (None: incremental).
    """

    views: DataFrame
    mode: Literal["incremental", "full"]
    anchors: int
    recomputed: int
    previous_run_date: dt.date | None = None
    full_build_reason: str | None = None

    def describe(self) -> str:
        """One line for the run log."""
        if self.mode == "incremental":
            return (f"incremental from {self.previous_run_date}: recomputing {self.recomputed:,} of "
                    f"{self.anchors:,} anchors")
        return f"full build of {self.anchors:,} anchors ({self.full_build_reason})"

    def metadata(self) -> dict:
        """The decision as materialization metadata."""
        how = ({"previous_run_date": str(self.previous_run_date)} if self.mode == "incremental"
               else {"full_build_reason": self.full_build_reason})
        return {"mode": self.mode, **how, "recomputed_anchors": self.recomputed,
                "reused_anchors": self.anchors - self.recomputed}


def plan_views(spark: SparkSession, path: Callable[[str], str], day: dt.date, config: GraphConfig,
               nodes: DataFrame, edges: DataFrame, incremental: bool = True,
               stages: Stages | None = None) -> ViewsPlan:
    """The views of ``day``: incremental from the latest earlier snapshot when that is provably equivalent.

    Args:
        spark: the session.
        path: table name -> Delta path.
        day: the run date.
        config: the graph settings.
        nodes: the ``graph_nodes`` snapshot of ``day`` (persisted by the caller: it is read several times).
        edges: the ``graph_edges`` snapshot of ``day`` (likewise).
        incremental: False always rebuilds every view.
        stages: times the ``plan`` and ``affected_anchors`` steps (None: untimed).
    """
    stages = stages or Stages()
    anchors = nodes.count()
    prev = previous_snapshot(spark, path, day) if incremental else None
    reason = "incremental disabled" if not incremental else f"no earlier snapshot before {day}"
    if prev is not None:
        reason = stages.run("plan", lambda: increment_blocker(spark, path, prev, config, nodes, edges))
    if prev is None or reason is not None:
        return ViewsPlan(build_views(nodes, edges, day, config), "full", anchors, anchors, full_build_reason=reason)
    old = GraphSnapshot(prev, *(read_run_date(spark, path(t), prev) for t in ("graph_nodes", "graph_edges",
                                                                                "graph_views")))
    redo = stages.run("affected_anchors", lambda: anchors_to_recompute(
        old.nodes, old.edges, nodes, edges, config).localCheckpoint())
    recomputed = redo.join(nodes.select("entity_id"), "entity_id").count()
    views = update_views(old, nodes, edges, day, config, redo_ids=redo)
    return ViewsPlan(views, "incremental", anchors, recomputed, previous_run_date=prev)
