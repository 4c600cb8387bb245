"""Graph: the typed, weighted, time-decayed interaction graph and its sampled training views.

``graph_edges`` -> ``graph_nodes`` -> ``graph_views`` wrap :mod:`spark_jobs.graph`; each reads its inputs from
the lake and writes one Delta table. All three read the graph settings from one resource, ``graph_settings``
(:class:`resources.GraphSettingsResource`, shared with ``evaluation_report``), so their tables never disagree on
them; only run behaviour (progress interval, incremental views) is per-asset run config.

Snapshots. Every table keeps **one snapshot per run date** (:mod:`spark_jobs.graph.snapshots`): a run of date D
replaces exactly the ``run_date = D`` partition, so re-running D never duplicates and never touches other dates.
Why keep old dates: the model of date D reads exactly D's graph, and the nightly increment of the views diffs D
against the previous snapshot. Old snapshots are deterministic functions of the bronze tables and the graph
settings, so they may be deleted to save space (a metadata-only Delta ``DELETE WHERE run_date < ...``) and rebuilt
by re-running their date: the weekly ``lake_maintenance`` (:mod:`assets.maintenance`) keeps the newest
``keep_graph_run_dates`` only.

Edges and nodes are rebuilt in full every run: one more day of decay changes every activity weight anyway, and
both are one aggregation over the events. The views are the expensive part; see :func:`graph_views` for the
increment.
"""

import datetime as dt
from collections.abc import Iterator

import dagster as dg
from pydantic import Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from assets.write_audit import WriteAudit
from resources import GraphSettingsResource, LakeResource, SparkResource
from spark_jobs.delta_io import MissingInput, latest_version, read_run_date, read_table, replace_run_date
from spark_jobs.graph import build_edges, build_nodes, checks, snapshots

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


