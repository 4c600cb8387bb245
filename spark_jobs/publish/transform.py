"""Publish, transform: the model's internal tables -> the four published tables of the output contract.

Inputs (one run date): ``model_outputs`` (per entity: embedding, top-1 model cluster per level, confidence),
``model_hierarchy`` (per level and model cluster: parent, prototype), bronze ``entities`` (text for labels),
``graph_edges`` (for the super-graph) and, when there is one, the previous publication (for stable IDs).

Heavy work stays in Spark: cluster sizes, term counts and the super-graph are aggregated to per-cluster rows;
only those (clusters x terms) reach the driver, where :mod:`hir_pipeline.publish.labels` picks the labels. The
published cluster IDs come from :mod:`spark_jobs.publish.matching`.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from hir_pipeline.contracts import CONTENT_ENTITY_TYPES, OUTPUT_SCHEMAS
from hir_pipeline.publish.labels import (
    MIN_TERM_LENGTH,
    SPLIT_PATTERN,
    STOPWORDS,
    TERM_PATTERN,
    LabelComparison,
    LevelTerms,
    TermCounts,
    ancestor_chains,
    level_labels,
    make_label,
    reference_keys,
    reference_members,
)
from hir_pipeline.publish.stable_ids import MatchConfig, StableHierarchy
from spark_jobs.publish.matching import ClusterIds, stable_mapping

#: Column order of `cluster_profiles` (the contract's key columns first, extras after).
PROFILE_COLUMNS = tuple(c.name for c in OUTPUT_SCHEMAS["cluster_profiles"])


@dataclass(frozen=True)
class PublishSettings:
    """How the publication is built.

    Args:
        match: thresholds of the stable-ID matching.
        top_members: entity IDs listed per cluster in ``cluster_profiles.top_members``.
        top_member_types: entity types eligible as top members (content entities by default: user IDs say
            nothing to a reader and are personal data).
        label_terms: terms in a cluster label (those that most set its members apart from their comparison set:
            :mod:`hir_pipeline.publish.labels`).
        label_comparison: what a cluster's terms are compared with: ``"catalogue"`` (the whole level: a label says
            what the cluster is about) or ``"parent"`` (its parent cluster: what sets it apart from its siblings).
        label_entity_types: entity types whose text and attribute values make the labels (content entities by
            default: users' attributes are personal data and say little about an interest).
        max_terms_per_cluster: most frequent terms per cluster brought to the driver for the lift ranking
            (their counts in each comparison set are exact: summed in Spark over all its members).
        supergraph_edge_types: ``graph_edges.edge_type`` values aggregated into the super-graph (None: all).
    """

    match: MatchConfig = field(default_factory=MatchConfig)
    top_members: int = 10
    top_member_types: tuple[str, ...] = CONTENT_ENTITY_TYPES
    label_terms: int = 3
    label_comparison: LabelComparison = "catalogue"
    label_entity_types: tuple[str, ...] = CONTENT_ENTITY_TYPES
    max_terms_per_cluster: int = 200
    supergraph_edge_types: tuple[str, ...] | None = None


@dataclass
class PublishInputs:
    """Everything a publication of one run date is built from (lazy DataFrames).

    Attributes:
        model_outputs: ``model_outputs`` rows of the run date.
        model_hierarchy: ``model_hierarchy`` rows of the run date.
        entities: bronze entities (``entity_id, entity_type, title, description, attributes``) for the labels.
        edges: ``graph_edges`` rows to aggregate into the super-graph.
        previous_assignments: ``cluster_assignments`` of the previous publication (None: first one).
        previous_profiles: ``cluster_profiles`` of the previous publication.
        previous_date: run date of the previous publication (reported only).
        next_ids: per level the first ID never published on an earlier date
            (:func:`spark_jobs.publish.matching.next_cluster_ids`); missing levels start at 0.
        n_levels: levels of the hierarchy (reported only; set by :func:`spark_jobs.publish.io.read_inputs`).
        edges_date: run date of the ``graph_edges`` snapshot (reported only; the latest on or before the run date).
    """

    model_outputs: DataFrame
    model_hierarchy: DataFrame
    entities: DataFrame
    edges: DataFrame
    previous_assignments: DataFrame | None = None
    previous_profiles: DataFrame | None = None
    previous_date: dt.date | None = None
    next_ids: Sequence[int] = ()
    n_levels: int | None = None
    edges_date: dt.date | None = None


@dataclass
class PublicationFrames:
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


# --- model outputs, long form --------------------------------------------------------------------


def long_assignments(model_outputs: DataFrame) -> DataFrame:
    """One row per entity and level: ``entity_id, entity_type, level, model_cluster_id, confidence``."""
    zipped = F.arrays_zip(F.col("cluster_ids").alias("c"), F.col("confidences").alias("p"))
    return model_outputs.select("entity_id", "entity_type", F.posexplode(zipped).alias("level", "z")).select(
        "entity_id", "entity_type", F.col("level").cast("int").alias("level"),
        F.col("z.c").cast("int").alias("model_cluster_id"), F.col("z.p").cast("float").alias("confidence"),
    )


class MixedModelVersions(ValueError):
    """A run date's model tables do not hold exactly one model version, the same in both."""


def model_version_of(model_outputs: DataFrame, model_hierarchy: DataFrame | None = None) -> str:
    """The single model version of a run date's ``model_outputs`` (and ``model_hierarchy``, which must agree).

    Raises:
        MixedModelVersions: several versions in a table, or the two tables written by different models (a
            publication would then pair one model's embeddings with another's clusters).
    """
    found = {}
    for table, df in (("model_outputs", model_outputs), ("model_hierarchy", model_hierarchy)):
        if df is not None:
            found[table] = sorted(str(r[0]) for r in df.select("model_version").distinct().collect())
    if any(len(v) != 1 for v in found.values()) or len({v[0] for v in found.values()}) != 1:
        raise MixedModelVersions(f"expected one model version shared by the run date's model tables, found "
                                 f"{found}: re-materialize interest_model for this date")
    return found["model_outputs"][0]


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
    """``cluster_assignments``: every entity at every level, with its published cluster and confidence.

    Args:
        new_long: :func:`long_assignments` of the model outputs.
        mapping: :attr:`ClusterIds.table` (model cluster -> published ID).
        model_version: written on every row.
        run_date: written on every row.
    """
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


def entity_terms(entities: DataFrame, entity_types: Sequence[str]) -> DataFrame:
    """``entity_id, entity_type, term``: the distinct terms of each entity of ``entity_types``, tokenized exactly
    like :func:`hir_pipeline.publish.labels.entity_terms` (title, description and the attributes' values, not keys).

    Args:
        entities: ``entity_id, entity_type, title, description`` and, when present, ``attributes`` (JSON object).
        entity_types: the entity types whose terms count.
    """
    parts = [F.col("title"), F.col("description")]
    if "attributes" in entities.columns:  # a value that is not a string (a list of genres) comes as its JSON text
        parts.append(F.concat_ws(" ", F.map_values(F.from_json("attributes", "map<string,string>"))))
    text = F.lower(F.concat_ws(" ", *parts))
    return (
        entities.where(F.col("entity_type").isin(list(entity_types)))
        .select("entity_id", "entity_type", F.explode(F.array_distinct(F.split(text, SPLIT_PATTERN))).alias("term"))
        .where((F.length("term") >= MIN_TERM_LENGTH) & F.col("term").rlike(TERM_PATTERN)
               & ~F.col("term").isin(sorted(STOPWORDS)))
        .distinct()
    )


def _nested(rows: Sequence[Any], *keys: str, value: str) -> dict[Any, Any]:
    """Collected rows (or dicts) as nested dicts ``keys[0] -> keys[1] -> ... -> int(value)``."""
    out: dict[Any, Any] = {}
    for r in rows:
        node = out
        for k in keys[:-1]:
            node = node.setdefault(r[k], {})
        node[r[keys[-1]]] = int(r[value])
    return out


def level_term_counts(
    assignments: DataFrame,
    terms: DataFrame,
    parents: Sequence[Mapping[int, int | None]],
    max_terms: int,
    comparison: LabelComparison = "catalogue",
) -> dict[int, tuple[LevelTerms, dict[int, tuple[int, ...]]]]:
    """Per level, the :class:`~hir_pipeline.publish.labels.LevelTerms` of its clusters (and their ancestor chains),
    aggregated in Spark: the twin of :func:`hir_pipeline.publish.labels.count_level_terms`.

    Member counts per cluster and type reach the driver first, which picks each cluster's comparison set
    (:func:`~hir_pipeline.publish.labels.reference_keys`); the comparison sets' term counts are then summed in Spark
    over their clusters, exactly, for the terms the clusters bring to the driver.

    Args:
        assignments: published assignments (``entity_id, level, cluster_id``).
        terms: :func:`entity_terms` (one row per entity and distinct term).
        parents: per level, published cluster -> published parent (None at level 0).
        max_terms: each cluster's most frequent terms brought to the driver.
        comparison: what each cluster is compared with (:func:`~hir_pipeline.publish.labels.reference_keys`).
    """
    spark = assignments.sparkSession
    labelled = assignments.select("entity_id", "level", "cluster_id").join(
        terms.select("entity_id", "entity_type").distinct(), "entity_id")
    members = _nested(labelled.groupBy("level", "cluster_id", "entity_type").count().collect(),
                      "level", "cluster_id", "entity_type", value="count")
    chains, keys, rows = {}, {}, []
    for level, sizes in members.items():
        chains[level] = ancestor_chains(parents, level, sizes)
        keys[level] = reference_keys({c: sum(by_type.values()) for c, by_type in sizes.items()}, chains[level],
                                     comparison)
        for key, parts in reference_members(keys[level].values(), sizes, chains[level]).items():
            rows += [(level, c, *key) for c in parts]
    # (level, cluster) -> every comparison set it is part of; and the one each cluster is compared with
    part_of = spark.createDataFrame(rows, "level int, cluster_id int, ref_depth int, ref_id int")
    own_key = spark.createDataFrame([(lvl, c, *k) for lvl, ks in keys.items() for c, k in ks.items()],
                                    "level int, cluster_id int, ref_depth int, ref_id int")
    counts = (assignments.select("entity_id", "level", "cluster_id").join(terms, "entity_id")
              .groupBy("level", "cluster_id", "entity_type", "term").agg(F.count(F.lit(1)).alias("n"))).persist()
    totals = counts.groupBy("level", "cluster_id", "term").agg(F.sum("n").alias("total"))
    rank = F.row_number().over(Window.partitionBy("level", "cluster_id").orderBy(F.desc("total"), "term"))
    top = totals.withColumn("_rank", rank).where(F.col("_rank") <= max_terms).select("level", "cluster_id", "term")
    own = counts.join(top, ["level", "cluster_id", "term"]).collect()
    wanted = top.join(own_key, ["level", "cluster_id"]).select("level", "ref_depth", "ref_id", "term").distinct()
    ref = (counts.join(part_of, ["level", "cluster_id"]).join(wanted, ["level", "ref_depth", "ref_id", "term"])
           .groupBy("level", "ref_depth", "ref_id", "term", "entity_type").agg(F.sum("n").alias("n")).collect())
    counts.unpersist()
    own_terms = _nested(own, "level", "cluster_id", "term", "entity_type", value="n")
    ref_terms = _nested([r.asDict() | {"key": (r["ref_depth"], r["ref_id"])} for r in ref],
                        "level", "key", "term", "entity_type", value="n")
    out: dict[int, tuple[LevelTerms, dict[int, tuple[int, ...]]]] = {}
    for level, sizes in members.items():
        clusters = {c: TermCounts(by_type, own_terms.get(level, {}).get(c, {})) for c, by_type in sizes.items()}
        sets = {}
        for key, parts in reference_members(keys[level].values(), sizes, chains[level]).items():
            ref_members: Counter[str] = Counter()
            for c in parts:
                ref_members.update(sizes[c])
            sets[key] = TermCounts(dict(ref_members), ref_terms.get(level, {}).get(key, {}))
        out[level] = (LevelTerms(clusters, {c: sets[keys[level][c]] for c in clusters}), chains[level])
    return out


def cluster_labels(
    assignments: DataFrame,
    entities: DataFrame,
    parents: Sequence[Mapping[int, int | None]],
    settings: PublishSettings,
) -> dict[tuple[int, int], list[str]]:
    """(level, published cluster) -> the terms that most set its members apart from their comparison set (the
    catalogue or the parent cluster: ``settings.label_comparison``), distinct among siblings.

    Args:
        assignments: published assignments (``entity_id, level, cluster_id``).
        entities: ``entity_id, entity_type, title, description`` (and ``attributes``).
        parents: per level, published cluster -> published parent (None at level 0).
        settings: terms per label, labelled entity types, terms brought to the driver.
    """
    terms = entity_terms(entities, settings.label_entity_types).persist()
    levels = level_term_counts(assignments, terms, parents, settings.max_terms_per_cluster, settings.label_comparison)
    terms.unpersist()
    out: dict[tuple[int, int], list[str]] = {}
    for level, (counts, chains) in levels.items():
        out.update({(level, c): t for c, t in level_labels(counts, chains, settings.label_terms).items()})
    return out


def cluster_profiles(
    spark: SparkSession,
    assignments: DataFrame,
    ids: ClusterIds,
    hierarchy: DataFrame,
    entities: DataFrame,
    model_version: str,
    run_date: dt.date,
    settings: PublishSettings,
) -> DataFrame:
    """``cluster_profiles``: per published cluster its parent, size (members at its level), size by entity
    type, label (the terms that set its members apart, :mod:`hir_pipeline.publish.labels`), top members (highest
    confidence, content types), prototype (kept for the next version's stable-ID fallback) and how its ID was
    decided (``match``).

    Args:
        spark: session for the small label table.
        assignments: :func:`cluster_assignments` (published IDs).
        ids: :func:`stable_mapping`'s decisions (which clusters are published) and their table (model cluster
            -> published ID, parent, match).
        hierarchy: ``model_hierarchy`` rows (prototypes, by model cluster).
        entities: ``entity_id, entity_type, title, description`` (and ``attributes``) for the labels.
        model_version: written on every row.
        run_date: written on every row.
        settings: label and top-member settings.
    """
    published = [sorted(level.mapping.values()) for level in ids.stable.levels]
    labels = cluster_labels(assignments, entities, ids.stable.parents, settings)
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
        F.broadcast(ids.table).join(protos, ["level", "model_cluster_id"], "left")
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


def build_publication(spark: SparkSession, inputs: PublishInputs, run_date: dt.date,
                      settings: PublishSettings | None = None) -> PublicationFrames:
    """The four published tables of ``run_date``.

    Args:
        spark: the session.
        inputs: the model's tables of the run date, the entities, the edges and the previous publication
            (:func:`spark_jobs.publish.io.read_inputs` reads them from the lake).
        run_date: written on every row.
        settings: see :class:`PublishSettings`.

    The returned DataFrames depend on a persisted long form of ``model_outputs``; call
    ``publication.tables[...].sparkSession.catalog.clearCache()`` or let the session end to free it.
    """
    settings = settings or PublishSettings()
    version = model_version_of(inputs.model_outputs, inputs.model_hierarchy)
    new_long = long_assignments(inputs.model_outputs).persist()
    hierarchy = inputs.model_hierarchy.select("level", "cluster_id", "parent_cluster_id", "prototype")
    # next_ids shorter than the hierarchy means 0 for the missing levels (stabilize pads)
    ids = stable_mapping(spark, new_long, hierarchy, inputs.previous_assignments, inputs.previous_profiles,
                         list(inputs.next_ids), settings.match)
    assignments = cluster_assignments(new_long, ids.table, version, run_date)
    tables = {
        "node_embeddings": node_embeddings(inputs.model_outputs, run_date),
        "cluster_assignments": assignments,
        "interest_supergraph": interest_supergraph(inputs.edges, assignments, version, run_date,
                                                   settings.supergraph_edge_types),
        "cluster_profiles": cluster_profiles(spark, assignments, ids, hierarchy, inputs.entities, version,
                                             run_date, settings),
    }
    return PublicationFrames(tables=tables, stable=ids.stable, model_version=version,
                       previous_run_date=inputs.previous_date)
