"""Inference: the published node embedding and per-level cluster probabilities of every node.

Which trained network is published (the student or the EMA teacher) and the calibration of its cluster
probabilities are chosen by ``Trainer.infer`` / ``Trainer.output_calibration`` (``TrainConfig.published_encoder``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hir_pipeline.model.batch import pack_views
from hir_pipeline.model.features import NodeFeatures
from hir_pipeline.model.hir_model import HIRModel
from hir_pipeline.model.tree import majority_parents
from hir_pipeline.training.collate import single_node_view


@dataclass
class InferenceResult:
    """Args:
    embeddings: float32 ``[N, out_dim]`` L2-normalised, row ``i`` = node ``i`` (one space for every type); the
        ``Trainer`` publishes rows with the structure part too (``ModelConfig.structure_score_weight``).
    probs: per level (coarsest first) float32 ``[N, K_l]`` cluster probabilities.
    parent_maps: per level ``l >= 1``, int64 ``[K_l]`` parent cluster at level ``l - 1``: the one most of the
        cluster's members fall into (``model.tree.majority_parents``); for a cluster without members, the
        most similar level ``l - 1`` prototype (``PrototypeHierarchy.parent_maps``).
    has_view: bool ``[N]``; False where the node had no view and was embedded from its own features only.
    encoder_embeddings: the transformer's own ``[N, out_dim]`` embeddings when ``embeddings`` are published rows
        that also carry the structure part (whose non-user rows share a filler coordinate by construction, so the
        collapse check reads these); ``None`` when ``embeddings`` are the transformer's.
    """

    embeddings: np.ndarray
    probs: list[np.ndarray]
    parent_maps: list[np.ndarray]
    has_view: np.ndarray
    encoder_embeddings: np.ndarray | None = None


@torch.no_grad()
def infer(
    model: HIRModel,
    features: NodeFeatures,
    views: Sequence[Mapping[str, Any]],
    batch_size: int = 256,
    pad_to: int = 128,
    temperature: float | None = None,
    max_tokens: int = 8192,
    centers: Sequence[torch.Tensor] | None = None,
) -> InferenceResult:
    """Embed every node of ``features`` from its view (the broad views are the intended input).

    Every token pools its node's whole engagement history (``features.history``): the pairs left out during
    training (``PackedBatch.history_exclude``) are all back in the published embedding.

    Args:
        model: trained model (the published encoder: the student or the EMA teacher); put in eval mode here and
            restored afterwards.
        features: per-node features of all ``N`` nodes.
        views: at most one view per anchor; nodes without a view get a single-node view.
        batch_size: most views per packed batch.
        pad_to: packed lengths are padded to a multiple of this.
        temperature: softmax temperature of the cluster probabilities (default ``teacher_temp``; the student's
            are calibrated at ``student_temp``).
        max_tokens: most tokens per packed batch (bounds memory together with ``batch_size``).
        centers: per-level DINO teacher centers ``[1, K_l]`` subtracted from the logits before the softmax
            (``Trainer.centers()``; teacher only); without them the teacher's sharpened argmax favours the
            globally dominant prototype.
    """
    cfg = model.cfg
    temperature = cfg.teacher_temp if temperature is None else temperature
    device = next(model.parameters()).device
    feats = features.to(device)
    n = features.num_nodes
    by_anchor = {int(v["anchor_idx"]): v for v in views}
    has_view = np.zeros(n, dtype=bool)
    has_view[[a for a in by_anchor if 0 <= a < n]] = True
    node_types = features.node_type.tolist()
    all_views = [by_anchor[i] if has_view[i] else single_node_view(i, node_types[i]) for i in range(n)]

    emb = np.zeros((n, cfg.out_dim), dtype=np.float32)
    probs = [np.zeros((n, k), dtype=np.float32) for k in cfg.level_sizes]
    was_training = model.training
    model.train(False)
    try:
        start = 0
        while start < n:
            stop, tokens = start, 0
            while stop < n and stop - start < batch_size:
                size = len(all_views[stop]["nodes"])
                if stop > start and tokens + size > max_tokens:
                    break
                tokens += size
                stop += 1
            batch = pack_views(all_views[start:stop], pad_to=pad_to, max_dist=cfg.max_dist).to(device)
            out = model(batch, feats)
            emb[start:stop] = out.embedding.float().cpu().numpy()
            for lvl, logits in enumerate(out.logits):
                probs[lvl][start:stop] = _calibrated(logits, lvl, temperature, centers)
            start = stop
    finally:
        model.train(was_training)
    return InferenceResult(embeddings=emb, probs=probs, parent_maps=published_tree(model, probs), has_view=has_view)


def published_tree(model: HIRModel, probs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per level ``l >= 1`` the parent of each cluster: the level ``l - 1`` cluster most of its members' argmax falls
    into, or, for a cluster without members, the most similar level ``l - 1`` prototype.

    Args:
        model: the published model (its prototypes).
        probs: per level ``[N, K_l]`` cluster probabilities of every node.
    """
    nearest = [m.cpu().numpy() for m in model.hierarchy.parent_maps()]
    hard = [p.argmax(axis=1) for p in probs]
    return [majority_parents(hard[lvl], hard[lvl - 1], model.cfg.level_sizes[lvl], nearest[lvl - 1])
            for lvl in range(1, len(probs))]


@torch.no_grad()
def cluster_probabilities(model: HIRModel, embeddings: np.ndarray, temperature: float,
                          centers: Sequence[torch.Tensor] | None = None, batch_size: int = 8192) -> list[np.ndarray]:
    """Per level ``[N, K_l]`` cluster probabilities of published embeddings: the same function of the embedding as
    the model's forward pass (projection head, cosine prototypes), without re-encoding the views.

    Args:
        model: the published model.
        embeddings: float ``[N, out_dim]`` its embeddings (``InferenceResult.embeddings``).
        temperature: softmax temperature.
        centers: per-level teacher centers subtracted from the logits, or ``None``.
        batch_size: rows per matrix product.
    """
    out = [np.zeros((len(embeddings), k), dtype=np.float32) for k in model.cfg.level_sizes]
    for start in range(0, len(embeddings), batch_size):
        z = head_projections(model, embeddings[start:start + batch_size])
        for lvl, logits in enumerate(model.hierarchy(z.to(model.head[0].weight.dtype))):
            out[lvl][start:start + len(z)] = _calibrated(logits, lvl, temperature, centers)
    return out


def _calibrated(logits: torch.Tensor, level: int, temperature: float,
                centers: Sequence[torch.Tensor] | None) -> np.ndarray:
    """``softmax((logits - center) / temperature)`` of one level (no center when ``centers`` is ``None``)."""
    logits = logits.float()
    if centers is not None:
        logits = logits - centers[level].to(logits.device).reshape(1, -1)
    return torch.softmax(logits / temperature, -1).cpu().numpy()


@torch.no_grad()
def head_projections(model: HIRModel, embeddings: np.ndarray) -> torch.Tensor:
    """float ``[N, out_dim]``: the projection head's output for published embeddings (the prototypes' input)."""
    device = next(model.parameters()).device
    emb = torch.as_tensor(embeddings, device=device)
    return model.head(emb.to(model.head[0].weight.dtype)).float()
