"""Dense reference: materialise the full ``[H, S, S]`` structural bias and call
``scaled_dot_product_attention``. Used by tests (ground truth) and benchmarks (the baseline the block-sparse
paths are measured against); never by training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hir_pipeline.model.attention.layout import PackedLayout
from hir_pipeline.model.attention.score_mods import BiasTables, layout_bias_block


def dense_structural_bias(layout: PackedLayout, tables: BiasTables, num_node_types: int) -> Tensor:
    """Full additive attention bias ``[1, H, S, S]`` with ``-inf`` across views.

    Args:
        layout: the packed layout.
        tables: per-head bias tables.
        num_node_types: node-type vocabulary size ``T``.
    """
    idx = torch.arange(layout.seq_len, device=layout.device)
    bias = layout_bias_block(tables, layout, num_node_types, idx, idx)
    same = layout.view_id[:, None] == layout.view_id[None, :]
    return bias.masked_fill(~same, float("-inf")).unsqueeze(0)


def dense_structural_attention(
    q: Tensor, k: Tensor, v: Tensor, layout: PackedLayout, tables: BiasTables, num_node_types: int,
    scale: float | None = None,
) -> Tensor:
    """SDPA with the dense bias of :func:`dense_structural_bias`; same arguments as the chunked path."""
    bias = dense_structural_bias(layout, tables, num_node_types).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
