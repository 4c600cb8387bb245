"""Hierarchical graph transformer: structural attention, encoder, prototype hierarchy, distillation losses."""

from hir_pipeline.lazy import lazy_exports

#: Public name -> submodule, imported on first access (``hir_pipeline.lazy``).
_EXPORTS = {
    "GraphTransformerEncoder": "encoder",
    "HIRModel": "hir_model",
    "HierarchicalDINOLoss": "distillation",
    "InBatchNegatives": "distillation",
    "ModelConfig": "config",
    "ModelOutput": "hir_model",
    "NodeColumns": "features",
    "NodeFeatures": "features",
    "PackedBatch": "batch",
    "PrototypeHierarchy": "hierarchy",
    "TrainConfig": "config",
    "cluster_perplexity": "hierarchy",
    "ema_update": "distillation",
    "engagement_infonce": "distillation",
    "hash_id_buckets": "features",
    "pack_views": "batch",
    "sinkhorn_knopp": "hierarchy",
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
