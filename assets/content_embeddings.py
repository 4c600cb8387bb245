"""Knowledge: world-knowledge content embeddings of ads, products, advertisers, campaigns and categories.

``content_embeddings`` wraps :func:`spark_jobs.content_embeddings.embed_content` (Spark Arrow batch inference,
models loaded once per Python worker). The table holds **one current snapshot**, one row per content entity, not
one snapshot per run date: the bronze ``entities`` it embeds are themselves the merged current catalogue (no date
dimension), and a snapshot of fused + per-modality vectors is large (~6 KB per entity), so one copy per day would
cost a lot and say nothing new. Every run replaces the whole table atomically (one Delta commit); a re-run of a
date therefore replaces what that date wrote, and earlier snapshots stay readable by Delta time travel.
``embedded_at_run`` says which run embedded each row.

Incremental: rows whose content hash and model identifier match the current table are copied, never re-embedded;
a nightly run over unchanged content embeds 0 rows; any model or output-affecting setting change re-embeds all.
"""

from collections.abc import Iterator

import dagster as dg
from pydantic import Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from assets.quality import validate
from assets.write_audit import WriteAudit
from hir_pipeline.content_embeddings.config import EFFICIENTNET_LITE0, EmbeddingConfig, resolve_model_folder
from hir_pipeline.content_embeddings.content_hash import model_identifier
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from resources import LakeResource, SparkResource
from resources.config_schema import config_class
from spark_jobs.content_embeddings import embed_content
from spark_jobs.delta_io import latest_version, read_table, replace_table, table_exists

GROUP = "knowledge"
CHECK_QUALITY = "content_embeddings_valid"


class ContentEmbeddingConfig(config_class(EmbeddingConfig, name="EmbeddingFields")):
    """Run config of ``content_embeddings``: the models and settings of :class:`EmbeddingConfig` (derived from it;
    a setting marked *(re-embeds)* changes the model identifier, so the next run re-embeds every entity), plus
    how the asset reports."""

    progress_every_s: float = Field(10.0, description="Interval of the Spark progress lines in the run log.")


def quality_frame(table: DataFrame) -> DataFrame:
    """The table plus the derived columns the expectations look at (fused width and L2 norm)."""
    norm = F.sqrt(F.aggregate("embedding", F.lit(0.0).cast("double"), lambda acc, x: acc + x * x))
    return table.select(
        "entity_id", "entity_type", "content_hash", "model_id", "embedding",
        F.size("embedding").alias("embedding_dim"), norm.alias("embedding_norm"),
    )


def quality_expectations(model_id: str) -> list:
    """GX 1.x expectations of a ``content_embeddings`` snapshot written with ``model_id``."""
    import great_expectations as gx

    E = gx.expectations
    return [
        E.ExpectColumnValuesToBeUnique(column="entity_id"),
        E.ExpectColumnValuesToNotBeNull(column="embedding"),
        E.ExpectColumnUniqueValueCountToBeBetween(column="embedding_dim", min_value=0, max_value=1),
        E.ExpectColumnValuesToBeBetween(column="embedding_norm", min_value=0.999, max_value=1.001),
        E.ExpectColumnValuesToBeInSet(column="entity_type", value_set=list(CONTENT_ENTITY_TYPES)),
        E.ExpectColumnValuesToNotBeNull(column="content_hash"),
        # Reused rows are reused only under the current model, so every row carries it.
        E.ExpectColumnValuesToBeInSet(column="model_id", value_set=[model_id]),
    ]


def _model_name(configured: str | None, resolved: str) -> str:
    """What the metadata shows for a model: the configured name, or which bundled default was used."""
    if configured is None:
        return f"bundled all-MiniLM-L6-v2 ({resolved})"
    return configured if configured == EFFICIENTNET_LITE0 else str(resolve_model_folder(configured))


@dg.asset(
    name="content_embeddings",
    group_name=GROUP,
    deps=[dg.AssetKey("entities")],
    partitions_def=daily_partitions,
    compute_kind="torch",
    check_specs=[dg.AssetCheckSpec(
        CHECK_QUALITY, asset="content_embeddings", blocking=True,
        description="GX: entity_id unique, embedding not null, one fused width, unit norm, content types only, "
                    "every row under the current model.",
    )],
    description="Text, image, video and structured-metadata embeddings of every content entity, fused into one unit "
                "vector, with model identifier and content hash (one current snapshot, replaced each run).",
)
def content_embeddings(
    context: dg.AssetExecutionContext, config: ContentEmbeddingConfig, spark: SparkResource, lake: LakeResource
) -> Iterator:
    day, session, path = run_date(context), spark.get_session(), lake.path("content_embeddings")
    embedding = config.to_dataclass()
    model_id = model_identifier(embedding)
    entities = read_table(session, lake.path("entities"))
    previous = read_table(session, path) if table_exists(session, path) else None
    context.log.info(f"content_embeddings for {day}: model {model_id}; previous snapshot: "
                     f"{'version ' + str(latest_version(session, path)) if previous is not None else 'none'}")
    stages = spark_stages(context, session, "content_embeddings", config.progress_every_s)
    with stages("embed"):
        snapshot, counts = embed_content(entities, previous, embedding, day)
    embed_s = stages.seconds["embed"]
    embedded = counts["new"] + counts["changed"]
    context.log.info(f"content_embeddings: {counts} in {embed_s:.1f}s; writing the snapshot")
    audit = WriteAudit.begin(session, lake, ["content_embeddings"])
    with stages("write"):  # reused rows are read from the table being replaced: safe, see replace_table
        replace_table(snapshot, path, add_columns=True)  # a snapshot from before video_* columns gains them
    audit.wrote("content_embeddings")
    write_s = stages.seconds["write"]
    snapshot.unpersist()

    written = read_table(session, path)
    stats = written.agg(F.count(F.lit(1)).alias("rows"), F.max(F.size("embedding")).alias("dim")).first()
    version = latest_version(session, path)
    context.log.info(f"content_embeddings for run date {day}: {int(stats['rows']):,} rows written in {write_s:.1f}s, "
                     f"Delta version {version}")
    gx = validate(quality_frame(written), "content_embeddings", quality_expectations(model_id))
    check = dg.AssetCheckResult(check_name=CHECK_QUALITY, asset_key="content_embeddings", passed=gx.passed,
                                severity=gx.severity, metadata={**gx.metadata, "run_date": str(day)})
    yield dg.MaterializeResult(metadata={
        "dagster/row_count": int(stats["rows"]),
        "run_date": str(day),
        "new": counts["new"],
        "changed": counts["changed"],
        "reused": counts["reused"],
        "skipped_no_content": counts["skipped_no_content"],
        "image_errors": counts["image_errors"],
        "video_errors": counts["video_errors"],
        "failed_no_embedding": counts["failed_no_embedding"],
        "embedded_this_run": embedded,
        "embedding_dim": int(stats["dim"] or 0),
        "model_id": model_id,
        "text_model": _model_name(config.text_model, embedding.text_model),
        "image_model": _model_name(config.image_model, embedding.image_model),
        "entities_per_s": round(embedded / embed_s, 2) if embedded and embed_s > 0 else 0.0,
        "stage_seconds": dg.MetadataValue.json(stages.seconds),
        "delta_version": version,
        "path": dg.MetadataValue.path(path),
        **audit.settle(context, [check]),
    })
    yield check
