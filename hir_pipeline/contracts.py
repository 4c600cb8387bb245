"""The fixed data contracts of ../shared/ARCHITECTURE.md, as code.

Everything here is plain Python (no Spark, no Dagster) so that every layer can import it.
Column types are written as Spark SQL DDL strings; ``spark_jobs`` turns them into schemas.
"""

from __future__ import annotations

from dataclasses import dataclass

ENTITY_TYPES: tuple[str, ...] = ("user", "ad", "campaign", "advertiser", "product", "category")
#: Entity types that carry content (text / image / video / attributes) and get world-knowledge embeddings.
CONTENT_ENTITY_TYPES: tuple[str, ...] = ("ad", "campaign", "advertiser", "product", "category")
#: Default funnel, shallow to deep. Configurable through ``GraphConfig.funnel`` (the ``graph_settings`` resource).
DEFAULT_FUNNEL: tuple[str, ...] = ("impression", "click", "add_to_cart", "conversion")
#: Default largest shortest-path distance in a view (``GraphConfig.max_dist``; the model's follows it).
DEFAULT_MAX_DIST = 4


@dataclass(frozen=True)
class Column:
    """One column of a source table.

    Args:
        name: column name.
        ddl: Spark SQL type of the accepted (bronze) column.
        required: a null here sends the row to quarantine.
        accepts: Spark type names (``DataType.typeName()``) a source may supply for this column;
            anything else is a schema error that stops the run before anything is written.
    """

    name: str
    ddl: str
    required: bool
    accepts: tuple[str, ...]


_STR = ("string",)
_NUM = ("double", "float", "integer", "long", "short", "byte", "decimal")
#: Identifiers: strings, or numbers as pandas writes integer IDs (``1.0`` from a float column reads as ``"1"``).
_ID = ("string", *_NUM)
#: Timestamps: Parquet/Delta timestamps (pandas' nanosecond ones included), dates, ISO strings, or integer epochs
#: (seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude).
_TS = ("timestamp", "timestamp_ntz", "date", "string", "long", "integer")

SOURCE_TABLES: dict[str, tuple[Column, ...]] = {
    "entities": (
        Column("entity_id", "string", True, _ID),
        Column("entity_type", "string", True, _STR),
        Column("title", "string", False, _STR),
        Column("description", "string", False, _STR),
        Column("image_uri", "string", False, _STR),
        Column("video_uri", "string", False, _STR),
        Column("attributes", "string", False, _STR),
        Column("created_at", "timestamp", False, _TS),
    ),
    "relations": (
        Column("src_id", "string", True, _ID),
        Column("dst_id", "string", True, _ID),
        Column("relation", "string", True, _STR),
        Column("weight", "double", False, _NUM),
    ),
    "events": (
        Column("event_id", "string", False, _ID),
        Column("user_id", "string", True, _ID),
        Column("entity_id", "string", True, _ID),
        Column("event_type", "string", True, _STR),
        Column("event_ts", "timestamp", True, _TS),
        Column("value", "double", False, _NUM),
    ),
}

#: Bronze events carry the derived partition column.
EVENT_DATE_COLUMN = "event_date"


class QuarantineReason:
    """Why a source row was not accepted. Stored verbatim in ``quarantine.reason``."""

    MISSING_REQUIRED_FIELD = "missing_required_field"
    UNKNOWN_ENTITY_TYPE = "unknown_entity_type"
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    UNPARSEABLE_TIMESTAMP = "unparseable_timestamp"
    FUTURE_TIMESTAMP = "future_timestamp"
    TIMESTAMP_BEFORE_HORIZON = "timestamp_before_horizon"
    INVALID_VALUE = "invalid_value"
    DANGLING_REFERENCE = "dangling_reference"
    DUPLICATE_EVENT_ID = "duplicate_event_id"
    DUPLICATE_ENTITY_ID = "duplicate_entity_id"
    DUPLICATE_ENTITY_ID_CONFLICT = "duplicate_entity_id_conflict"
    DUPLICATE_RELATION = "duplicate_relation"


#: The four published tables (ARCHITECTURE.md "Output contract"), partitioned by run_date; which Delta version
#: of each makes up a publication is recorded in :data:`MANIFEST_TABLE`.
OUTPUT_TABLES: tuple[str, ...] = (
    "node_embeddings",
    "cluster_assignments",
    "interest_supergraph",
    "cluster_profiles",
)
#: The publications manifest: one row per published run date, written after the four tables (last), so a
#: reader that resolves a publication through it never sees half a publication.
MANIFEST_TABLE = "publications"
#: Every Delta table the lake knows, by logical name.
LAKE_TABLES: tuple[str, ...] = (
    "entities",
    "relations",
    "events",
    "quarantine",
    "graph_nodes",
    "graph_edges",
    "graph_views",
    "content_embeddings",
    "model_outputs",
    "model_hierarchy",
    *OUTPUT_TABLES,
    MANIFEST_TABLE,
    "evaluation_metrics",
)


