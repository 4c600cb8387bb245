"""Video embeddings: a few frames sampled evenly from an entity's clip, embedded by the image model, mean-pooled.

A clip (``entities.video_uri``) is read like an image (:func:`~hir_pipeline.content_embeddings.image.read_bytes`:
plain paths, ``file://``, ``http(s)://`` and object stores through fsspec, the whole file at once - clips are
short) and decoded with PyAV (``av``, FFmpeg bundled in its wheels; imported only when a batch has a clip, so
loading the code location never pays for it). ``EmbeddingConfig.video_frames`` frames are taken evenly over the
clip (:func:`sample_indices`), each goes through the image model exactly like an image
(:meth:`~hir_pipeline.content_embeddings.image.ImageEncoder.encode_images`), and the clip's vector is the mean of
the frames' unit vectors, L2-normalised - so it lives in the image model's space and is fused in the image slot
(:mod:`hir_pipeline.content_embeddings.fusion`). A missing, unreachable or undecodable clip never fails the batch:
its row gets no video vector and an error reason (:class:`VideoError`), and keeps its other modalities.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence

import numpy as np
import torch

from hir_pipeline.content_embeddings.image import ImageEncoder, ImageError, read_bytes

log = logging.getLogger(__name__)


class VideoError:
    """Why a clip could not be embedded; stored verbatim in ``content_embeddings.video_error``."""

    #: nothing at that path or URL.
    MISSING_FILE = ImageError.MISSING_FILE
    #: a scheme fsspec does not know, or whose fsspec package is not installed.
    UNSUPPORTED_URI = ImageError.UNSUPPORTED_URI
    #: the storage failed to deliver the bytes.
    FETCH_FAILED = ImageError.FETCH_FAILED
    #: the bytes were read but hold no video stream FFmpeg can decode (or not a single frame).
    UNREADABLE = "unreadable_video"


def sample_indices(total: int, n: int) -> list[int]:
    """Indices of ``n`` frames spread evenly over a clip of ``total`` frames.

    The clip is cut into ``n`` equal stretches and the middle frame of each is taken (so the first and last frames,
    often fades, are avoided); a clip of at most ``n`` frames gives all of them.

    Args:
        total: frames in the clip.
        n: frames wanted (``EmbeddingConfig.video_frames``).
    """
    if total <= n:
        return list(range(max(total, 0)))
    return [(2 * k + 1) * total // (2 * n) for k in range(n)]


def _count_frames(data: bytes) -> int:
    """Frames of the first video stream: the container's count, else its packets (demuxed, not decoded)."""
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        if stream.frames:
            return int(stream.frames)
        return sum(1 for packet in container.demux(stream) if packet.size)


def decode_frames(data: bytes, n: int) -> list:
    """``n`` frames sampled evenly (:func:`sample_indices`) from the clip in ``data``, as RGB PIL images.

    Decodes from the start up to the last frame wanted (clips are short; seeking is not frame-exact in every
    container). A container whose frame count overstates the frames that decode gives the ones that did.

    Raises:
        Exception: whatever PyAV raises on bytes it cannot demux or decode (the caller turns it into a reason).
    """
    import av

    wanted = sample_indices(_count_frames(data), n)
    if not wanted:
        return []
    keep, last = set(wanted), wanted[-1]
    frames = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        for i, frame in enumerate(container.decode(stream)):
            if i in keep:
                frames.append(frame.to_image().convert("RGB"))
            if i >= last:
                break
    return frames


def load_frames(uri: str, n: int) -> list | str:
    """Up to ``n`` frames sampled evenly from the clip at ``uri`` (RGB PIL images), or the :class:`VideoError` reason.

    Args:
        uri: plain path, ``file://``, ``http(s)://`` or an object-store URI (read like an image).
        n: frames wanted.
    """
    data = read_bytes(uri)
    if isinstance(data, str):
        return data
    try:
        frames = decode_frames(data, n)
    except Exception as exc:
        # Demuxers and decoders of corrupt files raise many types (av.error.InvalidDataError, IndexError for no
        # video stream, ValueError, ...): one bad clip is that row's video_error, never a failed job.
        log.debug("Video %s could not be decoded: %r", uri, exc)
        return VideoError.UNREADABLE
    return frames if frames else VideoError.UNREADABLE


def write_clip(target, frames: Sequence[np.ndarray], fps: int = 8) -> None:
    """Write RGB frames as an MPEG-4 clip in an ``.mp4`` container (FFmpeg's own ``mpeg4`` encoder, always bundled).

    Used by the synthetic source and the tests; the same frames give the same bytes.

    Args:
        target: a path or a writable binary file object.
        frames: ``[H, W, 3]`` uint8 arrays, all of one even-sized shape.
        fps: frames per second.
    """
    import av

    height, width = frames[0].shape[:2]
    with av.open(target, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for pixels in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")))
        container.mux(stream.encode())  # flush the encoder


class VideoEncoder:
    """Clip vectors: sampled frames through an :class:`ImageEncoder`, mean-pooled, L2-normalised.

    Args:
        image: the image encoder (its model, preprocessing and ``batch_size``: frames per forward pass, frames of
            several clips batched together).
        frames: frames sampled per clip (``EmbeddingConfig.video_frames``).
    """

    def __init__(self, image: ImageEncoder, frames: int) -> None:
        if frames < 1:
            raise ValueError("frames must be >= 1")
        self.image = image
        self.frames = frames
        self.dim = image.dim

    @torch.inference_mode()
    def encode(self, uris: Sequence[str]) -> tuple[np.ndarray, list[str | None]]:
        """Embed the clips at ``uris``.

        Returns:
            ``(vectors, errors)``: a float32 array ``[len(uris), dim]`` (unit rows; zero rows where the clip failed)
            and, per clip, ``None`` or the :class:`VideoError` reason.
        """
        sums = np.zeros((len(uris), self.dim), dtype=np.float64)
        counts = np.zeros(len(uris), dtype=np.int64)
        errors: list[str | None] = [None] * len(uris)
        owners: list[int] = []
        pending: list = []

        def flush(limit: int) -> None:
            while len(pending) >= limit and pending:
                take = min(len(pending), self.image.batch_size)
                vectors = self.image.encode_images(pending[:take])
                np.add.at(sums, owners[:take], vectors.astype(np.float64))
                np.add.at(counts, owners[:take], 1)
                del pending[:take], owners[:take]

        for i, uri in enumerate(uris):
            loaded = load_frames(uri, self.frames)
            if isinstance(loaded, str):
                errors[i] = loaded
                continue
            pending.extend(loaded)
            owners.extend([i] * len(loaded))
            flush(self.image.batch_size)
        flush(1)
        ok = counts > 0
        means = sums[ok] / counts[ok, None]
        norms = np.linalg.norm(means, axis=1, keepdims=True)
        out = np.zeros((len(uris), self.dim), dtype=np.float32)
        out[ok] = np.divide(means, norms, out=np.zeros_like(means), where=norms > 0).astype(np.float32)
        n_err = sum(e is not None for e in errors)
        if n_err:
            log.warning("%d of %d video clips could not be embedded", n_err, len(uris))
        return out, errors
