"""The four published tables of the output contract, built from the model's internal tables.

Inputs (one run date): ``model_outputs`` (per entity: embedding, top-1 model cluster per level, confidence),
``model_hierarchy`` (per level and model cluster: parent, prototype), bronze ``entities`` (text for labels),
``graph_edges`` (for the super-graph) and, when there is one, the previous publication (for stable IDs).

Heavy work stays in Spark: overlaps between versions, cluster sizes, term counts and the super-graph are
aggregated to per-cluster rows; only those (clusters x clusters, clusters x terms) reach the driver, where
:mod:`hir_pipeline.publish` decides the published IDs and labels; the decisions go back as a small
broadcast table.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from hir_pipeline.publish.labels import MIN_TERM_LENGTH, SPLIT_PATTERN, STOPWORDS, TERM_PATTERN, make_label, tfidf_terms
from hir_pipeline.publish.stable_ids import (
    Clusters,
    MatchConfig,
    StableHierarchy,
    overlap_matrix,
    published_clusters,
    stabilize,
)

#: Column order of ``cluster_profiles`` (the contract's key columns first, extras after).
PROFILE_COLUMNS = ("level", "cluster_id", "parent_cluster_id", "size", "label", "top_members", "label_terms",
                   "size_by_type", "prototype", "match", "model_version", "run_date")

#: Write order: node_embeddings last, it is the commit marker readers resolve a publication by
#: (``hir_pipeline.query``): a run killed before it leaves the previous publication as the readable one.
WRITE_ORDER = ("cluster_assignments", "interest_supergraph", "cluster_profiles", "node_embeddings")
MARKER_TABLE = "node_embeddings"

_MAPPING_DDL = "level int, model_cluster_id int, cluster_id int, parent_cluster_id int, match string"


@dataclass(frozen=True)
class PublishSettings:
    """How the publication is built.

    Args:
        match: thresholds of the stable-ID matching.
        top_members: entity IDs listed per cluster in ``cluster_profiles.top_members``.
        top_member_types: entity types eligible as top members (content entities by default: user IDs say
            nothing to a reader and are personal data).
        label_terms: TF-IDF terms in a cluster label.
        max_terms_per_cluster: most frequent terms per cluster brought to the driver for TF-IDF (document
            frequencies are computed over all terms in Spark).
        supergraph_edge_types: ``graph_edges.edge_type`` values aggregated into the super-graph (None: all).
    """

    match: MatchConfig = field(default_factory=MatchConfig)
    top_members: int = 10
    top_member_types: tuple[str, ...] = CONTENT_ENTITY_TYPES
    label_terms: int = 3
    max_terms_per_cluster: int = 200
    supergraph_edge_types: tuple[str, ...] | None = None


@dataclass
class Publication:
    """The four tables of one run date (lazy DataFrames) and how their cluster IDs were decided.

    Attributes:
        tables: table name -> DataFrame with that table's columns.
        stable: published IDs, parents and stability per level.
        model_version: the published model version.
        previous_run_date: run date of the publication the IDs were matched to (None: first one).
    """

    tables: dict[str, DataFrame]
    stable: StableHierarchy
    model_version: str
    previous_run_date: dt.date | None


# --- reading what is already published -----------------------------------------------------------


def previous_run_date(published: DataFrame | None, run_date: dt.date) -> dt.date | None:
    """Latest run date before ``run_date`` in a published table (None: nothing earlier)."""
    if published is None:
        return None
    return published.where(F.col("run_date") < F.lit(run_date)).agg(F.max("run_date")).first()[0]


def next_cluster_ids(profiles: DataFrame | None, run_date: dt.date, n_levels: int) -> list[int]:
    """Per level, the first cluster ID never published on an earlier run date (fresh IDs start there).

    Only earlier dates count, like every input of a run: re-running a date (even an old one, with later dates
    already published) mints the same IDs again, and forward in time an ID is never reused.
    """
    out = [0] * n_levels
    if profiles is None:
        return out
    rows = profiles.where(F.col("run_date") < F.lit(run_date)).groupBy("level").agg(F.max("cluster_id")).collect()
    for level, top in rows:
        if level < n_levels and top is not None:
            out[level] = int(top) + 1
    return out


# --- model outputs, long form --------------------------------------------------------------------


def long_assignments(model_outputs: DataFrame) -> DataFrame:
    """One row per entity and level: ``entity_id, entity_type, level, model_cluster_id, confidence``."""
    zipped = F.arrays_zip(F.col("cluster_ids").alias("c"), F.col("confidences").alias("p"))
    return model_outputs.select("entity_id", "entity_type", F.posexplode(zipped).alias("level", "z")).select(
        "entity_id", "entity_type", F.col("level").cast("int").alias("level"),
        F.col("z.c").cast("int").alias("model_cluster_id"), F.col("z.p").cast("float").alias("confidence"),
    )


def model_version_of(model_outputs: DataFrame) -> str:
    """The single model version of a run date's ``model_outputs`` (several versions are an error)."""
    versions = [r[0] for r in model_outputs.select("model_version").distinct().collect()]
    if len(versions) != 1:
        raise ValueError(f"expected one model_version in model_outputs, found {sorted(map(str, versions))}")
    return str(versions[0])


