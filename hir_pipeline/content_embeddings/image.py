"""Image embeddings: pooled CNN / vision-transformer features of an entity's image.

The default backbone is EfficientNet-Lite0 (Tan & Le, 2019, "EfficientNet: Rethinking Model Scaling for
Convolutional Neural Networks", Lite variant): the global-average-pooled output of the last 1x1 convolution
(1280-d), before the ImageNet classifier. Any transformers vision model folder works too (pooled output, or
``get_image_features`` for CLIP-style dual encoders, Radford et al., 2021).

Images are read through fsspec (``fsspec.open(uri, "rb")``): plain paths and ``file://`` URIs, ``http(s)://``
(fsspec's HTTP backend needs ``aiohttp``) and object stores whose fsspec package is installed (``s3://`` with
``s3fs``, ``gs://`` with ``gcsfs``, ``abfs://`` with ``adlfs``; credentials from those packages' usual environment
variables and config files). Grayscale images (e.g. Fashion-MNIST's 28x28) are replicated to RGB and resized to the
model's resolution. A missing, unreachable or unreadable image never fails the batch: its row gets no vector and an
error reason (:class:`ImageError`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

import numpy as np
import torch

from hir_pipeline.content_embeddings.config import EFFICIENTNET_LITE0, EmbeddingConfig, resolve_model_folder

log = logging.getLogger(__name__)

#: Width of EfficientNet-Lite0's pooled features (the head is fixed at 1280 channels for all Lite variants).
EFFICIENTNET_LITE0_DIM = 1280


class ImageError:
    """Why an image could not be embedded; stored verbatim in ``content_embeddings.image_error``."""

    #: nothing at that path or URL (a local file, an object, an HTTP 404).
    MISSING_FILE = "missing_file"
    #: the bytes were read but are not an image Pillow can decode.
    UNREADABLE = "unreadable_image"
    #: a scheme fsspec does not know, or whose fsspec package (s3fs, gcsfs, aiohttp for http, ...) is not installed.
    UNSUPPORTED_URI = "unsupported_uri"
    #: the storage failed to deliver the bytes (network error, timeout, permission denied).
    FETCH_FAILED = "fetch_failed"


def _is_missing(exc: BaseException) -> bool:
    """Whether a ``FileNotFoundError`` means "nothing there" rather than a failed fetch.

    fsspec's HTTP backend raises ``FileNotFoundError(url)`` chained from the ``aiohttp`` error, whether the server
    answered 404 / 410 or could not be reached at all (or answered another error status).

    Args:
        exc: the exception ``fsspec.open`` or the read raised.
    """
    while exc is not None:
        if getattr(exc, "status", None) in (404, 410):  # an HTTP "not found" / "gone" response
            return True
        if not isinstance(exc, FileNotFoundError | IsADirectoryError):
            return False
        exc = exc.__cause__
    return True


def read_bytes(uri: str) -> bytes | str:
    """The bytes at ``uri`` (a local path or any URI fsspec opens), or the :class:`ImageError` reason.

    Args:
        uri: plain path, ``file://``, ``http(s)://`` or an object-store URI.
    """
    import fsspec

    if urlparse(uri).scheme == "file":  # fsspec takes a file:// path verbatim; file URIs are percent-encoded
        uri = unquote(urlparse(uri).path)
    try:
        with fsspec.open(uri, "rb") as fh:
            return fh.read()  # whole file: images are small, and one read is one request on remote storage
    except (FileNotFoundError, IsADirectoryError) as exc:
        if _is_missing(exc):
            return ImageError.MISSING_FILE
        log.debug("Image %s could not be fetched: %r", uri, exc.__cause__)
        return ImageError.FETCH_FAILED
    except (ImportError, ValueError) as exc:  # fsspec: "Install s3fs to access S3" / "Protocol not known: x"
        log.debug("Image %s: %s", uri, exc)
        return ImageError.UNSUPPORTED_URI
    except Exception as exc:  # backends raise their own types (OSError, aiohttp.ClientError, timeouts, ...)
        log.debug("Image %s could not be fetched: %r", uri, exc)
        return ImageError.FETCH_FAILED


def load_image(uri: str):
    """Open the image at ``uri`` as RGB (a PIL image) or return the :class:`ImageError` reason.

    Args:
        uri: plain path, ``file://``, ``http(s)://`` or an object-store URI (see :func:`read_bytes`).
    """
    from PIL import Image

    data = read_bytes(uri)
    if isinstance(data, str):
        return data
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB")  # grayscale (L), palette and RGBA all become 3-channel RGB
    except Exception:
        # Decoders of corrupt files raise many types (OSError, SyntaxError, struct.error, EOFError, ValueError, ...):
        # one bad image is that row's image_error, never a failed job.
        return ImageError.UNREADABLE


class ImageEncoder:
    """Pooled image features, L2-normalised, with a per-image error reason instead of exceptions.

    Args:
        config: the embedding config; uses ``image_model``, ``image_weights``, ``image_size``, ``image_mean``,
            ``image_std`` and ``image_batch_size``.
        device: torch device string.
    """

    def __init__(self, config: EmbeddingConfig, device: str = "cpu") -> None:
        self.config = config
        self.device = device
        self.batch_size = config.image_batch_size
        if config.image_model == EFFICIENTNET_LITE0:
            self._init_efficientnet()
        else:
            self._init_transformers(config.image_model)

    def _init_efficientnet(self) -> None:
        from efficientnet_lite_pytorch import EfficientNet

        # from_name + our own load: the package's from_pretrained prints and uses torch.load's legacy defaults.
        model = EfficientNet.from_name(EFFICIENTNET_LITE0)
        state = torch.load(self.config.resolved_image_weights(), map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        self.model = model.to(self.device).eval()
        self.dim = int(model._bn1.num_features)
        self.processor = None
        size = self.config.image_size
        self._mean = torch.tensor(self.config.image_mean).view(1, 3, 1, 1)
        self._std = torch.tensor(self.config.image_std).view(1, 3, 1, 1)
        self._size = (size, size)

    def _init_transformers(self, name: str) -> None:
        from transformers import AutoImageProcessor, AutoModel

        folder = str(resolve_model_folder(name))
        self.processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        self.model = AutoModel.from_pretrained(folder, local_files_only=True).to(self.device).eval()
        with torch.inference_mode():  # the width of the pooled output, found once with a blank image
            from PIL import Image

            self.dim = int(self._features([Image.new("RGB", (32, 32))]).shape[-1])

    def _pixels(self, images: list) -> torch.Tensor:
        if self.processor is not None:
            return self.processor(images=images, return_tensors="pt")["pixel_values"]
        from PIL import Image

        arrays = np.stack([np.asarray(img.resize(self._size, Image.BILINEAR), dtype=np.float32) for img in images])
        x = torch.from_numpy(arrays).permute(0, 3, 1, 2) / 255.0
        return (x - self._mean) / self._std

    def _features(self, images: list) -> torch.Tensor:
        pixels = self._pixels(images).to(self.device)
        if self.processor is None:  # EfficientNet: pooled last-conv features, classifier skipped
            return self.model.extract_features(pixels).mean(dim=(2, 3))
        if hasattr(self.model, "get_image_features"):  # CLIP-style: the projected image embedding
            out = self.model.get_image_features(pixel_values=pixels)
            return out if isinstance(out, torch.Tensor) else out.pooler_output
        out = self.model(pixel_values=pixels)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state.mean(dim=1)
        return pooled.flatten(1)  # conv backbones pool to [B, C, 1, 1]

    @torch.inference_mode()
    def encode_images(self, images: list) -> np.ndarray:
        """Unit feature rows (float32 ``[len(images), dim]``) of decoded images, in one forward pass.

        Args:
            images: RGB PIL images (the caller batches them; :meth:`encode` reads and batches them from URIs).
        """
        return torch.nn.functional.normalize(self._features(images).float(), p=2, dim=-1).cpu().numpy()

    @torch.inference_mode()
    def encode(self, uris: Sequence[str]) -> tuple[np.ndarray, list[str | None]]:
        """Embed the images at ``uris``.

        Returns:
            ``(vectors, errors)``: a float32 array ``[len(uris), dim]`` (unit rows; zero rows where the image
            failed) and, per image, ``None`` or the :class:`ImageError` reason.
        """
        out = np.zeros((len(uris), self.dim), dtype=np.float32)
        errors: list[str | None] = [None] * len(uris)
        for start in range(0, len(uris), self.batch_size):
            ok_idx, ok_imgs = [], []
            for i in range(start, min(start + self.batch_size, len(uris))):
                loaded = load_image(uris[i])
                if isinstance(loaded, str):
                    errors[i] = loaded
                else:
                    ok_idx.append(i)
                    ok_imgs.append(loaded)
            if ok_imgs:
                out[ok_idx] = self.encode_images(ok_imgs)
        n_err = sum(e is not None for e in errors)
        if n_err:
            log.warning("%d of %d images could not be embedded", n_err, len(uris))
        return out, errors
