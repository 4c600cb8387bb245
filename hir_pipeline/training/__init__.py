"""Training loop, collation and inference for the hierarchical graph transformer (torch only)."""

from hir_pipeline.training.collate import augment_view, pack_views, single_node_view
from hir_pipeline.training.inference import InferenceResult, infer
from hir_pipeline.training.trainer import Trainer, latest_checkpoint, resolve_device

__all__ = ["InferenceResult", "Trainer", "augment_view", "infer", "latest_checkpoint", "pack_views",
           "resolve_device", "single_node_view"]
