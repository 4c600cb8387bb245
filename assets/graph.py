"""Graph: the typed, weighted, time-decayed interaction graph and its sampled training views.

``graph_edges`` -> ``graph_nodes`` -> ``graph_views`` wrap :mod:`spark_jobs.graph`; each reads its inputs from
the lake and writes one Delta table. All three read the graph settings from one resource, ``graph_settings``
(:class:`resources.GraphSettingsResource`, shared with ``evaluation_report``), so their tables never disagree on
them; only run behaviour (progress interval, incremental views) is per-asset run config.

Snapshots. Every table keeps **one snapshot per run date**: it is Delta-partitioned by ``run_date`` and a run of
date D replaces exactly the ``run_date = D`` partition (``replaceWhere``), so re-running D never duplicates and
never touches other dates. Why keep old dates: the model of date D reads exactly D's graph, and the nightly
increment of the views diffs D against the previous snapshot. Old snapshots are deterministic functions of the
bronze tables and the graph settings, so they may be deleted to save space (a metadata-only Delta ``DELETE WHERE
run_date < ...``) and rebuilt by re-running their date.

Edges and nodes are rebuilt in full every run: one more day of decay changes every activity weight anyway, and
both are one aggregation over the events. The views are the expensive part; see :func:`graph_views` for the
increment.
"""

import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable, Iterator

import dagster as dg
from delta.tables import DeltaTable
from pydantic import Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.partitions import daily_partitions, run_date
from assets.progress import spark_progress
from resources import GraphSettingsResource, LakeResource, SparkResource
from spark_jobs.delta_io import latest_version, read_table, table_exists
from spark_jobs.graph import (
    GraphConfig,
    anchors_to_recompute,
    build_edges,
    build_nodes,
    build_views,
    checks,
    update_views,
)
from spark_jobs.graph.sampling import SAMPLER_VERSION

GROUP = "graph"
BRONZE_DEPS = [dg.AssetKey("entities"), dg.AssetKey("relations"), dg.AssetKey("events")]

CHECK_WEIGHTS = "weights_finite_positive"
CHECK_DANGLING = "no_dangling_edges"
CHECK_ANCHOR = "every_view_holds_its_anchor"
CHECK_DISTANCES = "distance_arrays_square_symmetric_zero_diagonal"


class GraphRunConfig(dg.Config):
    """Run behaviour of ``graph_edges`` and ``graph_nodes`` (the graph settings are the ``graph_settings`` resource).

    Attributes:
        progress_every_s: interval of the Spark progress lines in the run log.
    """

    progress_every_s: float = Field(10.0, description="Interval of the Spark progress lines in the run log (s).")


class GraphViewsRunConfig(GraphRunConfig):
    """Run behaviour of ``graph_views`` (the graph settings are the ``graph_settings`` resource).

    Attributes:
        incremental: recompute only the anchors affected since the previous snapshot when that is provably
            equivalent (see :func:`graph_views`); ``False`` always rebuilds every view.
    """

    incremental: bool = Field(True, description="Recompute only the anchors affected since the previous snapshot "
                              "when provably equivalent to a full rebuild; false: always rebuild every view.")


def views_fingerprint(config: GraphConfig) -> str:
    """Hash of the settings that shape a view given the graph (sampling, caps, truncation, sampler version).

    Edge-level settings (weights, half life, lookback, funnel) are left out on purpose: their effect shows up in
    the edges, which the increment diffs directly.
    """
    fields = {"broad_fanout": config.broad_fanout, "narrow_fanout": config.narrow_fanout, "max_dist": config.max_dist,
              "max_view_nodes": config.max_view_nodes, "hub_cap": config.hub_cap, "seed": config.seed,
              "sampler": SAMPLER_VERSION}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


# --- Delta snapshots ---------------------------------------------------------------------------------------------


def snapshot(session: SparkSession, path: str, day: dt.date) -> DataFrame:
    """The ``run_date = day`` snapshot of a graph table."""
    return read_table(session, path).where(F.col("run_date") == F.lit(day))


def write_snapshot(df: DataFrame, path: str, day: dt.date, user_metadata: dict | None = None) -> None:
    """Replace the ``run_date = day`` partition with ``df`` in one Delta commit.

    The commit's ``userMetadata`` (``DESCRIBE HISTORY``) records ``{"run_date": day, **user_metadata}``, so a
    snapshot that was built empty is told apart from one never built.

    Args:
        df: rows of this run (all with ``run_date = day``).
        path: the table's path.
        day: the run date.
        user_metadata: more JSON-able facts about the snapshot (e.g. the view settings).
    """
    meta = {**(user_metadata or {}), "run_date": str(day)}
    (df.write.format("delta").mode("overwrite").option("replaceWhere", f"run_date = '{day}'")
     .option("userMetadata", json.dumps(meta, sort_keys=True)).partitionBy("run_date").save(path))


