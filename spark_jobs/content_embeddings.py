"""World-knowledge content embeddings of catalogue entities, as Spark Arrow batch inference.

:func:`embed_content` turns the bronze ``entities`` table (and the previous ``content_embeddings`` snapshot)
into the new snapshot: one row per content entity (ad, campaign, advertiser, product, category) that has any
content, with its text, image, video, attribute and fused vectors (see :mod:`hir_pipeline.content_embeddings`).

How it stays cheap:

* **Incremental.** Each entity's content hash (a Spark SQL expression, no Python) and the model identifier are
  compared with the previous snapshot; unchanged entities are copied from it and never reach a model. A model
  or setting change changes the identifier and so re-embeds everything. A snapshot written before clips were
  embedded (no ``video_embedding`` / ``video_error`` columns) is reused as it is: those columns read as null, and
  only the entities with a clip get a new hash and are embedded again. When nothing is to be embedded and every
  row of the previous snapshot is reused as it is (an unchanged night), the previous snapshot itself is returned:
  one status count and one row count, no join and nothing cached.
* **Batch inference with ``mapInPandas``.** Rows to embed are spread over ``num_partitions`` partitions
  (default: the cluster's parallelism, one model replica per core) and sorted by text length inside each
  partition, so every Arrow batch and every model batch holds texts of similar length (little padding). Each
  Python worker loads the models once (process-wide cache keyed by the config; Spark reuses Python workers) and
  reads the model files on the worker itself - only the config travels in the closure. The job's Arrow batches
  hold ``arrow_batch_rows`` rows (a few model batches), so sending rows, embedding and sending vectors back
  overlap instead of each waiting for a whole partition.

The embedding result is persisted (memory and disk) while the counts are taken, so the models run exactly once
per call; the caller writes the returned frame and may then ``unpersist()`` it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import os
import sys
import time
from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.content_hash import CONTENT_FIELDS, model_identifier, video_settings
from hir_pipeline.content_embeddings.precision import resolved_precision
from hir_pipeline.contracts import CONTENT_ENTITY_TYPES
from spark_jobs.session import temporary_conf

log = logging.getLogger(__name__)

#: Schema of the ``content_embeddings`` table.
CONTENT_EMBEDDINGS_DDL = (
    "entity_id string, entity_type string, content_hash string, model_id string, "
    "text_embedding array<float>, image_embedding array<float>, video_embedding array<float>, "
    "attributes_embedding array<float>, embedding array<float>, image_error string, video_error string, "
    "embedded_at_run date"
)
#: Spark's rows per Arrow batch; the embedding job sets it to ``EmbeddingConfig.arrow_batch_rows``.
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: Columns added after the first snapshots were written (null in the rows of an older snapshot).
_ADDED_COLUMNS = {"video_embedding": "array<float>", "video_error": "string"}
#: What the Python workers return (model_id and embedded_at_run are added as literals on the driver side).
_WORKER_DDL = (
    "entity_id string, entity_type string, content_hash string, text_embedding array<float>, "
    "image_embedding array<float>, video_embedding array<float>, attributes_embedding array<float>, "
    "embedding array<float>, image_error string, video_error string"
)
_OUTPUT_COLUMNS = [c.strip().split(" ")[0] for c in CONTENT_EMBEDDINGS_DDL.split(",")]

STATUS_NEW, STATUS_CHANGED, STATUS_REUSED, STATUS_SKIPPED = "new", "changed", "reused", "skipped_no_content"


def _nonblank(col: Column) -> Column:
    return F.coalesce(F.length(F.regexp_replace(col, r"^\s+|\s+$", "")) > 0, F.lit(False))


def has_content(entities: DataFrame) -> Column:
    """True where an entity has a non-blank title, description, image or video URI, or a non-empty JSON object."""
    attrs = F.coalesce(F.size(F.json_object_keys(F.col("attributes"))) > 0, F.lit(False))
    return (_nonblank(F.col("title")) | _nonblank(F.col("description")) | _nonblank(F.col("image_uri"))
            | _nonblank(F.col("video_uri")) | attrs)


def _part(col: Column) -> Column:
    return F.when(col.isNull(), F.lit("-1:")).otherwise(F.concat(F.char_length(col).cast("string"), F.lit(":"), col))


def content_hash_column(video: str = "") -> Column:
    """SHA-256 of the length-prefixed content fields; equals :func:`hir_pipeline.content_embeddings.content_hash`.

    Args:
        video: the :func:`~hir_pipeline.content_embeddings.content_hash.video_settings`, hashed (after the video
            URI) only for entities with a clip.
    """
    head = [_part(F.col(c)) for c in CONTENT_FIELDS if c != "video_uri"]
    clip = F.when(F.col("video_uri").isNull(), F.lit("")).otherwise(
        F.concat(_part(F.col("video_uri")), F.lit(f"{len(video)}:{video}")))
    return F.sha2(F.concat(*head, clip), 256)


def with_added_columns(snapshot: DataFrame) -> DataFrame:
    """A ``content_embeddings`` snapshot with the columns added since it was written (null), in table order."""
    for name, ddl in _ADDED_COLUMNS.items():
        if name not in snapshot.columns:
            snapshot = snapshot.withColumn(name, F.lit(None).cast(ddl))
    return snapshot.select(*_OUTPUT_COLUMNS)


def _ensure_worker_logging() -> None:
    # Python workers start with no logging configured; progress goes to the executor's stderr log.
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s pid=%(process)d %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _vectors(values: list) -> list:
    # float32 ndarrays, not Python lists: Arrow converts them into array<float> without a Python loop.
    return [None if v is None else np.asarray(v, dtype=np.float32) for v in values]


def embed_partition(batches: Iterator[pd.DataFrame], config: EmbeddingConfig) -> Iterator[pd.DataFrame]:
    """``mapInPandas`` body: embed each Arrow batch of one partition with the worker's cached models.

    Args:
        batches: Arrow batches with entity_id, entity_type, content_hash and the content columns, sorted by
            text length (longest first) by the caller.
        config: the embedding config (the only state shipped from the driver).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one worker per core already; avoid oversubscription
    _ensure_worker_logging()
    worker_start = time.perf_counter()
    from hir_pipeline.content_embeddings.embedder import cached_embedder, get_embedder

    done = 0
    for pdf in batches:
        if pdf.empty:
            continue
        first_load = cached_embedder(config) is None  # first batch of this Python worker: imports + loading
        embedder = get_embedder(config)
        if first_load:
            log.info("content models ready in %.2fs (imports and loading)", time.perf_counter() - worker_start)
        start = time.perf_counter()
        out = embedder.embed(
            *(pdf[c].astype(object).where(pdf[c].notna(), None).tolist() for c in CONTENT_FIELDS)
        )
        done += len(pdf)
        log.info("embedded batch of %d entities (%d in this partition, %d image errors, %d video errors) in %.2fs",
                 len(pdf), done, sum(e is not None for e in out.image_error),
                 sum(e is not None for e in out.video_error), time.perf_counter() - start)
        yield pd.DataFrame({
            "entity_id": pdf["entity_id"].to_numpy(),
            "entity_type": pdf["entity_type"].to_numpy(),
            "content_hash": pdf["content_hash"].to_numpy(),
            "text_embedding": _vectors(out.text),
            "image_embedding": _vectors(out.image),
            "video_embedding": _vectors(out.video),
            "attributes_embedding": _vectors(out.attributes),
            "embedding": _vectors(out.fused),
            "image_error": out.image_error,
            "video_error": out.video_error,
        })