def require_snapshot(session: SparkSession, lake: LakeResource, table: str, day: dt.date) -> DataFrame:
    """The ``day`` snapshot of an upstream graph table; fails clearly when that date was never built."""
    try:
        return snapshots.require_snapshot(session, lake.path, table, day)
    except MissingInput as exc:
        raise dg.Failure(str(exc)) from exc


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
    stages = spark_stages(context, session, context.asset_key.to_user_string(), config.progress_every_s)
    path = lake.path("graph_edges")
    bronze = {t: read_table(session, lake.path(t)) for t in ("entities", "relations", "events")}
    audit = WriteAudit.begin(session, lake, ["graph_edges"])
    stages.run("build_and_write", lambda: replace_run_date(
        build_edges(bronze["entities"], bronze["relations"], bronze["events"], day, cfg), path, day,
        add_columns=True))  # a lake written before graph_edges had last_event_ts gains the column
    audit.wrote("graph_edges")
    written = read_run_date(session, path, day)
    by_type = {r["edge_type"]: int(r["count"]) for r in written.groupBy("edge_type").count().collect()}
    check = _check(CHECK_WEIGHTS, "graph_edges",
                   stages.run("check", lambda: checks.check_weights_finite_positive(written)), day)
    metadata = _table_metadata(context, session, path, day, sum(by_type.values()))
    yield dg.MaterializeResult(metadata={
        **metadata,
        "edges_by_type": dg.MetadataValue.json(dict(sorted(by_type.items()))),
        "stage_seconds": dg.MetadataValue.json(stages.seconds),
        **audit.settle(context, [check]),
    })
    yield check


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
    stages = spark_stages(context, session, context.asset_key.to_user_string(), config.progress_every_s)
    path = lake.path("graph_nodes")
    edges = require_snapshot(session, lake, "graph_edges", day)
    entities = read_table(session, lake.path("entities"))
    audit = WriteAudit.begin(session, lake, ["graph_nodes"])
    stages.run("build_and_write", lambda: replace_run_date(build_nodes(entities, edges, day, cfg), path, day))
    audit.wrote("graph_nodes")
    written = read_run_date(session, path, day)
    stats = written.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(F.col("degree") == 0, 1)).alias("isolated"),
        F.coalesce(F.max("degree"), F.lit(0)).alias("max_degree"),
        F.count(F.when(F.col("has_history"), 1)).alias("with_history"),
    ).first()
    by_type = {r["entity_type"]: int(r["count"]) for r in written.groupBy("entity_type").count().collect()}
    check = _check(CHECK_DANGLING, "graph_nodes",
                   stages.run("check", lambda: checks.check_no_dangling_edges(written, edges)), day)
    metadata = _table_metadata(context, session, path, day, int(stats["rows"]))
    yield dg.MaterializeResult(metadata={
        **metadata,
        "nodes_by_type": dg.MetadataValue.json(dict(sorted(by_type.items()))),
        "isolated_nodes": int(stats["isolated"]),
        "nodes_with_history": int(stats["with_history"]),
        "max_degree": int(stats["max_degree"]),
        "stage_seconds": dg.MetadataValue.json(stages.seconds),
        **audit.settle(context, [check]),
    })
    yield check


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

    Whether the increment applies, and building it, is :func:`spark_jobs.graph.snapshots.plan_views`: only the
    anchors affected since the latest earlier snapshot are sampled again, the other views are carried over (equal
    to a full rebuild, tested); a full rebuild runs when there is no earlier snapshot, when ``incremental`` is
    off, or when it was built with other view settings, edge-type ids or entity types. Metadata says which, and
    how many anchors were recomputed vs reused.
    """
    day, session, cfg = run_date(context), spark.get_session(), graph_settings.graph_config()
    stages = spark_stages(context, session, context.asset_key.to_user_string(), config.progress_every_s)
    path = lake.path("graph_views")
    nodes = require_snapshot(session, lake, "graph_nodes", day).persist()
    edges = require_snapshot(session, lake, "graph_edges", day).persist()
    plan = snapshots.plan_views(session, lake.path, day, cfg, nodes, edges, config.incremental, stages)
    context.log.info(f"graph_views: {plan.describe()}")
    audit = WriteAudit.begin(session, lake, ["graph_views"])
    stages.run("sample_structure_and_write", lambda: snapshots.write_views(plan.views, path, day, cfg))
    audit.wrote("graph_views")

    written = read_run_date(session, path, day)
    stats = written.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(F.col("truncated"), 1)).alias("truncated"),
        F.coalesce(F.avg(F.size("nodes")), F.lit(0.0)).alias("mean_nodes"),
        F.coalesce(F.max(F.size("nodes")), F.lit(0)).alias("max_nodes"),
        F.count(F.when(F.size("nodes") == 1, 1)).alias("singleton"),
    ).first()
    results = [
        _check(CHECK_ANCHOR, "graph_views", stages.run("check_anchor", lambda: checks.check_anchor_first(written)),
               day),
        _check(CHECK_DISTANCES, "graph_views",
               stages.run("check_distances", lambda: checks.check_distance_matrices(written)), day),
    ]
    nodes.unpersist()
    edges.unpersist()
    metadata = _table_metadata(context, session, path, day, int(stats["rows"]))
    yield dg.MaterializeResult(metadata={
        **metadata,
        **plan.metadata(),
        "anchors": plan.anchors,
        "truncated_views": int(stats["truncated"]),
        "single_node_views": int(stats["singleton"]),
        "mean_view_nodes": round(float(stats["mean_nodes"]), 2),
        "max_view_nodes": int(stats["max_nodes"]),
        "caps": dg.MetadataValue.json({"hub_cap": cfg.hub_cap, "max_view_nodes": cfg.max_view_nodes,
                                       "broad_fanout": list(cfg.broad_fanout),
                                       "narrow_fanout": list(cfg.narrow_fanout)}),
        "views_config": snapshots.views_fingerprint(cfg),
        "stage_seconds": dg.MetadataValue.json(stages.seconds),
        **audit.settle(context, results),
    })
    yield from results