def require_snapshot(session: SparkSession, lake: LakeResource, table: str, day: dt.date) -> DataFrame:
    """The ``day`` snapshot of an upstream graph table; fails clearly when that date was never built.

    An empty snapshot is legitimate (a graph without edges), so presence is decided by the commit history.
    """
    path = lake.path(table)
    if not table_exists(session, path) or committed_metadata(session, path, day) is None:
        raise dg.Failure(f"{table} has no snapshot for run date {day}: materialize {table} for {day} first")
    return snapshot(session, path, day)


def committed_metadata(session: SparkSession, path: str, day: dt.date) -> dict | None:
    """``userMetadata`` of the latest commit that wrote the ``run_date = day`` snapshot (None if unknown)."""
    history = (DeltaTable.forPath(session, path).history().where(F.col("userMetadata").isNotNull())
               .orderBy(F.col("version").desc()).select("userMetadata").collect())
    for row in history:
        try:
            meta = json.loads(row["userMetadata"])
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("run_date") == str(day):
            return meta
    return None


class _Stages:
    """Wall-clock seconds of named steps, each run under Spark progress logging."""

    def __init__(self, context: dg.AssetExecutionContext, session: SparkSession, every_s: float):
        self.context, self.session, self.every_s = context, session, every_s
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], object]):
        self.context.log.info(f"{self.context.asset_key.to_user_string()}: {name} ...")
        start = time.perf_counter()
        with spark_progress(self.context, self.session, f"{self.context.asset_key.to_user_string()}: {name}",
                            self.every_s):
            out = fn()
        self.seconds[name] = round(time.perf_counter() - start, 3)
        self.context.log.info(f"{self.context.asset_key.to_user_string()}: {name} done in {self.seconds[name]:.1f}s")
        return out

    def metadata(self) -> dg.MetadataValue:
        return dg.MetadataValue.json(self.seconds)


def _table_metadata(context: dg.AssetExecutionContext, session: SparkSession, path: str, day: dt.date,
                    rows: int) -> dict:
    """Row count, run date, Delta version and path of the snapshot just written; also said in the run log."""
    version = latest_version(session, path)
    context.log.info(f"{context.asset_key.to_user_string()}: wrote {rows:,} rows for {day}, Delta version {version}"
                     f" ({path})")
    return {
        "dagster/row_count": rows,
        "run_date": str(day),
        "delta_version": version,
        "path": dg.MetadataValue.path(path),
    }


def _check(name: str, asset: str, result: checks.CheckResult, day: dt.date) -> dg.AssetCheckResult:
    passed, meta = result
    return dg.AssetCheckResult(
        check_name=name, asset_key=asset, passed=bool(passed), severity=dg.AssetCheckSeverity.ERROR,
        metadata={**meta, "run_date": str(day)},
    )


# --- Assets --------------------------------------------------------------------------------------------------------


@dg.asset(
    name="graph_edges",
    group_name=GROUP,
    deps=BRONZE_DEPS,
    partitions_def=daily_partitions,
    compute_kind="spark",
    check_specs=[dg.AssetCheckSpec(CHECK_WEIGHTS, asset="graph_edges", blocking=True,
                                   description="Every edge weight of the run date is finite and > 0.")],
    description="Typed, funnel-weighted, time-decayed symmetric edges as of the run date (one snapshot per date).",
)
def graph_edges(
    context: dg.AssetExecutionContext,
    config: GraphRunConfig,
    spark: SparkResource,
    lake: LakeResource,
    graph_settings: GraphSettingsResource,
) -> Iterator:
    day, session, cfg = run_date(context), spark.get_session(), graph_settings.graph_config()
    stages = _Stages(context, session, config.progress_every_s)
    path = lake.path("graph_edges")
    bronze = {t: read_table(session, lake.path(t)) for t in ("entities", "relations", "events")}
    stages.run("build_and_write", lambda: write_snapshot(
        build_edges(bronze["entities"], bronze["relations"], bronze["events"], day, cfg), path, day))
    written = snapshot(session, path, day)
    by_type = {r["edge_type"]: int(r["count"]) for r in written.groupBy("edge_type").count().collect()}
    result = stages.run("check", lambda: checks.check_weights_finite_positive(written))
    yield dg.MaterializeResult(metadata={
        **_table_metadata(context, session, path, day, sum(by_type.values())),
        "edges_by_type": dg.MetadataValue.json(dict(sorted(by_type.items()))),
        "stage_seconds": stages.metadata(),
    })
    yield _check(CHECK_WEIGHTS, "graph_edges", result, day)