def _is_previous_snapshot(counts: dict[str, int], by_status: list, previous: DataFrame) -> bool:
    """Whether the new snapshot is exactly ``previous``: no entity to embed, none whose type moved, and as many
    reused entities as ``previous`` has rows (entity ids are unique on both sides, so each of its rows is reused)."""
    if counts[STATUS_NEW] or counts[STATUS_CHANGED]:
        return False
    if any(int(r["moved"]) for r in by_status if r["_status"] == STATUS_REUSED):
        return False
    return counts[STATUS_REUSED] == previous.count()


def embed_content(
    entities: DataFrame,
    previous: DataFrame | None,
    config: EmbeddingConfig,
    run_date: dt.date,
) -> tuple[DataFrame, dict[str, int]]:
    """Embed new and changed content entities; reuse unchanged ones from the previous snapshot.

    Args:
        entities: bronze entities (``contracts.source_ddl("entities")``); non-content types are ignored.
        previous: the previous ``content_embeddings`` snapshot (:data:`CONTENT_EMBEDDINGS_DDL`, or an older one
            without the video columns), or ``None``.
        config: models and settings; its :func:`~hir_pipeline.content_embeddings.content_hash.model_identifier` decides
            whether previous vectors are still valid (computed here, so the driver reads the model files too).
        run_date: stored as ``embedded_at_run`` on rows embedded by this call (reused rows keep theirs).

    Returns:
        ``(snapshot, counts)``: the new snapshot (:data:`CONTENT_EMBEDDINGS_DDL`; persisted - see module doc) and
        counts ``new``, ``changed``, ``reused``, ``skipped_no_content`` (content types without any content: no
        row, never a zero vector), ``image_errors`` (images that could not be read; the entity keeps its other
        modalities), ``video_errors`` (clips that could not be read or decoded; likewise) and
        ``failed_no_embedding`` (entities whose only content was unusable, e.g. a broken image alone: no row this
        run, retried next run).
    """
    # Resolved once here, so the driver's model id and every worker's models agree on the precision.
    config = dataclasses.replace(config, precision=resolved_precision(config))
    model_id = model_identifier(config)
    if "video_uri" not in entities.columns:  # a catalogue ingested before the contract had clips
        entities = entities.withColumn("video_uri", F.lit(None).cast("string"))
    content = entities.where(F.col("entity_type").isin(list(CONTENT_ENTITY_TYPES))).select(
        "entity_id", "entity_type", *CONTENT_FIELDS,
        has_content(entities).alias("_has_content"),
        content_hash_column(video_settings(config)).alias("content_hash"),
    )
    if previous is not None:
        prev_keys = previous.select(
            "entity_id", F.col("content_hash").alias("_prev_hash"), F.col("model_id").alias("_prev_model"),
            F.col("entity_type").alias("_prev_type"),
        )
        content = content.join(prev_keys, "entity_id", "left")
    else:
        content = (content.withColumn("_prev_hash", F.lit(None).cast("string"))
                   .withColumn("_prev_model", F.lit(None).cast("string"))
                   .withColumn("_prev_type", F.lit(None).cast("string")))
    labelled = content.withColumn(
        "_status",
        F.when(~F.col("_has_content"), F.lit(STATUS_SKIPPED))
        .when(F.col("_prev_hash").isNull(), F.lit(STATUS_NEW))
        .when((F.col("_prev_hash") == F.col("content_hash")) & (F.col("_prev_model") == F.lit(model_id)),
              F.lit(STATUS_REUSED))
        .otherwise(F.lit(STATUS_CHANGED)),
    ).select("entity_id", "entity_type", *CONTENT_FIELDS, "content_hash", "_status",
             F.coalesce(F.col("_prev_type") != F.col("entity_type"), F.lit(False)).alias("_type_moved")).persist(
        StorageLevel.MEMORY_AND_DISK)
    counts = {s: 0 for s in (STATUS_NEW, STATUS_CHANGED, STATUS_REUSED, STATUS_SKIPPED)}
    by_status = labelled.groupBy("_status").agg(F.count(F.lit(1)).alias("count"),
                                                F.count(F.when(F.col("_type_moved"), 1)).alias("moved")).collect()
    counts.update({r["_status"]: int(r["count"]) for r in by_status})
    log.info("content entities by status: %s", counts)
    if previous is not None and _is_previous_snapshot(counts, by_status, previous):
        # Nothing to embed and every previous row is reused as it is: the snapshot is the previous one, read as it
        # stands, with no join and nothing cached (issue 24: an unchanged night costs the status count only).
        labelled.unpersist()
        counts.update(image_errors=0, video_errors=0, failed_no_embedding=0)
        log.info("content embeddings (model %s): unchanged, the previous snapshot is kept: %s", model_id, counts)
        return with_added_columns(previous).select(*_OUTPUT_COLUMNS), counts

    to_embed = labelled.where(F.col("_status").isin(STATUS_NEW, STATUS_CHANGED)).drop("_status", "_type_moved")
    to_embed_count = counts[STATUS_NEW] + counts[STATUS_CHANGED]
    n_partitions = config.num_partitions or entities.sparkSession.sparkContext.defaultParallelism
    n_partitions = max(1, min(n_partitions, to_embed_count))
    text_len = F.char_length(F.coalesce("title", F.lit(""))) + F.char_length(F.coalesce("description", F.lit("")))
    if to_embed_count:
        inferred = (
            to_embed.repartition(n_partitions)
            .sortWithinPartitions(text_len.desc())
            .mapInPandas(functools.partial(embed_partition, config=config), schema=_WORKER_DDL)
        )
    else:  # nothing changed: no job, no model load
        inferred = entities.sparkSession.createDataFrame([], _WORKER_DDL)
    embedded = (
        inferred.withColumn("model_id", F.lit(model_id))
        .withColumn("embedded_at_run", F.lit(run_date).cast("date"))
        .select(*_OUTPUT_COLUMNS)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    counts.update(image_errors=0, video_errors=0, failed_no_embedding=0)
    if to_embed_count:  # an unchanged night runs no job here (issue 24: its re-run is a few Spark jobs in all)
        # The models run in this job (its result is persisted): its Arrow batches are sized for them.
        with temporary_conf(entities.sparkSession, ARROW_BATCH_CONF, str(config.arrow_batch_rows)):
            stats = embedded.agg(
                F.count(F.col("image_error")).alias("image_errors"),
                F.count(F.col("video_error")).alias("video_errors"),
                F.count(F.when(F.col("embedding").isNull(), 1)).alias("failed"),
            ).first()
        counts["image_errors"] = int(stats["image_errors"])
        counts["video_errors"] = int(stats["video_errors"])
        counts["failed_no_embedding"] = int(stats["failed"])
    log.info("content embeddings (model %s): %s", model_id, counts)

    snapshot = embedded.where(F.col("embedding").isNotNull())
    if previous is not None and counts[STATUS_REUSED]:
        reused = (
            labelled.where(F.col("_status") == STATUS_REUSED).select("entity_id", "entity_type")
            .join(with_added_columns(previous).drop("entity_type"), "entity_id")
            .select(*_OUTPUT_COLUMNS)
        )
        snapshot = snapshot.unionByName(reused)
    # Persist the result itself, so the caller's one unpersist() frees everything this call cached.
    snapshot = snapshot.persist(StorageLevel.MEMORY_AND_DISK)
    snapshot.count()
    embedded.unpersist()
    labelled.unpersist()
    return snapshot, counts