def source_ddl(table: str) -> str:
    """Spark DDL of an accepted source table (``entities``, ``relations`` or ``events``)."""
    return ", ".join(f"{c.name} {c.ddl}" for c in SOURCE_TABLES[table])


# --- Graph tables (written by spark_jobs.graph, read by the model) -------------------------------
#
# graph_nodes: node_idx long (dense 0..N-1, stable for a given run), entity_id string, entity_type string,
#   node_type int (index into ENTITY_TYPES), has_history boolean (took part in any event edge),
#   degree long, weighted_degree double, degree_by_type map<string,long>, degree_bucket int
#   (0..DEGREE_BUCKETS-1, log2 buckets), centrality_bucket int, structure_embedding array<float> (graph-wide
#   spectral or FastRP embedding, see GraphConfig.structure_method; null for nodes without edges or when turned
#   off), run_date date.
# graph_edges: src_idx long, dst_idx long, src_id string, dst_id string, edge_type string,
#   edge_type_id int (1-based, see EDGE_TYPES), weight double (> 0, finite), n_events long,
#   last_event_ts timestamp (latest event of an activity edge; null for catalog edges), run_date date.
#   Edges are directed; every edge type has its reverse type, so the graph is stored symmetrically.
# graph_views: anchor_idx long, anchor_id string, view string ("broad" | "narrow"),
#   nodes array<long> (node_idx, nodes[0] == anchor_idx), node_types array<tinyint>,
#   dist binary (n*n int8 row-major; 0..max_dist, UNREACHABLE = max_dist + 1),
#   edge_types binary (n*n uint8 row-major; 0 = not directly connected, else edge_type_id),
#   truncated boolean (fan-out was capped), run_date date.
#   Compact small-integer arrays, never dense float matrices.

DEGREE_BUCKETS = 16
#: View names; the teacher sees the broad one, the student the narrow one.
VIEW_BROAD, VIEW_NARROW = "broad", "narrow"


