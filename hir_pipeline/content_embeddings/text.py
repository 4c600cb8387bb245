"""Sentence embeddings with a BERT-style encoder: mean pooling + L2 norm (Sentence-BERT, Reimers & Gurevych, 2019).

With the default all-MiniLM-L6-v2 folder this reproduces ``SentenceTransformer(folder).encode(texts)`` (same
tokenizer, same truncation, masked mean over the last hidden state, L2 normalisation) using transformers alone,
so the Spark workers do not need sentence-transformers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from hir_pipeline.content_embeddings.config import resolve_model_folder

log = logging.getLogger(__name__)


def length_order(texts: Sequence[str]) -> np.ndarray:
    """Indices that sort ``texts`` longest first (stable), so each batch pads to similar lengths."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    return np.argsort(-lengths, kind="stable")


class TextEncoder:
    """Mean-pooled, L2-normalised transformer sentence embeddings, loaded offline.

    Args:
        model: a Hugging Face model folder, or a hub name already in the local cache (``local_files_only``).
        max_length: tokens kept per text (longer texts are truncated, like sentence-transformers'
            ``max_seq_length``).
        batch_size: texts per forward pass.
        device: torch device string.
    """

    def __init__(self, model: str, *, max_length: int = 256, batch_size: int = 64, device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer

        folder = resolve_model_folder(model)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(folder), local_files_only=True).to(device).eval()
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.dim: int = int(self.model.config.hidden_size)

    @torch.inference_mode()
    def _encode_batch(self, texts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        hidden = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            **({"token_type_ids": batch["token_type_ids"]} if "token_type_ids" in batch else {})
                            ).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=-1)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array ``[len(texts), dim]`` with unit-norm rows (input order kept).

        Texts are sorted by length (longest first) into batches of ``batch_size`` so that padding, the main
        waste of batched transformer inference, stays small; the result is scattered back to input order.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        order = length_order(texts)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            out[idx] = self._encode_batch([texts[i] for i in idx]).float().cpu().numpy()
        return out
