"""Hierarchical graph transformer: structural attention, encoder, prototype hierarchy, distillation losses."""

from hir_pipeline.model.batch import PackedBatch, pack_views
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.model.distillation import HierarchicalDINOLoss, ema_update, engagement_infonce
from hir_pipeline.model.encoder import GraphTransformerEncoder
from hir_pipeline.model.features import NodeFeatures, hash_id_buckets
from hir_pipeline.model.hierarchy import PrototypeHierarchy, cluster_perplexity, sinkhorn_knopp
from hir_pipeline.model.hir_model import HIRModel, ModelOutput

__all__ = ["GraphTransformerEncoder", "HIRModel", "HierarchicalDINOLoss", "ModelConfig", "ModelOutput",
           "NodeFeatures", "PackedBatch", "PrototypeHierarchy", "TrainConfig", "cluster_perplexity", "ema_update",
           "engagement_infonce", "hash_id_buckets", "pack_views", "sinkhorn_knopp"]
