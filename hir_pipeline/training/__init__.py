"""Training loop, collation and inference for the hierarchical graph transformer (torch only)."""

from importlib import import_module

#: Public name -> submodule. Resolved on first access (PEP 562), so that importing one light
#: submodule (e.g. a config) does not import torch through this package.
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
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