@dg.asset(
    name="graph_nodes",
    group_name=GROUP,
    deps=[dg.AssetKey("entities"), dg.AssetKey("graph_edges")],
    partitions_def=daily_partitions,
    compute_kind="spark",
    check_specs=[dg.AssetCheckSpec(CHECK_DANGLING, asset="graph_nodes", blocking=True,
                                   description="Every graph_edges endpoint of the run date is a node of that date.")],
    description="Every entity with its dense node_idx, degrees and centrality bucket (one snapshot per date).",
)
def graph_nodes(
    context: dg.AssetExecutionContext,
    config: GraphRunConfig,
    spark: SparkResource,
    lake: LakeResource,
    graph_settings: GraphSettingsResource,
) -> Iterator:
    day, session, cfg = run_date(context), spark.get_session(), graph_settings.graph_config()
    stages = _Stages(context, session, config.progress_every_s)
    path = lake.path("graph_nodes")
    edges = require_snapshot(session, lake, "graph_edges", day)
    entities = read_table(session, lake.path("entities"))
    stages.run("build_and_write", lambda: write_snapshot(build_nodes(entities, edges, day, cfg), path, day))
    written = snapshot(session, path, day)
    stats = written.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(F.col("degree") == 0, 1)).alias("isolated"),
        F.coalesce(F.max("degree"), F.lit(0)).alias("max_degree"),
        F.count(F.when(F.col("has_history"), 1)).alias("with_history"),
    ).first()
    by_type = {r["entity_type"]: int(r["count"]) for r in written.groupBy("entity_type").count().collect()}
    result = stages.run("check", lambda: checks.check_no_dangling_edges(written, edges))
    yield dg.MaterializeResult(metadata={
        **_table_metadata(context, session, path, day, int(stats["rows"])),
        "nodes_by_type": dg.MetadataValue.json(dict(sorted(by_type.items()))),
        "isolated_nodes": int(stats["isolated"]),
        "nodes_with_history": int(stats["with_history"]),
        "max_degree": int(stats["max_degree"]),
        "stage_seconds": stages.metadata(),
    })
    yield _check(CHECK_DANGLING, "graph_nodes", result, day)


def previous_snapshot(session: SparkSession, lake: LakeResource, day: dt.date) -> dt.date | None:
    """Latest run date before ``day`` for which views, nodes and edges snapshots all exist."""
    if not table_exists(session, lake.path("graph_views")):
        return None
    prev = (read_table(session, lake.path("graph_views")).where(F.col("run_date") < F.lit(day))
            .agg(F.max("run_date")).first()[0])
    if prev is None:
        return None
    for table in ("graph_nodes", "graph_edges"):
        if not table_exists(session, lake.path(table)) or committed_metadata(session, lake.path(table), prev) is None:
            return None
    return prev


def increment_blocker(session: SparkSession, lake: LakeResource, prev: dt.date, day: dt.date,
                      cfg: GraphConfig, nodes: DataFrame, edges: DataFrame) -> str | None:
    """Why the views of ``day`` cannot be derived from those of ``prev`` (None: they can).

    Carried-over views keep their node types, edge-type ids and sampling; so the increment requires the same view
    settings, the same id for every edge type present on both dates, and the same type for every surviving
    entity. Any other change is seen by the edge diff of :func:`spark_jobs.graph.views.affected_anchors`.
    """
    meta = committed_metadata(session, lake.path("graph_views"), prev)
    if meta is None or meta.get("views_config") != views_fingerprint(cfg):
        return f"view settings of {prev} unknown or different"
    old_types = snapshot(session, lake.path("graph_edges"), prev).select("edge_type", "edge_type_id").distinct()
    new_types = edges.select("edge_type", F.col("edge_type_id").alias("_new_id")).distinct()
    if not old_types.join(new_types, "edge_type").where(F.col("edge_type_id") != F.col("_new_id")).isEmpty():
        return "edge type ids changed (new relation type)"
    old_nodes = snapshot(session, lake.path("graph_nodes"), prev).select("entity_id", "node_type")
    retyped = old_nodes.join(nodes.select("entity_id", F.col("node_type").alias("_new_type")), "entity_id")
    if not retyped.where(F.col("node_type") != F.col("_new_type")).isEmpty():
        return "an entity changed type"
    return None


