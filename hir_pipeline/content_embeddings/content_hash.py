"""What decides whether an entity must be re-embedded: its content hash and the model identifier.

An entity is re-embedded when either changes: the content hash covers every input the encoders read (title,
description, image URI, attributes); the model identifier covers every model file (hashed by content, so
replacing weights in place is detected) and every setting that changes the output vectors. Settings that only
change speed (batch sizes, device, threads, partitions) are deliberately left out.

``spark_jobs.content_embeddings`` computes the same content hash as a Spark SQL expression (no Python UDF);
:func:`content_hash` is the reference it is tested against. Note that an image replaced at the same URI is not
detected (the hash covers the URI, not the bytes): publish new images under new URIs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hir_pipeline.content_embeddings.attributes import ATTRIBUTES_ENCODER_VERSION
from hir_pipeline.content_embeddings.config import EFFICIENTNET_LITE0, EmbeddingConfig, resolve_model_folder

#: Fields of an entity that feed the encoders, in hash order.
CONTENT_FIELDS: tuple[str, ...] = ("title", "description", "image_uri", "attributes")
#: Version of this identifier scheme; bump it to force a full re-embed after an encoder code change.
EMBEDDING_CODE_VERSION = "content-v1"

_MODEL_FILE_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".pth", ".pt", ".model")
_file_hash_cache: dict[tuple[str, int, int], str] = {}


def canonical_content(title: str | None, description: str | None, image_uri: str | None,
                      attributes: str | None) -> str:
    """Length-prefixed concatenation of the content fields (``-1:`` for null), so no two inputs collide."""
    return "".join("-1:" if v is None else f"{len(v)}:{v}" for v in (title, description, image_uri, attributes))


def content_hash(title: str | None, description: str | None, image_uri: str | None, attributes: str | None) -> str:
    """SHA-256 (hex) of :func:`canonical_content`; equal to the Spark expression in the content job."""
    return hashlib.sha256(canonical_content(title, description, image_uri, attributes).encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, cached per (path, size, mtime) so the driver hashes each model file once."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _file_hash_cache:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _file_hash_cache[key] = digest.hexdigest()
    return _file_hash_cache[key]


def folder_fingerprint(folder: Path) -> str:
    """Hash of a model folder: relative names and contents of its config, vocabulary and weight files."""
    digest = hashlib.sha256()
    files = sorted(
        p for p in folder.rglob("*")
        if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES and not any(s.startswith(".") for s in p.parts[-2:])
    )
    for path in files:
        digest.update(os.fsencode(path.relative_to(folder).as_posix()) + b"\0")
        digest.update(file_sha256(path).encode() + b"\0")
    return digest.hexdigest()[:16]


def models_identifier(config: EmbeddingConfig) -> str:
    """The text and image models of ``config`` and their input settings: ``text=...|image=...``.

    Args:
        config: the embedding config (its ``text_model``, ``max_text_length``, ``image_model``, ``image_weights``,
            ``image_size``, ``image_mean`` and ``image_std``).
    """
    text_folder = resolve_model_folder(config.text_model)
    text = f"text={text_folder.name}@{folder_fingerprint(text_folder)};len={config.max_text_length}"
    if config.image_model == EFFICIENTNET_LITE0:
        weights = Path(config.resolved_image_weights())
        image = (f"image={EFFICIENTNET_LITE0}@{file_sha256(weights)[:16]};size={config.image_size};"
                 f"mean={','.join(f'{m:.6g}' for m in config.image_mean)};"
                 f"std={','.join(f'{s:.6g}' for s in config.image_std)}")
    else:
        image_folder = resolve_model_folder(config.image_model)
        image = f"image={image_folder.name}@{folder_fingerprint(image_folder)}"
    return f"{text}|{image}"


def model_identifier(config: EmbeddingConfig) -> str:
    """A string naming every model and output-affecting setting of ``config`` (changes => re-embed all).

    Example: ``content-v1|text=model@1f2e...;len=256|image=efficientnet-lite0@9a8b...;224;...
    |attr=hash-v2/64;digits=3;ids=5d1c...|...|precision=bfloat16``.

    Args:
        config: the embedding config; ``precision: auto`` is resolved here (see ``EmbeddingConfig.resolved_precision``).
    """
    f = config.fusion
    fusion = (f"fusion=t{f.text_weight:g},i{f.image_weight:g},a{f.attributes_weight:g};"
              f"img_dim={f.image_dim};seed={f.seed}")
    id_keys = hashlib.sha256(config.attributes_id_keys.encode()).hexdigest()[:8]
    attributes = (f"attr={ATTRIBUTES_ENCODER_VERSION}/{config.attributes_dim};digits={config.attributes_number_digits};"
                  f"ids={id_keys}")
    precision = f"precision={config.resolved_precision()}"
    return "|".join((EMBEDDING_CODE_VERSION, models_identifier(config), attributes, fusion, precision))