def edge_type_vocabulary(funnel: tuple[str, ...] = DEFAULT_FUNNEL,
                         relations: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Edge types in id order (id = position + 1; 0 means "no edge").

    Event edges are typed by the deepest funnel stage reached (user -> item) and reversed
    (item -> user, ``rev_`` prefix); catalog relations likewise. Relations are sorted so the ids
    do not depend on the order rows arrive in.
    """
    forward = [*funnel, *sorted(set(relations))]
    return tuple(t for name in forward for t in (name, f"rev_{name}"))


# --- Model tables (written by the training asset ``interest_model``, read by publishing) -------------------
#
# model_outputs: one row per graph node of the run date. embedding is L2-normalised (one space for every entity
#   type); cluster_ids[l] is the most probable cluster at level l (0 = coarsest) and confidences[l] its
#   probability; has_view is False for nodes embedded from their own features only (no neighbours).
# model_hierarchy: one row per prototype. parent_cluster_id is the level l - 1 cluster the prototype belongs to
#   (null at level 0); prototype is the L2-normalised prototype vector (in the model's projection-head space).
MODEL_OUTPUTS_DDL = (
    "entity_id string, entity_type string, embedding array<float>, cluster_ids array<int>, "
    "confidences array<float>, has_view boolean, model_version string, run_date date"
)
MODEL_HIERARCHY_DDL = (
    "level int, cluster_id int, parent_cluster_id int, prototype array<float>, model_version string, run_date date"
)


# --- Evaluation table (written by the ``evaluation_report`` asset) -----------------------------------------------
#
# evaluation_metrics: one row per (method, split, metric) of a run date. method: hir | popularity | als | lightgcn |
#   content; split: warm | cold (ranking metrics), all | <entity_type> (clustering metrics of hir); metric e.g.
#   recall_at_20, ndcg_at_20, users, nmi_level_2, clusters_used_level_0. model_version is the registered version
#   of the run date's production model the evaluation vouches for ("none" when there is none).
EVALUATION_METRICS_DDL = "model_version string, run_date date, method string, split string, metric string, value double"



# --- Publications manifest (written last by a publish run, read by hir_pipeline.query) ------------------------
#
# publications: one row per run date, partitioned by run_date; re-publishing a date replaces its row. Each
#   <table>_version column is the Delta version of that output table which holds the publication's rows (read it
#   with time travel, filtered by run_date and model_version). published_at is the UTC wall clock of the write:
#   metadata only, never used to resolve a publication.


def manifest_version_column(table: str) -> str:
    """Column of ``publications`` holding the Delta version of output ``table`` (``node_embeddings_version``)."""
    return f"{table}_version"




# --- Published table schemas (what downstream teams read; shown in the Dagster UI as each asset's columns) ------


@dataclass(frozen=True)
class OutputColumn:
    """One column of a published table.

    Args:
        name: column name.
        ddl: Spark SQL type, as written.
        description: what the column holds, for the readers of the table.
    """

    name: str
    ddl: str
    description: str


_MODEL_VERSION = OutputColumn("model_version", "string", "Registered MLflow model version that produced the row.")
_RUN_DATE = OutputColumn("run_date", "date", "Run date (partition): the day the publication describes.")
_LEVEL = OutputColumn("level", "int", "Hierarchy level, 0 = coarsest.")

#: Columns of every published table and of the manifest, in written order.
OUTPUT_SCHEMAS: dict[str, tuple[OutputColumn, ...]] = {
    "node_embeddings": (
        OutputColumn("entity_id", "string", "Entity (user, ad, campaign, advertiser, product) ID."),
        OutputColumn("entity_type", "string", "Entity type."),
        OutputColumn("embedding", "array<float>",
                     "L2-normalised embedding; one space for every type, score pairs by dot product."),
        OutputColumn("has_view", "boolean", "False when the entity had no neighbours and was embedded from its own "
                     "features only."),
        _MODEL_VERSION, _RUN_DATE,
    ),
    "cluster_assignments": (
        OutputColumn("entity_id", "string", "Entity ID."),
        OutputColumn("entity_type", "string", "Entity type."),
        _LEVEL,
        OutputColumn("cluster_id", "int", "Published cluster ID, stable across model versions that find the same "
                     "cluster."),
        OutputColumn("confidence", "float", "Probability of the entity's top cluster at this level."),
        _MODEL_VERSION, _RUN_DATE,
    ),
    "interest_supergraph": (
        _LEVEL,
        OutputColumn("src_cluster", "int", "Published cluster ID of the edges' source members."),
        OutputColumn("dst_cluster", "int", "Published cluster ID of the edges' destination members."),
        OutputColumn("weight", "double", "Summed weight of the graph edges between members of the two clusters."),
        OutputColumn("n_edges", "bigint", "Number of those graph edges."),
        _MODEL_VERSION, _RUN_DATE,
    ),
    "cluster_profiles": (
        _LEVEL,
        OutputColumn("cluster_id", "int", "Published cluster ID."),
        OutputColumn("parent_cluster_id", "int", "Cluster of the level above that this one belongs to (null at "
                     "level 0)."),
        OutputColumn("size", "bigint", "Members at this level (only clusters with members are listed)."),
        OutputColumn("label", "string", "Readable label: the terms that most set its members apart."),
        OutputColumn("top_members", "array<string>", "Most confident content members, best first."),
        OutputColumn("label_terms", "array<string>", "The terms the label is made of."),
        OutputColumn("size_by_type", "map<string,bigint>", "Members per entity type."),
        OutputColumn("prototype", "array<float>", "The cluster's prototype vector (model projection space)."),
        OutputColumn("match", "string", "How the ID was kept from the previous publication (overlap, prototype) or "
                     "minted (fresh)."),
        _MODEL_VERSION, _RUN_DATE,
    ),
    MANIFEST_TABLE: (
        _RUN_DATE,
        OutputColumn("model_version", "string", "The published model version."),
        *(OutputColumn(manifest_version_column(t), "bigint", f"Delta version of {t} that holds this publication's "
                       "rows (read it with time travel).") for t in OUTPUT_TABLES),
        OutputColumn("published_at", "timestamp", "UTC wall clock of the write; metadata only."),
    ),
}


def output_ddl(table: str) -> str:
    """Spark DDL of a published table or the manifest (:data:`OUTPUT_SCHEMAS`)."""
    return ", ".join(f"{c.name} {c.ddl}" for c in OUTPUT_SCHEMAS[table])


#: run_date date, model_version string, node_embeddings_version bigint, cluster_assignments_version bigint,
#: interest_supergraph_version bigint, cluster_profiles_version bigint, published_at timestamp
PUBLICATIONS_DDL = output_ddl(MANIFEST_TABLE)
