"""Sentence embeddings by sentence-transformers (Sentence-BERT, Reimers & Gurevych, 2019), loaded offline.

A sentence-transformers folder (``modules.json``: transformer, pooling, normalisation, any dense layers) is run
with its own modules, so any sentence model works as its authors configured it; a plain transformers folder (a
BERT-style encoder without sentence-transformers config) gets mean pooling from sentence-transformers. Either way
the vectors are L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hir_pipeline.content_embeddings.config import resolve_model_folder


class TextEncoder:
    """L2-normalised sentence embeddings of a local sentence-transformers (or plain transformers) model.

    Args:
        model: a model folder, or a Hugging Face hub name already in the local cache (never downloaded).
        max_length: tokens kept per text (longer texts are truncated: sentence-transformers' ``max_seq_length``).
        batch_size: texts per forward pass (sentence-transformers sorts the texts by length first, so padding,
            the main waste of batched transformer inference, stays small; the output keeps input order).
        device: torch device string.
    """

    def __init__(self, model: str, *, max_length: int = 256, batch_size: int = 64, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        folder = resolve_model_folder(model)
        self.model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        self.model.max_seq_length = max_length
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.dim: int = int(self.model.get_embedding_dimension())

    @property
    def tokenizer(self):
        """The model's tokenizer (that of its transformer module)."""
        return self.model.tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array ``[len(texts), dim]`` with unit-norm rows (input order kept).

        Args:
            texts: the texts to embed (no ``None``; the caller leaves out entities without text).
        """
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        # normalize_embeddings: models without a Normalize module (plain transformers folders) get unit rows too.
        vectors = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)
