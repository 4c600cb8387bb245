"""All modalities of a batch of entities in one call: text, image, video, attributes, fused vector.

This is the torch-only core the Spark job runs inside each Python worker (and that tests and notebooks can run
directly). Which entities need embedding at all (content hash, model id) is decided by the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hir_pipeline.content_embeddings.attributes import encode_attributes
from hir_pipeline.content_embeddings.config import EFFICIENTNET_LITE0, EmbeddingConfig
from hir_pipeline.content_embeddings.fusion import Fusion
from hir_pipeline.content_embeddings.image import EFFICIENTNET_LITE0_DIM, ImageEncoder
from hir_pipeline.content_embeddings.precision import autocast, resolved_precision
from hir_pipeline.content_embeddings.text import TextEncoder
from hir_pipeline.content_embeddings.video import VideoEncoder

log = logging.getLogger(__name__)

_SENTENCE_END = (".", "!", "?", ":", ";")


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def entity_text(title: str | None, description: str | None) -> str | None:
    """The text embedded for an entity: ``"<title>. <description>"``, either part alone, or ``None``."""
    title, description = _clean(title), _clean(description)
    if title and description:
        return f"{title}{'' if title.endswith(_SENTENCE_END) else '.'} {description}"
    return title or description


@dataclass
class EmbeddedBatch:
    """Per-entity outputs of :meth:`ContentEmbedder.embed` (lists aligned with the input).

    Attributes:
        text: unit text vector or ``None`` (no title/description).
        image: unit native image features or ``None`` (no image, or it failed).
        attributes: unit hashed attribute vector or ``None``.
        fused: unit fused vector, or ``None`` when the entity had no usable modality.
        image_error: ``None`` or the :class:`~hir_pipeline.content_embeddings.image.ImageError` reason.
        video: unit clip vector (mean of the sampled frames' image features) or ``None`` (no clip, or it failed).
        video_error: ``None`` or the :class:`~hir_pipeline.content_embeddings.video.VideoError` reason.
    """

    text: list[np.ndarray | None]
    image: list[np.ndarray | None]
    attributes: list[np.ndarray | None]
    fused: list[np.ndarray | None]
    image_error: list[str | None]
    video: list[np.ndarray | None]
    video_error: list[str | None]


class ContentEmbedder:
    """Text + image + attribute encoders and their fusion, loaded once (offline) from an :class:`EmbeddingConfig`;
    video clips go through the image encoder (:class:`~hir_pipeline.content_embeddings.video.VideoEncoder`).

    Args:
        config: models and settings; the image model is loaded on first use (its width fixes the fused layout).
    """

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.device = config.resolved_device()
        self.precision = resolved_precision(config)
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.text = TextEncoder(config.text_model, max_length=config.max_text_length,
                                batch_size=config.batch_size, device=self.device)
        self._image: ImageEncoder | None = None
        self._fusion: Fusion | None = None

    @property
    def image(self) -> ImageEncoder:
        if self._image is None:
            self._image = ImageEncoder(self.config, device=self.device)
        return self._image

    @property
    def image_dim(self) -> int:
        """Native image feature width; known without loading EfficientNet, so text-only batches never load it."""
        if self._image is None and self.config.image_model == EFFICIENTNET_LITE0:
            return EFFICIENTNET_LITE0_DIM
        return self.image.dim

    @property
    def fusion(self) -> Fusion:
        if self._fusion is None:
            self._fusion = Fusion(self.text.dim, self.image_dim, self.config.attributes_dim, self.config.fusion)
        return self._fusion

    def embed(
        self,
        titles: Sequence[str | None],
        descriptions: Sequence[str | None],
        image_uris: Sequence[str | None],
        attributes: Sequence[str | None],
        video_uris: Sequence[str | None] | None = None,
    ) -> EmbeddedBatch:
        """Embed ``n`` entities given column-wise (all sequences of length ``n``; ``None`` = absent).

        ``video_uris`` may be left out (no entity has a clip); entities without a clip get exactly the vectors
        they got before clips were embedded.
        """
        n = len(titles)
        texts = [entity_text(t, d) for t, d in zip(titles, descriptions, strict=True)]
        text_idx = [i for i, t in enumerate(texts) if t is not None]
        text_mat = np.zeros((n, self.text.dim), dtype=np.float32)
        with autocast(self.device, self.precision):
            text_mat[text_idx] = self.text.encode([texts[i] for i in text_idx])
        text_ok = np.zeros(n, dtype=bool)
        text_ok[text_idx] = True

        uris = [_clean(u) for u in image_uris]
        image_idx = [i for i, u in enumerate(uris) if u is not None]
        image_mat = np.zeros((n, self.image_dim), dtype=np.float32)
        image_ok = np.zeros(n, dtype=bool)
        image_error: list[str | None] = [None] * n
        if image_idx:
            with autocast(self.device, self.precision):
                vectors, errors = self.image.encode([uris[i] for i in image_idx])
            for row, i in enumerate(image_idx):
                image_error[i] = errors[row]
                image_ok[i] = errors[row] is None
                image_mat[i] = vectors[row]

        attr_mat = np.zeros((n, self.config.attributes_dim), dtype=np.float32)
        attr_ok = np.zeros(n, dtype=bool)
        for i, raw in enumerate(attributes):
            vec = encode_attributes(raw, self.config.attributes_dim, self.config.attributes_id_keys,
                                    self.config.attributes_number_digits)
            if vec is not None:
                attr_mat[i], attr_ok[i] = vec, True

        clips = [None] * n if video_uris is None else [_clean(u) for u in video_uris]
        video_idx = [i for i, u in enumerate(clips) if u is not None]
        video_mat = video_ok = None
        video_error: list[str | None] = [None] * n
        if video_idx:
            video_mat = np.zeros((n, self.image_dim), dtype=np.float32)
            video_ok = np.zeros(n, dtype=bool)
            with autocast(self.device, self.precision):
                vectors, errors = VideoEncoder(self.image, self.config.video_frames).encode(
                    [clips[i] for i in video_idx])
            for row, i in enumerate(video_idx):
                video_error[i] = errors[row]
                video_ok[i] = errors[row] is None
                video_mat[i] = vectors[row]

        fused, fused_ok = self.fusion(text_mat, text_ok, image_mat, image_ok, attr_mat, attr_ok, video_mat, video_ok)
        return EmbeddedBatch(
            text=[text_mat[i] if text_ok[i] else None for i in range(n)],
            image=[image_mat[i] if image_ok[i] else None for i in range(n)],
            attributes=[attr_mat[i] if attr_ok[i] else None for i in range(n)],
            fused=[fused[i] if fused_ok[i] else None for i in range(n)],
            image_error=image_error,
            video=[video_mat[i] if video_ok is not None and video_ok[i] else None for i in range(n)],
            video_error=video_error,
        )


_EMBEDDERS: dict[EmbeddingConfig, ContentEmbedder] = {}


def cached_embedder(config: EmbeddingConfig) -> ContentEmbedder | None:
    """This process's :class:`ContentEmbedder` for ``config`` if it is already loaded, else ``None``."""
    return _EMBEDDERS.get(config)


def get_embedder(config: EmbeddingConfig) -> ContentEmbedder:
    """The process-wide :class:`ContentEmbedder` for ``config``, loaded on first use.

    Spark reuses Python workers across tasks (``spark.python.worker.reuse``, on by default), so each worker
    process loads the models once for the whole job, not once per partition or Arrow batch.
    """
    embedder = _EMBEDDERS.get(config)
    if embedder is None:
        log.info("Loading content models (text=%s, image=%s) on %s", config.text_model, config.image_model,
                 config.resolved_device())
        embedder = _EMBEDDERS[config] = ContentEmbedder(config)
    return embedder