# --- stable IDs ----------------------------------------------------------------------------------


def _level_sizes(new_long: DataFrame) -> list[dict[int, int]]:
    sizes: dict[int, dict[int, int]] = defaultdict(dict)
    for level, cluster, n in new_long.groupBy("level", "model_cluster_id").count().collect():
        sizes[int(level)][int(cluster)] = int(n)
    return [sizes.get(lvl, {}) for lvl in range(max(sizes, default=-1) + 1)]


def stable_mapping(
    spark: SparkSession,
    new_long: DataFrame,
    hierarchy: DataFrame,
    previous_assignments: DataFrame | None,
    previous_profiles: DataFrame | None,
    next_ids: Sequence[int],
    config: MatchConfig,
) -> tuple[DataFrame, StableHierarchy]:
    """Decide the published ID and parent of every published model cluster.

    Args:
        spark: session for the small result table.
        new_long: :func:`long_assignments` of the new version.
        hierarchy: the new version's ``model_hierarchy`` rows (``level, cluster_id, parent_cluster_id,
            prototype``).
        previous_assignments: ``cluster_assignments`` of the previous publication (None: first version).
        previous_profiles: ``cluster_profiles`` of the previous publication (sizes, prototypes).
        next_ids: per level, the first never-published ID.
        config: matching thresholds.

    Returns:
        ``(mapping, stable)``: ``mapping`` has ``level, model_cluster_id, cluster_id, parent_cluster_id,
        match`` (one row per published cluster).
    """
    hier = hierarchy.select("level", "cluster_id", "parent_cluster_id", "prototype").collect()
    n_levels = max(int(r["level"]) for r in hier) + 1 if hier else 0
    sizes = _level_sizes(new_long)
    if len(sizes) > n_levels:
        raise ValueError(f"model_outputs has {len(sizes)} levels but model_hierarchy only {n_levels}")
    sizes += [{} for _ in range(n_levels - len(sizes))]
    parents: list[dict[int, int | None]] = [{} for _ in range(n_levels)]
    protos: list[dict[int, np.ndarray]] = [{} for _ in range(n_levels)]
    for r in hier:
        lvl, c = int(r["level"]), int(r["cluster_id"])
        parents[lvl][c] = None if r["parent_cluster_id"] is None else int(r["parent_cluster_id"])
        protos[lvl][c] = np.asarray(r["prototype"], dtype=np.float64) if r["prototype"] is not None else None
    for lvl, level_sizes in enumerate(sizes):
        unknown = set(level_sizes) - set(parents[lvl])
        if unknown:
            raise ValueError(f"level {lvl}: clusters {sorted(unknown)[:5]} are assigned but not in model_hierarchy")
    keep = published_clusters(sizes, parents)
    new_levels = [
        Clusters(ids, [sizes[lvl].get(c, 0) for c in ids], _stack([protos[lvl].get(c) for c in ids]))
        for lvl, ids in enumerate(keep)
    ]
    old_levels: list[Clusters | None] = [None] * n_levels
    overlaps: list[np.ndarray | None] = [None] * n_levels
    if previous_assignments is not None and previous_profiles is not None:
        old_rows: dict[int, list] = defaultdict(list)
        for r in previous_profiles.select("level", "cluster_id", "size", "prototype").collect():
            old_rows[int(r["level"])].append(r)
        pairs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        prev = previous_assignments.select("entity_id", "level", F.col("cluster_id").alias("old_cluster_id"))
        shared = new_long.join(prev, ["entity_id", "level"]).groupBy("level", "model_cluster_id", "old_cluster_id")
        for lvl, new, old, n in shared.count().collect():
            pairs[int(lvl)].append((int(new), int(old), int(n)))
        for lvl in range(n_levels):
            rows = sorted(old_rows.get(lvl, []), key=lambda r: r["cluster_id"])
            if not rows:
                continue
            old_levels[lvl] = Clusters([r["cluster_id"] for r in rows], [r["size"] for r in rows],
                                       _stack([r["prototype"] for r in rows]))
            overlaps[lvl] = overlap_matrix(pairs.get(lvl, []), new_levels[lvl].ids, old_levels[lvl].ids)
    stable = stabilize(new_levels, parents, old_levels, overlaps, next_ids, config)
    rows = [
        (lvl, model_id, published, stable.parents[lvl][published], match.method[model_id])
        for lvl, match in enumerate(stable.levels)
        for model_id, published in sorted(match.mapping.items())
    ]
    return spark.createDataFrame(rows, _MAPPING_DDL), stable


