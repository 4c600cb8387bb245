"""View-sized structural attention: each view attends within a block of its own size, not of the packing block.

Graph views are small (tens of tokens) while the packed sequence is padded to FlexAttention's 128-token blocks;
the chunked path (``chunked.py``) therefore scores every query block against a key span of up to ~2 x 128 tokens
and masks most of it away. Here the views are grouped by their length rounded up to a power of two (``bucket``),
and each group is one batched ``[G, H, L, L]`` attention: the work is ``sum_v L_v^2`` with ``L_v < 2 n_v``, the
same order as the structure the layout stores. The bias of a group is looked up from the layout's compact pair
buffers with the same elementwise terms as :func:`~.score_mods.structural_bias`, so the function equals
FlexAttention's (same view mask, same biases) and autograd differentiates it like any tensor expression
(memory: the groups' probabilities, ``H x sum_v L_v^2`` floats, never ``S^2``).

The grouping is host-side bookkeeping that depends only on the layout; :func:`view_buckets` computes it once per
batch so every layer reuses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from hir_pipeline.model.attention.layout import PackedLayout
from hir_pipeline.model.attention.score_mods import BiasTables


@dataclass
class ViewBucket:
    """Views padded to one length ``L``.

    Args:
        tokens: long ``[G, L]`` packed position of each slot (padding slots repeat the view's first token).
        valid: bool ``[G, L]``, real slots.
        pair: long ``[G, L, L]`` index into the layout's ``dist`` / ``edge_type`` buffers.
        _codes: cache of :meth:`pair_code` per table shape.
    """

    tokens: Tensor
    valid: Tensor
    pair: Tensor
    _codes: dict = field(default_factory=dict, repr=False)

    def pair_code(self, layout: PackedLayout, num_node_types: int, n_dist: int, n_edge: int) -> Tensor:
        """long ``[G, L, L]``: ``(dist * n_edge + edge_type) * T^2 + type_q * T + type_k`` of every pair, the row
        of the combined bias table; computed once per batch and shared by all layers."""
        key = (num_node_types, n_dist, n_edge)
        if key not in self._codes:
            types = layout.node_type[self.tokens].long()
            type_pair = types[:, :, None] * num_node_types + types[:, None, :]
            dist = layout.dist[self.pair].long().clamp_(0, n_dist - 1)
            self._codes[key] = (dist * n_edge + layout.edge_type[self.pair].long()) * num_node_types ** 2 + type_pair
        return self._codes[key]


@dataclass
class ViewBuckets:
    """All buckets of a layout and the permutation back to packed order.

    Args:
        buckets: one :class:`ViewBucket` per padded length.
        order: long ``[S]``: position ``i`` of the concatenated real slots of all buckets holds packed token
            ``order[i]``; ``inverse`` maps packed tokens back to those rows.
        inverse: long ``[S]``, the inverse permutation of ``order``.
    """

    buckets: list[ViewBucket]
    order: Tensor
    inverse: Tensor


def bucket_length(n: int, min_bucket: int) -> int:
    """``n`` rounded up to a power of two, at least ``min_bucket``."""
    return max(min_bucket, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def view_buckets(layout: PackedLayout, min_bucket: int = 8) -> ViewBuckets:
    """Group the layout's views (the trailing pad view included) by :func:`bucket_length`.

    Args:
        layout: the packed layout.
        min_bucket: the smallest padded length (tiny views share one bucket instead of many).
    """
    device = layout.device
    lengths = layout.view_len.tolist()
    by_len: dict[int, list[int]] = {}
    for view, n in enumerate(lengths):
        if n > 0:
            by_len.setdefault(bucket_length(n, min_bucket), []).append(view)
    buckets, order = [], []
    for length in sorted(by_len):
        views = torch.tensor(by_len[length], dtype=torch.long, device=device)
        n = layout.view_len[views].long()[:, None]  # [G, 1]
        slot = torch.arange(length, device=device)[None, :]  # [1, L]
        valid = slot < n
        local = torch.minimum(slot, n - 1)  # padding slots repeat the last real slot: every lookup in range
        tokens = layout.view_start[views][:, None] + local
        pair = layout.pair_offset[views][:, None, None] + local[:, :, None] * n[:, :, None] + local[:, None, :]
        buckets.append(ViewBucket(tokens=tokens, valid=valid, pair=pair))
        order.append(tokens[valid])
    order_t = torch.cat(order)
    inverse = torch.empty_like(order_t)
    inverse[order_t] = torch.arange(order_t.numel(), device=device)
    return ViewBuckets(buckets=buckets, order=order_t, inverse=inverse)


def bucketed_structural_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: PackedLayout,
    tables: BiasTables,
    num_node_types: int,
    scale: float | None = None,
    buckets: ViewBuckets | None = None,
) -> Tensor:
    """Structural attention over a packed batch, one batched dense attention per view-length bucket.

    Args:
        q, k, v: ``[1, H, S, D]`` (packed batch, batch dimension 1).
        layout: the packed layout (``S == layout.seq_len``).
        tables: per-head bias tables.
        num_node_types: node-type vocabulary size ``T``.
        scale: score scale, default ``1 / sqrt(D)`` (as FlexAttention).
        buckets: :func:`view_buckets` of ``layout`` (computed here when ``None``; share it across layers).

    Returns:
        ``[1, H, S, D]`` attention output.
    """
    if q.shape[0] != 1:
        raise ValueError("packed attention expects batch dimension 1")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    buckets = view_buckets(layout) if buckets is None else buckets
    q0, k0, v0 = q[0], k[0], v[0]  # [H, S, D]
    # The three bias terms of every (distance, edge type, type pair) combination, as one [combinations, H] table:
    # a pair's bias is then one row gather (a few thousand rows), instead of three gathers per pair and layer.
    n_dist, n_edge = tables.dist.shape[1], tables.edge.shape[1]
    table = (tables.dist[:, :, None, None] + tables.edge[:, None, :, None]
             + tables.type_pair[:, None, None, :]).reshape(tables.dist.shape[0], -1).t()
    outs = []
    for b in buckets.buckets:
        qb, kb, vb = (x[:, b.tokens].transpose(0, 1) for x in (q0, k0, v0))  # [G, H, L, D]
        code = b.pair_code(layout, num_node_types, n_dist, n_edge)
        bias = F.embedding(code, table).permute(0, 3, 1, 2)  # [G, H, L, L]
        scores = torch.matmul(qb, kb.transpose(-1, -2)) * scale + bias.to(qb.dtype)
        scores = scores.masked_fill(~b.valid[:, None, None, :], float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), vb)  # [G, H, L, D]
        outs.append(out.transpose(1, 2)[b.valid])  # [real slots, H, D]
    packed = torch.cat(outs)[buckets.inverse]  # [S, H, D] in packed order
    return packed.permute(1, 0, 2).unsqueeze(0)
