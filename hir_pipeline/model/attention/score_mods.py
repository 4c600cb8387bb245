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
    tables: BiasTables,
    layout: PackedLayout,
    num_node_types: int,
    h: Tensor,
    q_idx: Tensor,
    kv_idx: Tensor,
) -> Tensor:
    """Elementwise structural bias for head ``h``, query token ``q_idx`` and key token ``kv_idx``.

    Works on scalars (inside FlexAttention) and on broadcastable index tensors (chunked / dense paths).
    Pairs from different views get an arbitrary in-range value; they are masked out by the view mask.

    Args:
        tables: the per-head :class:`BiasTables`.
        layout: the :class:`PackedLayout` whose index tensors (``dist``, ``node_type``, ``edge_type``,
            ``view_id``, ``local_idx``, ``view_len``, ``pair_offset``) the pair is looked up in.
        num_node_types: ``T``, the node-type vocabulary size.
        h: head index.
        q_idx: query token index.
        kv_idx: key token index.
    """
    v = layout.view_id[q_idx]
    n = layout.view_len[v]
    # Clamp keys of other views into the query's block so the lookup never leaves the buffer.
    lk = layout.local_idx[kv_idx].minimum(n - 1)
    pair = layout.pair_offset[v] + layout.local_idx[q_idx] * n + lk
    d = layout.dist[pair].long()
    e = layout.edge_type[pair].long()
    tp = layout.node_type[q_idx] * num_node_types + layout.node_type[kv_idx]
    return tables.dist[h, d] + tables.type_pair[h, tp] + tables.edge[h, e]


def layout_score_mod(
    tables: BiasTables, layout: PackedLayout, num_node_types: int
) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
    """FlexAttention ``score_mod`` adding :func:`structural_bias` to the scaled dot-product score.

    The returned function closes over ``tables`` and ``layout``; FlexAttention lifts the tensors it reads from
    them into its kernel (and differentiates through the bias tables when they require grad).

    Args:
        tables: per-head :class:`BiasTables` (on the device of q/k/v).
        layout: the :class:`PackedLayout` of the batch (on the device of q/k/v).
        num_node_types: ``T``, the node-type vocabulary size.
    """

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + structural_bias(tables, layout, num_node_types, h, q_idx, kv_idx)

    return score_mod


def layout_bias_block(
    tables: BiasTables, layout: PackedLayout, num_node_types: int, q_idx: Tensor, kv_idx: Tensor
) -> Tensor:
    """Bias for all heads over the grid ``q_idx x kv_idx`` (1-D index tensors): float ``[H, |q|, |kv|]``.

    Args:
        tables: per-head :class:`BiasTables`.
        layout: the packed layout.
        num_node_types: ``T``, the node-type vocabulary size.
        q_idx: long ``[|q|]`` query token indices.
        kv_idx: long ``[|kv|]`` key token indices.
    """
    h = torch.arange(tables.dist.shape[0], device=q_idx.device)[:, None, None]
    return structural_bias(tables, layout, num_node_types, h, q_idx[None, :, None], kv_idx[None, None, :])
