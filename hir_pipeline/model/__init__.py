"""Hierarchical graph transformer: structural attention, encoder, prototype hierarchy, distillation losses."""

from importlib import import_module

#: Public name -> submodule. Resolved on first access (PEP 562), so that importing one light
#: submodule (e.g. a config) does not import torch through this package.
_EXPORTS = {
    "GraphTransformerEncoder": "encoder",
    "HIRModel": "hir_model",
    "HierarchicalDINOLoss": "distillation",
    "ModelConfig": "config",
    "ModelOutput": "hir_model",
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
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
