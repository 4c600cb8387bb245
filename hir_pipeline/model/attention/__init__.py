"""Structural attention for packed graph views (attention-gym style: one idea per module)."""

from hir_pipeline.model.attention.bucketed import ViewBuckets, bucketed_structural_attention, view_buckets
from hir_pipeline.model.attention.chunked import chunked_structural_attention
from hir_pipeline.model.attention.dense import dense_structural_attention, dense_structural_bias
from hir_pipeline.model.attention.dispatch import resolve_backend, structural_attention
from hir_pipeline.model.attention.layout import BlockSpan, PackedLayout, build_layout
from hir_pipeline.model.attention.masks import create_block_mask, create_view_block_mask, view_mask_mod
from hir_pipeline.model.attention.options import AttentionOptions
from hir_pipeline.model.attention.score_mods import (
    BiasTables,
    layout_score_mod,
    structural_bias,
)

__all__ = [
    "AttentionOptions",
    "BiasTables",
    "BlockSpan",
    "PackedLayout",
    "ViewBuckets",
    "bucketed_structural_attention",
    "build_layout",
    "chunked_structural_attention",
    "create_block_mask",
    "create_view_block_mask",
    "dense_structural_attention",
    "dense_structural_bias",
    "layout_score_mod",
    "resolve_backend",
    "structural_attention",
    "structural_bias",
    "view_buckets",
    "view_mask_mod",
]
