"""Chunked structural attention: the FlexAttention function computed block by block with plain torch ops.

CPU FlexAttention without ``torch.compile`` materialises the whole score matrix, and its backward is not
what a training loop on CPU wants. This path computes exactly the same function (same
:func:`~.score_mods.structural_bias`, same view mask) one query block at a time, and differentiably:

* a query block only attends to the contiguous key span of its own views (block sparsity of the view
  mask), so a block costs ``H x block x span`` floats, and ``span`` is bounded by the view sizes, not ``S``;
* with ``checkpoint=True`` each block is recomputed in backward (``torch.utils.checkpoint``), so autograd
  keeps only the inputs, never the per-block probabilities: peak extra memory is one block.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from hir_pipeline.model.attention.layout import BlockSpan, PackedLayout
from hir_pipeline.model.attention.options import AttentionOptions
from hir_pipeline.model.attention.score_mods import BiasTables, layout_bias_block


def _block_attention(
    q: Tensor, k: Tensor, v: Tensor, tables: BiasTables, layout: PackedLayout, num_node_types: int,
    span: BlockSpan, scale: float,
) -> Tensor:
    """Attention of one query block over its key span.

    Args:
        q: ``[H, qe - qs, D]`` queries of the block.
        k, v: ``[H, ke - ks, D]`` keys and values of the span.
        tables: per-head bias tables.
        layout: the packed layout.
        num_node_types: node-type vocabulary size ``T``.
        span: the block's query rows and key span.
        scale: score scale.
    """
    device = q.device
    q_idx = torch.arange(span.qs, span.qe, device=device)
    k_idx = torch.arange(span.ks, span.ke, device=device)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [H, bq, bk]
    bias = layout_bias_block(tables, layout, num_node_types, q_idx, k_idx)
    scores = scores + bias.to(scores.dtype)
    same_view = layout.view_id[q_idx][:, None] == layout.view_id[k_idx][None, :]
    scores = scores.masked_fill(~same_view, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def chunked_structural_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: PackedLayout,
    tables: BiasTables,
    num_node_types: int,
    options: AttentionOptions | None = None,
) -> Tensor:
    """Structural attention over a packed batch, chunked over query blocks.

    Args:
        q, k, v: ``[1, H, S, D]`` (packed batch, batch dimension 1).
        layout: the packed layout (``S == layout.seq_len``).
        tables: per-head bias tables.
        num_node_types: node-type vocabulary size ``T``.
        options: ``scale``, ``block_size`` (query rows per block) and ``checkpoint`` (recompute blocks in
            backward) of :class:`~.options.AttentionOptions`; default: ``AttentionOptions()``.

    Returns:
        ``[1, H, S, D]`` attention output.
    """
    if q.shape[0] != 1:
        raise ValueError("packed attention expects batch dimension 1")
    options = AttentionOptions() if options is None else options
    scale = 1.0 / math.sqrt(q.shape[-1]) if options.scale is None else options.scale
    use_checkpoint = options.checkpoint
    if use_checkpoint is None:
        use_checkpoint = torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v, *tables)
        )
    q0, k0, v0 = q[0], k[0], v[0]
    outs = []
    for span in layout.query_block_spans(options.block_size):
        qs, qe, ks, ke = span
        args = (q0[:, qs:qe], k0[:, ks:ke], v0[:, ks:ke], tables, layout, num_node_types, span, scale)
        outs.append(checkpoint(_block_attention, *args, use_reentrant=False) if use_checkpoint
                    else _block_attention(*args))
    return torch.cat(outs, dim=1).unsqueeze(0)
