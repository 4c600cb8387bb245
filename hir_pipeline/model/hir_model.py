"""The full model: graph transformer encoder + projection head + prototype hierarchy."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from hir_pipeline.model.batch import PackedBatch
from hir_pipeline.model.config import ModelConfig
from hir_pipeline.model.encoder import GraphTransformerEncoder
from hir_pipeline.model.features import NodeFeatures
from hir_pipeline.model.hierarchy import PrototypeHierarchy


@dataclass
class ModelOutput:
    """Args:
    embedding: ``[V, out_dim]`` L2-normalised anchor embeddings (the published node embedding).
    logits: per level (coarsest first) ``[V, K_l]`` cosine logits of the prototype heads.
    """

    embedding: Tensor
    logits: list[Tensor]


class HIRModel(nn.Module):
    """Hierarchical interest representation model; student and EMA teacher are two copies of it.

    The prototype heads read a small MLP projection of the embedding (DINO's projection head) so the
    clustering objective does not constrain the published embedding space more than needed.

    Args:
        cfg: model configuration.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = GraphTransformerEncoder(cfg)
        self.head = nn.Sequential(nn.Linear(cfg.out_dim, cfg.out_dim), nn.GELU(), nn.Linear(cfg.out_dim, cfg.out_dim))
        self.hierarchy = PrototypeHierarchy(cfg.out_dim, cfg.level_sizes)

    def forward(self, batch: PackedBatch, feats: NodeFeatures) -> ModelOutput:
        emb = self.encoder(batch, feats).embedding
        return ModelOutput(embedding=emb, logits=self.hierarchy(self.head(emb)))
