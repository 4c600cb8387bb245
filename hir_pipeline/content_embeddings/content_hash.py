"""What decides whether an entity must be re-embedded: its content hash and the model identifier.

An entity is re-embedded when either changes: the content hash covers every input the encoders read (title,
description, image URI, attributes, video URI); the model identifier covers every model file (hashed by content, so
replacing weights in place is detected) and every setting that changes the output vectors. Settings that only
change speed (batch sizes, device, threads, partitions) are deliberately left out.

The video URI enters the hash only when an entity has one, appended after the four original fields together with
the video settings (:func:`video_settings`: frames sampled, the clip's share of the image slot). So an entity
without a clip keeps the hash it had before clips were embedded (an upgrade re-embeds only the entities with a
clip), a changed clip URI re-embeds its entity, and changing a video setting re-embeds exactly the entities with a
clip rather than the whole catalogue (the video settings are not in the model identifier).

``spark_jobs.content_embeddings`` computes the same content hash as a Spark SQL expression (no Python UDF);
:func:`content_hash` is the reference it is tested against. Note that an image replaced at the same URI is not
detected (the hash covers the URI, not the bytes): publish new images (and clips) under new URIs.
"""

from __future__ import annotations

import hashlib

from hir_pipeline.content_embeddings.attributes import ATTRIBUTES_ENCODER_VERSION
from hir_pipeline.content_embeddings.config import EmbeddingConfig
from hir_pipeline.content_embeddings.model_fingerprint import models_identifier
from hir_pipeline.content_embeddings.precision import resolved_precision

#: Fields of an entity that feed the encoders, in hash order (``video_uri`` last: it enters the hash only when set).
CONTENT_FIELDS: tuple[str, ...] = ("title", "description", "image_uri", "attributes", "video_uri")
#: Version of this identifier scheme; bump it to force a full re-embed after an encoder code change.
EMBEDDING_CODE_VERSION = "content-v1"


def video_settings(config: EmbeddingConfig) -> str:
    """The settings that shape a clip's vectors, hashed with the URI of every entity that has a clip.

    Example: ``video:frames=8;share=0.5``.
    """
    return f"video:frames={config.video_frames};share={config.fusion.video_share:g}"


def _part(v: str | None) -> str:
    return "-1:" if v is None else f"{len(v)}:{v}"


def canonical_content(title: str | None, description: str | None, image_uri: str | None,
                      attributes: str | None, video_uri: str | None = None, video: str = "") -> str:
    """Length-prefixed concatenation of the content fields (``-1:`` for null), so no two inputs collide.

    A ``video_uri`` (with ``video``, the :func:`video_settings`) is appended only when it is not null, so an entity
    without a clip has the canonical form (and hash) it had before clips existed; the four fields before it parse
    unambiguously, so nothing collides with it.
    """
    head = "".join(_part(v) for v in (title, description, image_uri, attributes))
    return head if video_uri is None else f"{head}{_part(video_uri)}{_part(video)}"


def content_hash(title: str | None, description: str | None, image_uri: str | None, attributes: str | None,
                 video_uri: str | None = None, video: str = "") -> str:
    """SHA-256 (hex) of :func:`canonical_content`; equal to the Spark expression in the content job."""
    canonical = canonical_content(title, description, image_uri, attributes, video_uri, video)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def model_identifier(config: EmbeddingConfig) -> str:
    """A string naming every model and output-affecting setting of ``config`` (changes => re-embed all).

    Example: ``content-v1|text=model@1f2e...;len=256|image=efficientnet-lite0@9a8b...;224;...
    |attr=hash-v2/64;digits=3;ids=5d1c...|...|precision=bfloat16``.

    Args:
        config: the embedding config; ``precision: auto`` is resolved here (``precision.resolved_precision``).
    """
    f = config.fusion
    fusion = (f"fusion=t{f.text_weight:g},i{f.image_weight:g},a{f.attributes_weight:g};"
              f"img_dim={f.image_dim};seed={f.seed}")
    id_keys = hashlib.sha256(config.attributes_id_keys.encode()).hexdigest()[:8]
    attributes = (f"attr={ATTRIBUTES_ENCODER_VERSION}/{config.attributes_dim};digits={config.attributes_number_digits};"
                  f"ids={id_keys}")
    precision = f"precision={resolved_precision(config)}"
    return "|".join((EMBEDDING_CODE_VERSION, models_identifier(config), attributes, fusion, precision))