@dg.asset(
    name="graph_views",
    group_name=GROUP,
    deps=[dg.AssetKey("graph_nodes"), dg.AssetKey("graph_edges")],
    partitions_def=daily_partitions,
    compute_kind="spark",
    check_specs=[
        dg.AssetCheckSpec(CHECK_ANCHOR, asset="graph_views", blocking=True,
                          description="Every view of the run date holds its anchor first (nodes[0] == anchor_idx)."),
        dg.AssetCheckSpec(CHECK_DISTANCES, asset="graph_views", blocking=True,
                          description="Every dist array is n*n for n nodes, symmetric, with a zero diagonal."),
    ],
    description="Broad (teacher) and narrow (student) sampled views of every anchor, with shortest-path "
                "distances and edge types as small-integer arrays (one snapshot per date).",
)
def graph_views(
    context: dg.AssetExecutionContext,
    config: GraphViewsRunConfig,
    spark: SparkResource,
    lake: LakeResource,
    graph_settings: GraphSettingsResource,
) -> Iterator:
    """Views of every node of the run date; incremental when a previous snapshot allows it.

    Increment: with the latest earlier snapshot P (normally yesterday), the anchors whose views can differ are
    the nodes within ``hops`` of a node whose edges changed other than by one common factor, plus new entities
    (:func:`spark_jobs.graph.views.anchors_to_recompute`); only they are sampled again, every other view is
    copied from P with its node indices re-mapped (equal to a full rebuild, tested). A full rebuild runs instead
    when there is no P, when ``incremental`` is off, or when P was built with other view settings, other
    edge-type ids or other entity types (:func:`increment_blocker`). Metadata says which, and how many anchors
    were recomputed vs reused.
    """
    day, session, cfg = run_date(context), spark.get_session(), graph_settings.graph_config()
    stages = _Stages(context, session, config.progress_every_s)
    path = lake.path("graph_views")
    nodes = require_snapshot(session, lake, "graph_nodes", day).persist()
    edges = require_snapshot(session, lake, "graph_edges", day).persist()
    n_anchors = nodes.count()
    prev = previous_snapshot(session, lake, day) if config.incremental else None
    reason = "incremental disabled" if not config.incremental else f"no earlier snapshot before {day}"
    if prev is not None:
        reason = stages.run("plan", lambda: increment_blocker(session, lake, prev, day, cfg, nodes, edges))
    extra: dict = {}
    if prev is not None and reason is None:
        old = {t: snapshot(session, lake.path(t), prev) for t in ("graph_views", "graph_nodes", "graph_edges")}
        redo = stages.run("affected_anchors", lambda: anchors_to_recompute(
            old["graph_nodes"], old["graph_edges"], nodes, edges, cfg).localCheckpoint())
        recomputed = redo.join(nodes.select("entity_id"), "entity_id").count()
        context.log.info(f"graph_views: incremental from {prev}: recomputing {recomputed:,} of {n_anchors:,} anchors")
        views = update_views(old["graph_views"], old["graph_nodes"], old["graph_edges"], nodes, edges, prev, day,
                             cfg, redo_ids=redo)
        mode = "incremental"
        extra = {"previous_run_date": str(prev), "recomputed_anchors": recomputed,
                 "reused_anchors": n_anchors - recomputed}
    else:
        context.log.info(f"graph_views: full build of {n_anchors:,} anchors ({reason})")
        views = build_views(nodes, edges, day, cfg)
        mode = "full"
        extra = {"full_build_reason": reason, "recomputed_anchors": n_anchors, "reused_anchors": 0}
    stages.run("sample_structure_and_write", lambda: write_snapshot(
        views, path, day, {"views_config": views_fingerprint(cfg)}))

    written = snapshot(session, path, day)
    stats = written.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(F.col("truncated"), 1)).alias("truncated"),
        F.coalesce(F.avg(F.size("nodes")), F.lit(0.0)).alias("mean_nodes"),
        F.coalesce(F.max(F.size("nodes")), F.lit(0)).alias("max_nodes"),
        F.count(F.when(F.size("nodes") == 1, 1)).alias("singleton"),
    ).first()
    anchor_result = stages.run("check_anchor", lambda: checks.check_anchor_first(written))
    dist_result = stages.run("check_distances", lambda: checks.check_distance_matrices(written))
    nodes.unpersist()
    edges.unpersist()
    yield dg.MaterializeResult(metadata={
        **_table_metadata(context, session, path, day, int(stats["rows"])),
        "mode": mode,
        **extra,
        "anchors": n_anchors,
        "truncated_views": int(stats["truncated"]),
        "single_node_views": int(stats["singleton"]),
        "mean_view_nodes": round(float(stats["mean_nodes"]), 2),
        "max_view_nodes": int(stats["max_nodes"]),
        "caps": dg.MetadataValue.json({"hub_cap": cfg.hub_cap, "max_view_nodes": cfg.max_view_nodes,
                                       "broad_fanout": list(cfg.broad_fanout),
                                       "narrow_fanout": list(cfg.narrow_fanout)}),
        "views_config": views_fingerprint(cfg),
        "stage_seconds": stages.metadata(),
    })
    yield _check(CHECK_ANCHOR, "graph_views", anchor_result, day)
    yield _check(CHECK_DISTANCES, "graph_views", dist_result, day)