def _stack(vectors: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """``[K, D]`` prototypes, or None when any is missing or the dimensions disagree."""
    if not vectors or any(v is None for v in vectors) or len({len(v) for v in vectors}) != 1:
        return None
    return np.stack([np.asarray(v, dtype=np.float64) for v in vectors])


# --- the four tables -----------------------------------------------------------------------------


def node_embeddings(model_outputs: DataFrame, run_date: dt.date) -> DataFrame:
    """``node_embeddings``: the model's (already L2-normalised) embedding of every entity."""
    has_view = F.col("has_view") if "has_view" in model_outputs.columns else F.lit(None).cast("boolean")
    return model_outputs.select(
        "entity_id", "entity_type", F.col("embedding").cast("array<float>").alias("embedding"),
        has_view.alias("has_view"), F.col("model_version").cast("string").alias("model_version"),
        F.lit(run_date).cast("date").alias("run_date"),
    )


def cluster_assignments(new_long: DataFrame, mapping: DataFrame, model_version: str, run_date: dt.date) -> DataFrame:
    """``cluster_assignments``: every entity at every level, with its published cluster and confidence."""
    ids = F.broadcast(mapping.select("level", "model_cluster_id", "cluster_id"))
    return new_long.join(ids, ["level", "model_cluster_id"]).select(
        "entity_id", "entity_type", "level", "cluster_id", "confidence",
        F.lit(model_version).alias("model_version"), F.lit(run_date).cast("date").alias("run_date"),
    )


def interest_supergraph(
    edges: DataFrame,
    assignments: DataFrame,
    model_version: str,
    run_date: dt.date,
    edge_types: Sequence[str] | None = None,
) -> DataFrame:
    """``interest_supergraph``: per level, the summed weight of graph edges between members of two clusters.

    ``graph_edges`` stores every edge in both directions, so the super-graph is symmetric; ``src == dst``
    rows carry the weight inside a cluster.

    Args:
        edges: ``graph_edges`` rows of the run date (``src_id, dst_id, edge_type, weight``).
        assignments: :func:`cluster_assignments` (published IDs).
        model_version: written on every row.
        run_date: written on every row.
        edge_types: keep only these edge types (None: all).
    """
    if edge_types is not None:
        edges = edges.where(F.col("edge_type").isin(list(edge_types)))
    a = assignments.select("entity_id", "level", "cluster_id")
    src = a.select(F.col("entity_id").alias("src_id"), "level", F.col("cluster_id").alias("src_cluster"))
    dst = a.select(F.col("entity_id").alias("dst_id"), "level", F.col("cluster_id").alias("dst_cluster"))
    joined = edges.select("src_id", "dst_id", "weight").join(src, "src_id").join(dst, ["dst_id", "level"])
    return joined.groupBy("level", "src_cluster", "dst_cluster").agg(
        F.sum("weight").alias("weight"), F.count(F.lit(1)).alias("n_edges"),
    ).select(
        "level", "src_cluster", "dst_cluster", F.col("weight").cast("double"), F.col("n_edges").cast("long"),
        F.lit(model_version).alias("model_version"), F.lit(run_date).cast("date").alias("run_date"),
    )


def term_counts(assignments: DataFrame, entities: DataFrame, max_terms: int) -> tuple[list, list]:
    """Per (level, cluster) term counts of the members' titles and descriptions, and per-level document
    frequencies; tokenized in Spark exactly like :func:`hir_pipeline.publish.labels.tokenize`.

    Returns:
        ``(counts, doc_freq)`` rows: ``(level, cluster_id, term, n)`` (each cluster's ``max_terms`` most
        frequent terms) and ``(level, term, df)``.
    """
    text = F.lower(F.concat_ws(" ", F.col("title"), F.col("description")))
    terms = entities.select("entity_id", F.explode(F.split(text, SPLIT_PATTERN)).alias("term")).where(
        (F.length("term") >= MIN_TERM_LENGTH) & F.col("term").rlike(TERM_PATTERN)
        & ~F.col("term").isin(sorted(STOPWORDS))
    )
    counts = assignments.select("entity_id", "level", "cluster_id").join(terms, "entity_id") \
        .groupBy("level", "cluster_id", "term").agg(F.count(F.lit(1)).alias("n")).persist()
    rank = F.row_number().over(Window.partitionBy("level", "cluster_id").orderBy(F.desc("n"), "term"))
    top = counts.withColumn("_rank", rank).where(F.col("_rank") <= max_terms).drop("_rank").collect()
    df = counts.groupBy("level", "term").agg(F.count(F.lit(1)).alias("df")).collect()
    counts.unpersist()
    return top, df


def cluster_labels(
    assignments: DataFrame, entities: DataFrame, clusters_per_level: Sequence[int], n_terms: int, max_terms: int
) -> dict[tuple[int, int], list[str]]:
    """(level, published cluster) -> top TF-IDF terms of its members' text.

    Args:
        assignments: published assignments (``entity_id, level, cluster_id``).
        entities: ``entity_id, title, description``.
        clusters_per_level: number of published clusters per level (the idf's document count).
        n_terms: terms per label.
        max_terms: most frequent terms per cluster brought to the driver.
    """
    top, df_rows = term_counts(assignments, entities, max_terms)
    by_level: dict[int, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for level, cluster, term, n in top:
        by_level[int(level)][int(cluster)][term] = int(n)
    doc_freq: dict[int, dict[str, int]] = defaultdict(dict)
    for level, term, n in df_rows:
        doc_freq[int(level)][term] = int(n)
    out: dict[tuple[int, int], list[str]] = {}
    for level, counts in by_level.items():
        n_docs = clusters_per_level[level] if level < len(clusters_per_level) else len(counts)
        terms = tfidf_terms(counts, n_terms, doc_freq[level], n_docs)
        out.update({(level, c): t for c, t in terms.items()})
    return out


def cluster_profiles(
    spark: SparkSession,
    assignments: DataFrame,
    mapping: DataFrame,
    stable: StableHierarchy,
    hierarchy: DataFrame,
    entities: DataFrame,
    model_version: str,
    run_date: dt.date,
    settings: PublishSettings,
) -> DataFrame:
    """``cluster_profiles``: per published cluster its parent, size (members at its level), size by entity
    type, label (top TF-IDF terms of its members' text), top members (highest confidence, content types),
    prototype (kept for the next version's stable-ID fallback) and how its ID was decided (``match``).

    Args:
        spark: session for the small label table.
        assignments: :func:`cluster_assignments` (published IDs).
        mapping: :func:`stable_mapping`'s table (model cluster -> published ID, parent, match).
        stable: :func:`stable_mapping`'s decisions (which clusters are published).
        hierarchy: ``model_hierarchy`` rows (prototypes, by model cluster).
        entities: ``entity_id, title, description`` for the labels.
        model_version: written on every row.
        run_date: written on every row.
        settings: label and top-member settings.
    """
    published = [sorted(level.mapping.values()) for level in stable.levels]
    labels = cluster_labels(assignments, entities, [len(ids) for ids in published], settings.label_terms,
                            settings.max_terms_per_cluster)
    keys = [(lvl, cid) for lvl, ids in enumerate(published) for cid in ids]
    label_rows = [(lvl, cid, make_label(labels.get((lvl, cid), []), lvl, cid), labels.get((lvl, cid), []))
                  for lvl, cid in keys]
    label_df = spark.createDataFrame(label_rows, "level int, cluster_id int, label string, label_terms array<string>")
    by_type = assignments.groupBy("level", "cluster_id", "entity_type").count().groupBy("level", "cluster_id").agg(
        F.sum("count").alias("size"), F.map_from_entries(F.collect_list(F.struct("entity_type", "count"))).alias(
            "size_by_type"))
    rank = F.row_number().over(Window.partitionBy("level", "cluster_id").orderBy(F.desc("confidence"), "entity_id"))
    top = (
        assignments.where(F.col("entity_type").isin(list(settings.top_member_types)))
        .withColumn("_rank", rank).where(F.col("_rank") <= settings.top_members)
        .groupBy("level", "cluster_id")
        .agg(F.sort_array(F.collect_list(F.struct("_rank", "entity_id"))).alias("_top"))
        .select("level", "cluster_id", F.transform("_top", lambda s: s["entity_id"]).alias("top_members"))
    )
    protos = hierarchy.select("level", F.col("cluster_id").alias("model_cluster_id"),
                              F.col("prototype").cast("array<float>").alias("prototype"))
    return (
        F.broadcast(mapping).join(protos, ["level", "model_cluster_id"], "left")
        .join(label_df, ["level", "cluster_id"], "left")
        .join(by_type, ["level", "cluster_id"], "left")
        .join(top, ["level", "cluster_id"], "left")
        .select(
            "level", "cluster_id", "parent_cluster_id", F.coalesce("size", F.lit(0)).cast("long").alias("size"),
            "label", "label_terms",
            F.coalesce("top_members", F.array().cast("array<string>")).alias("top_members"),
            F.coalesce("size_by_type", F.create_map().cast("map<string,bigint>")).alias("size_by_type"),
            "prototype", "match", F.lit(model_version).alias("model_version"),
            F.lit(run_date).cast("date").alias("run_date"),
        )
        .select(*PROFILE_COLUMNS)
    )


def build_publication(
    spark: SparkSession,
    model_outputs: DataFrame,
    model_hierarchy: DataFrame,
    entities: DataFrame,
    edges: DataFrame,
    run_date: dt.date,
    previous_assignments: DataFrame | None = None,
    previous_profiles: DataFrame | None = None,
    next_ids: Sequence[int] | None = None,
    previous_date: dt.date | None = None,
    settings: PublishSettings | None = None,
) -> Publication:
    """The four published tables of ``run_date``.

    Args:
        spark: the session.
        model_outputs: ``model_outputs`` rows of the run date.
        model_hierarchy: ``model_hierarchy`` rows of the run date.
        entities: bronze entities (``entity_id, title, description``) for the labels.
        edges: ``graph_edges`` rows to aggregate into the super-graph.
        run_date: written on every row.
        previous_assignments: ``cluster_assignments`` of the previous publication (None: first version).
        previous_profiles: ``cluster_profiles`` of the previous publication.
        next_ids: per level, the first never-published ID (:func:`next_cluster_ids`).
        previous_date: run date of the previous publication (reported only).
        settings: see :class:`PublishSettings`.

    The returned DataFrames depend on a persisted long form of ``model_outputs``; call
    ``publication.tables[...].sparkSession.catalog.clearCache()`` or let the session end to free it.
    """
    settings = settings or PublishSettings()
    version = model_version_of(model_outputs)
    new_long = long_assignments(model_outputs).persist()
    hierarchy = model_hierarchy.select("level", "cluster_id", "parent_cluster_id", "prototype")
    # next_ids shorter than the hierarchy (or None) means 0 for the missing levels (stabilize pads)
    mapping, stable = stable_mapping(spark, new_long, hierarchy, previous_assignments, previous_profiles,
                                     list(next_ids or []), settings.match)
    mapping = mapping.persist()
    assignments = cluster_assignments(new_long, mapping, version, run_date)
    tables = {
        "node_embeddings": node_embeddings(model_outputs, run_date),
        "cluster_assignments": assignments,
        "interest_supergraph": interest_supergraph(edges, assignments, version, run_date,
                                                   settings.supergraph_edge_types),
        "cluster_profiles": cluster_profiles(spark, assignments, mapping, stable, hierarchy, entities, version,
                                             run_date, settings),
    }
    return Publication(tables=tables, stable=stable, model_version=version, previous_run_date=previous_date)


def write_publication_table(df: DataFrame, path: str, day: dt.date, model_version: str) -> None:
    """Replace the ``run_date = day`` partition of one published table in a single Delta commit.

    The commit's ``userMetadata`` records ``{"run_date", "model_version"}`` (``DESCRIBE HISTORY``).
    """
    meta = json.dumps({"run_date": str(day), "model_version": model_version}, sort_keys=True)
    (df.write.format("delta").mode("overwrite").option("replaceWhere", f"run_date = '{day}'")
     .option("userMetadata", meta).partitionBy("run_date").save(path))


def last_commit(spark: SparkSession, path: str) -> tuple[int, int]:
    """(version, rows written) of the table's latest commit, from the Delta history (no re-read of the data)."""
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(1).select("version", "operationMetrics").first()
    return int(row["version"]), int((row["operationMetrics"] or {}).get("numOutputRows", 0))


# --- one publish run: read the lake, build, write in order ----------------------------------------


class MissingInput(LookupError):
    """An upstream table (model outputs, graph edges) has nothing for the run date."""


@dataclass
class PublishInputs:
    """Everything a publication of one run date is built from (lazy DataFrames).

    Attributes:
        model_outputs: ``model_outputs`` rows of the run date.
        model_hierarchy: ``model_hierarchy`` rows of the run date.
        n_levels: levels of the hierarchy.
        entities: bronze entities (labels).
        edges: ``graph_edges`` snapshot used for the super-graph.
        edges_date: run date of that snapshot (the latest on or before the run date).
        previous_assignments: ``cluster_assignments`` of the previous publication (None: first one).
        previous_profiles: ``cluster_profiles`` of the previous publication.
        previous_date: run date of the previous publication.
        next_ids: per level the first ID never published on an earlier date.
    """

    model_outputs: DataFrame
    model_hierarchy: DataFrame
    n_levels: int
    entities: DataFrame
    edges: DataFrame
    edges_date: dt.date
    previous_assignments: DataFrame | None
    previous_profiles: DataFrame | None
    previous_date: dt.date | None
    next_ids: list[int]


def read_inputs(spark: SparkSession, path: Callable[[str], str], run_date: dt.date) -> PublishInputs:
    """Read what :func:`build_publication` needs from the lake.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        run_date: the run date being published.

    Raises:
        MissingInput: the model did not run for ``run_date``, or there is no graph snapshot on or before it.
    """
    from spark_jobs.delta_io import read_table, table_exists

    def on(df: DataFrame, day: dt.date) -> DataFrame:
        return df.where(F.col("run_date") == F.lit(day))

    model: dict[str, DataFrame] = {}
    for table in ("model_outputs", "model_hierarchy"):
        if not table_exists(spark, path(table)):
            raise MissingInput(f"{table} does not exist: materialize interest_model for {run_date} first")
        model[table] = on(read_table(spark, path(table)), run_date)
    top = model["model_hierarchy"].agg(F.max("level")).first()[0]
    if top is None or model["model_outputs"].isEmpty():
        raise MissingInput(f"model_outputs has no rows for run date {run_date}: "
                           f"materialize interest_model for {run_date} first")
    n_levels = int(top) + 1
    if not table_exists(spark, path("graph_edges")):
        raise MissingInput(f"graph_edges does not exist: materialize graph_edges for {run_date} first")
    edges = read_table(spark, path("graph_edges"))
    edges_date = edges.where(F.col("run_date") <= F.lit(run_date)).agg(F.max("run_date")).first()[0]
    if edges_date is None:
        raise MissingInput(f"graph_edges has no snapshot on or before {run_date}")
    prev_a = prev_p = prev_date = None
    next_ids = [0] * n_levels
    if table_exists(spark, path("cluster_assignments")) and table_exists(spark, path("cluster_profiles")):
        profiles = read_table(spark, path("cluster_profiles"))
        prev_date = previous_run_date(profiles, run_date)
        next_ids = next_cluster_ids(profiles, run_date, n_levels)
        if prev_date is not None:
            prev_a = on(read_table(spark, path("cluster_assignments")), prev_date)
            prev_p = on(profiles, prev_date)
    return PublishInputs(model["model_outputs"], model["model_hierarchy"], n_levels,
                         read_table(spark, path("entities")), on(edges, edges_date), edges_date,
                         prev_a, prev_p, prev_date, next_ids)


def build_from_inputs(spark: SparkSession, inputs: PublishInputs, run_date: dt.date,
                      settings: PublishSettings | None = None) -> Publication:
    """:func:`build_publication` over :func:`read_inputs`."""
    return build_publication(spark, inputs.model_outputs, inputs.model_hierarchy, inputs.entities, inputs.edges,
                             run_date, inputs.previous_assignments, inputs.previous_profiles, inputs.next_ids,
                             inputs.previous_date, settings)


def write_publication(spark: SparkSession, publication: Publication, path: Callable[[str], str], run_date: dt.date,
                      on_written: Callable[[str, int, int], None] | None = None) -> dict[str, tuple[int, int]]:
    """Write the four tables in :data:`WRITE_ORDER` (marker last), one Delta commit each.

    Args:
        spark: the session.
        publication: from :func:`build_publication`.
        path: table name -> Delta path.
        run_date: the partition replaced.
        on_written: called with ``(table, delta_version, rows)`` after each commit (progress logging).

    Returns:
        table -> (Delta version, rows written).
    """
    written: dict[str, tuple[int, int]] = {}
    for table in WRITE_ORDER:
        write_publication_table(publication.tables[table], path(table), run_date, publication.model_version)
        written[table] = last_commit(spark, path(table))
        if on_written is not None:
            on_written(table, *written[table])
    return written


def publish(spark: SparkSession, path: Callable[[str], str], run_date: dt.date,
            settings: PublishSettings | None = None) -> tuple[Publication, dict[str, tuple[int, int]]]:
    """One publish run without Dagster or MLflow: read, build, write (what the publish asset does first)."""
    publication = build_from_inputs(spark, read_inputs(spark, path, run_date), run_date, settings)
    return publication, write_publication(spark, publication, path, run_date)
