"""Training loop, collation and inference for the hierarchical graph transformer (torch only)."""

from hir_pipeline.lazy import lazy_exports

#: Public name -> submodule, imported on first access (``hir_pipeline.lazy``).
_EXPORTS = {
    "InferenceResult": "inference",
    "Trainer": "trainer",
    "augment_view": "collate",
    "infer": "inference",
    "latest_checkpoint": "trainer",
    "pack_views": "collate",
    "resolve_device": "trainer",
    "single_node_view": "collate",
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
