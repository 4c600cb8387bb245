"""Fusing the available modalities of an entity into one fixed-width, unit-norm content vector.

Layout (fixed for a given config, whatever modalities an entity has)::

    [ sqrt(w_text) * t  |  sqrt(w_image) * P i  |  sqrt(w_attr) * a ]   then L2-normalised

``t``, ``i``, ``a`` are the unit text, image and attribute vectors; ``P`` is an optional fixed, seeded random
orthonormal projection of the image features (Johnson-Lindenstrauss, so that a 1280-d CNN feature does not
dominate the fused width; re-normalised after projecting). A missing modality leaves its slot zero, so:

* the width never depends on which modalities are present (one column type, one space for all entities);
* for two entities with the same modalities, ``cos(fused) = sum_m w_m cos_m / sum_m w_m`` - a weighted average
  of per-modality cosines (the ``sqrt`` makes the weights act on squared norms);
* an entity with no modality at all has no fused vector (``None``), never a zero vector.

A video clip is embedded by the image model (mean of its sampled frames' features), so it is fused in the image
slot rather than a slot of its own: ``P v`` alone when the entity has no image, the normalised mix
``(1 - s) P i + s P v`` (``s = video_share``) when it has both. Entities without a clip take exactly the path they
took before clips existed, so their fused vectors are bit for bit the same and the fused width does not change.
"""

from __future__ import annotations

import numpy as np

from hir_pipeline.content_embeddings.config import FusionConfig


def orthonormal_projection(in_dim: int, out_dim: int, seed: int) -> np.ndarray:
    """A fixed ``[in_dim, out_dim]`` matrix with orthonormal columns (QR of a seeded Gaussian, signs fixed).

    Args:
        in_dim: input width (e.g. 1280 EfficientNet features).
        out_dim: output width, ``<= in_dim``.
        seed: numpy seed; the same seed gives the same matrix on every machine.
    """
    gaussian = np.random.default_rng(seed).standard_normal((in_dim, out_dim))
    q, r = np.linalg.qr(gaussian)
    # QR is unique up to column signs; make diag(R) positive so every LAPACK gives the same Q.
    return (q * np.sign(np.diag(r))).astype(np.float32)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


class Fusion:
    """Concatenate weighted modality slots and L2-normalise (layout in the module docstring).

    Args:
        text_dim: width of the text vectors.
        image_dim: native width of the image features.
        attributes_dim: width of the attribute vectors.
        config: weights, optional image projection width and its seed.
    """

    def __init__(self, text_dim: int, image_dim: int, attributes_dim: int, config: FusionConfig) -> None:
        self.config = config
        self.projection = (
            orthonormal_projection(image_dim, config.image_dim, config.seed)
            if config.image_dim is not None and config.image_dim < image_dim
            else None
        )
        image_slot = image_dim if self.projection is None else config.image_dim
        self.slots = (text_dim, image_slot, attributes_dim)
        self.dim = sum(self.slots)

    def __call__(
        self,
        text: np.ndarray,
        text_present: np.ndarray,
        image: np.ndarray,
        image_present: np.ndarray,
        attributes: np.ndarray,
        attributes_present: np.ndarray,
        video: np.ndarray | None = None,
        video_present: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fuse ``n`` entities.

        Args:
            text: ``[n, text_dim]`` unit rows (rows where absent are ignored).
            text_present: ``[n]`` bool, the entity has a text vector.
            image: ``[n, image_dim]`` native image features.
            image_present: ``[n]`` bool, the entity has an image vector.
            attributes: ``[n, attributes_dim]`` unit rows.
            attributes_present: ``[n]`` bool, the entity has an attribute vector.
            video: ``[n, image_dim]`` native clip features (pooled frames through the image model), or ``None``.
            video_present: ``[n]`` bool, the entity has a clip vector (``None``: no entity has one).

        Returns:
            ``(fused, ok)``: ``[n, dim]`` float32 unit rows and ``[n]`` bool; ``ok`` is false (and the row zero)
            where the entity had no modality at all.
        """
        if self.projection is not None:
            image = _normalise(image @ self.projection)
        c = self.config
        if video is not None and video_present is not None and video_present.any():
            image, image_present = self._with_video(image, image_present, video, video_present)
        parts = []
        for values, present, weight in (
            (text, text_present, c.text_weight),
            (image, image_present, c.image_weight),
            (attributes, attributes_present, c.attributes_weight),
        ):
            parts.append(values.astype(np.float32) * (np.sqrt(weight) * present.astype(np.float32))[:, None])
        fused = np.concatenate(parts, axis=1)
        ok = np.linalg.norm(fused, axis=1) > 0
        return _normalise(fused).astype(np.float32), ok

    def _with_video(self, image: np.ndarray, image_present: np.ndarray, video: np.ndarray,
                    video_present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The image slot's vectors and presence with the clips mixed in; rows without a clip are not touched."""
        rows = np.flatnonzero(video_present)
        clips = video[rows].astype(np.float32)
        if self.projection is not None:
            clips = _normalise(clips @ self.projection)
        share = np.float32(self.config.video_share)
        both = image_present[rows].astype(bool)[:, None]
        mixed = np.where(both, (np.float32(1.0) - share) * image[rows] + share * clips, clips)
        image = image.copy()
        image[rows] = _normalise(mixed)
        return image, image_present.astype(bool) | video_present.astype(bool)
