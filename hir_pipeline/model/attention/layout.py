"""Packed layout of variable-length graph views for block-sparse structural attention.

All views of a batch are concatenated into one token sequence of length ``S`` (padded to a multiple
of the block size). Pairwise structure (shortest-path distance, direct edge type) is kept per view as
compact ``n_v * n_v`` int8/uint8 blocks concatenated into one flat buffer, so the bytes held grow with
``sum_v n_v^2`` (linear in ``S`` for bounded view sizes), never with ``S * S``. A pair ``(q, k)`` of the
same view ``v`` lives at ``pair_offset[v] + local_idx[q] * view_len[v] + local_idx[k]``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
from torch import Tensor


class BlockSpan(NamedTuple):
    """A query block ``[qs, qe)`` and the contiguous key span ``[ks, ke)`` it may attend to (python ints)."""

    qs: int
    qe: int
    ks: int
    ke: int


@dataclass
class PackedLayout:
    """Index tensors describing a packed batch (see module docstring).

    The trailing padding, if any, forms one extra "pad view" (index ``num_views``) whose pair block is
    all zeros, so every token belongs to a view and every lookup stays in range.

    Args:
        view_id: int32 ``[S]``, view of each token.
        local_idx: int32 ``[S]``, position of the token inside its view (0 = anchor).
        node_type: int32 ``[S]``, node type of the token (index into ``ENTITY_TYPES``; 0 for padding).
        view_start: int64 ``[V + 1]``, first token of each view (pad view last).
        view_len: int32 ``[V + 1]``, tokens per view.
        pair_offset: int64 ``[V + 1]``, offset of each view's pair block in ``dist`` / ``edge_type``.
        dist: int8 ``[P]``, shortest-path distances, row-major per view.
        edge_type: uint8 ``[P]``, direct edge type ids (0 = none), row-major per view.
        num_views: number of real views ``V`` (the pad view excluded).
    """

    view_id: Tensor
    local_idx: Tensor
    node_type: Tensor
    view_start: Tensor
    view_len: Tensor
    pair_offset: Tensor
    dist: Tensor
    edge_type: Tensor
    num_views: int

    @property
    def seq_len(self) -> int:
        return int(self.view_id.numel())

    @property
    def device(self) -> torch.device:
        return self.view_id.device

    def to(self, device: torch.device | str) -> PackedLayout:
        """Copy of the layout with every tensor on ``device``."""
        return PackedLayout(
            **{f.name: (getattr(self, f.name).to(device) if isinstance(getattr(self, f.name), Tensor)
                        else getattr(self, f.name)) for f in fields(self)}
        )

    def anchor_positions(self) -> Tensor:
        """Token positions of the anchors (first token) of the real views, long ``[V]``."""
        return self.view_start[: self.num_views]

    def query_block_spans(self, block_size: int) -> list[BlockSpan]:
        """For each query block ``[qs, qe)`` the contiguous key span ``[ks, ke)`` it may attend to.

        Views are contiguous, so the keys a block needs are those of its first to its last view.
        Returns :class:`BlockSpan` tuples (python ints, computed once on the host).

        Args:
            block_size: query rows per block.
        """
        view_id = self.view_id.tolist()
        start = self.view_start.tolist()
        length = self.view_len.tolist()
        spans = []
        s = self.seq_len
        for qs in range(0, s, block_size):
            qe = min(qs + block_size, s)
            first, last = view_id[qs], view_id[qe - 1]
            spans.append(BlockSpan(qs, qe, start[first], start[last] + length[last]))
        return spans


def build_layout(
    view_lengths: list[int],
    node_types: list[Tensor],
    dists: list[Tensor],
    edge_types: list[Tensor],
    pad_to: int = 128,
) -> PackedLayout:
    """Pack per-view structure into a :class:`PackedLayout`.

    Args:
        view_lengths: ``n_v`` of each view, in packing order.
        node_types: per view, int ``[n_v]`` node types.
        dists: per view, int8 ``[n_v * n_v]`` row-major distances.
        edge_types: per view, uint8 ``[n_v * n_v]`` row-major edge-type ids.
        pad_to: total length is rounded up to a multiple of this (FlexAttention block size).
    """
    total = sum(view_lengths)
    seq_len = max(pad_to, -(-total // pad_to) * pad_to)
    pad = seq_len - total
    lengths = list(view_lengths) + ([pad] if pad else [])
    num_views = len(view_lengths)
    view_id = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                      torch.tensor(lengths, dtype=torch.long))
    local_idx = torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths])
    types = [t.to(torch.int32) for t in node_types] + ([torch.zeros(pad, dtype=torch.int32)] if pad else [])
    dist_parts = [d.to(torch.int8) for d in dists] + ([torch.zeros(pad * pad, dtype=torch.int8)] if pad else [])
    edge_parts = [e.to(torch.uint8) for e in edge_types] + ([torch.zeros(pad * pad, dtype=torch.uint8)]
                                                          if pad else [])
    sizes = torch.tensor([n * n for n in lengths], dtype=torch.long)
    pair_offset = torch.cumsum(sizes, 0) - sizes
    length_t = torch.tensor(lengths, dtype=torch.long)
    view_start = torch.cumsum(length_t, 0) - length_t
    return PackedLayout(
        view_id=view_id,
        local_idx=local_idx,
        node_type=torch.cat(types),
        view_start=view_start,
        view_len=length_t.to(torch.int32),
        pair_offset=pair_offset,
        dist=torch.cat(dist_parts),
        edge_type=torch.cat(edge_parts),
        num_views=num_views,
    )
