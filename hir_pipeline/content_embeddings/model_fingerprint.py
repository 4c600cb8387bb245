"""Fingerprints of the content models: their files hashed by content, so weights replaced in place are noticed.

Used by the model identifier (``content_hash.model_identifier``: changes => re-embed everything) and by the
precision calibration's cache key (``precision.calibration_key``: other models => time again).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hir_pipeline.content_embeddings.config import EFFICIENTNET_LITE0, EmbeddingConfig, resolve_model_folder

_MODEL_FILE_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".pth", ".pt", ".model")
_file_hash_cache: dict[tuple[str, int, int], str] = {}


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
