"""FlexAttention ``score_mod`` adding Graphormer-style structural biases (Ying et al. 2021,
"Do Transformers Really Perform Bad for Graph Representation?").

The bias of a (query, key) pair of the same view is the sum of three per-head learned scalars indexed by
(a) the shortest-path distance, (b) the (query type, key type) pair and (c) the direct edge type. The
indices are looked up from the packed small-integer buffers of :class:`PackedLayout`, so no dense
``[B, H, S, S]`` bias is ever built: FlexAttention evaluates the function inside its fused kernel.

The same elementwise function :func:`structural_bias` also runs on broadcast index grids, which is how the
chunked CPU path (``chunked.py``) and the dense reference (``dense.py``) compute exactly the same scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from hir_pipeline.model.attention.layout import PackedLayout


class BiasTables(NamedTuple):
    """Per-head learned bias tables.

    Args:
        dist: float ``[H, max_dist + 2]`` (last column = unreachable).
        type_pair: float ``[H, T * T]``, indexed by ``type_q * T + type_k``.
        edge: float ``[H, num_edge_types + 1]`` (column 0 = no direct edge).
    """

    dist: Tensor
    type_pair: Tensor
    edge: Tensor


def structural_bias(
    dist_bias: Tensor,
    type_pair_bias: Tensor,
    edge_bias: Tensor,
    dist: Tensor,
    node_type: Tensor,
    edge_type: Tensor,
    view_id: Tensor,
    local_idx: Tensor,
    view_len: Tensor,
    pair_offset: Tensor,
    num_node_types: int,
    h: Tensor,
    q_idx: Tensor,
    kv_idx: Tensor,
) -> Tensor:
    """Elementwise structural bias for head ``h``, query token ``q_idx`` and key token ``kv_idx``.

    Works on scalars (inside FlexAttention) and on broadcastable index tensors (chunked / dense paths).
    Pairs from different views get an arbitrary in-range value; they are masked out by the view mask.

    Args:
        dist_bias, type_pair_bias, edge_bias: the :class:`BiasTables` entries.
        dist, node_type, edge_type, view_id, local_idx, view_len, pair_offset: :class:`PackedLayout` tensors.
        num_node_types: ``T``, the node-type vocabulary size.
        h, q_idx, kv_idx: head, query and key indices.
    """
    v = view_id[q_idx]
    n = view_len[v]
    # Clamp keys of other views into the query's block so the lookup never leaves the buffer.
    lk = local_idx[kv_idx].minimum(n - 1)
    pair = pair_offset[v] + local_idx[q_idx] * n + lk
    d = dist[pair].long()
    e = edge_type[pair].long()
    tp = node_type[q_idx] * num_node_types + node_type[kv_idx]
    return dist_bias[h, d] + type_pair_bias[h, tp] + edge_bias[h, e]


def structural_bias_score_mod(
    dist_bias: Tensor,
    type_pair_bias: Tensor,
    edge_bias: Tensor,
    dist: Tensor,
    node_type: Tensor,
    edge_type: Tensor,
    view_id: Tensor,
    local_idx: Tensor,
    view_len: Tensor,
    pair_offset: Tensor,
    num_node_types: int,
) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
    """FlexAttention ``score_mod`` adding :func:`structural_bias` to the scaled dot-product score.

    Args: see :func:`structural_bias` (all tensors on the device of q/k/v; the bias tables may require grad,
    FlexAttention differentiates through captured tensors).
    """

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + structural_bias(
            dist_bias, type_pair_bias, edge_bias, dist, node_type, edge_type, view_id, local_idx,
            view_len, pair_offset, num_node_types, h, q_idx, kv_idx,
        )

    return score_mod


def layout_score_mod(
    tables: BiasTables, layout: PackedLayout, num_node_types: int
) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
    """:func:`structural_bias_score_mod` for a :class:`~.layout.PackedLayout` and :class:`BiasTables`."""
    return structural_bias_score_mod(
        tables.dist, tables.type_pair, tables.edge, layout.dist, layout.node_type, layout.edge_type,
        layout.view_id, layout.local_idx, layout.view_len, layout.pair_offset, num_node_types,
    )


def layout_bias_block(
    tables: BiasTables, layout: PackedLayout, num_node_types: int, q_idx: Tensor, kv_idx: Tensor
) -> Tensor:
    """Bias for all heads over the grid ``q_idx x kv_idx`` (1-D index tensors): float ``[H, |q|, |kv|]``."""
    h = torch.arange(tables.dist.shape[0], device=q_idx.device)[:, None, None]
    return structural_bias(
        tables.dist, tables.type_pair, tables.edge, layout.dist, layout.node_type, layout.edge_type,
        layout.view_id, layout.local_idx, layout.view_len, layout.pair_offset, num_node_types,
        h, q_idx[None, :, None], kv_idx[None, None, :],
    )
