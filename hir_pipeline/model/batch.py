"""Packing view dicts (``graph_views`` rows) into one block-sparse batch.

A view is ``{"anchor_idx": int, "nodes": list[int] (nodes[0] == anchor), "node_types": list[int],
"dist": bytes | int8 array (n * n row-major), "edge_types": bytes | uint8 array (n * n row-major)}``
(see the "Graph tables" comment block of ``hir_pipeline.contracts``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hir_pipeline.model.attention.layout import PackedLayout, build_layout


@dataclass
class PackedBatch:
    """A packed batch of views.

    Args:
        layout: structural layout consumed by the attention.
        node_idx: long ``[S]`` global node of each token (0 for padding; see ``token_mask``).
        token_mask: bool ``[S]``, real (non-padding) tokens.
        anchor_idx: long ``[V]`` global anchor node of each view.
        history_exclude: long ``[S]`` neighbour left out of each token's history pool (-1: none), or ``None``
            (full histories). Set by the trainer for the views of the engagement pairs it scores.
        hide_features: optional bool ``[S]``: tokens whose own ID and content features are hidden from the
            input embedding (anchor-feature masking of student views); ``None`` = none.
    """

    layout: PackedLayout
    node_idx: Tensor
    token_mask: Tensor
    anchor_idx: Tensor
    history_exclude: Tensor | None = None
    hide_features: Tensor | None = None

    @property
    def num_views(self) -> int:
        return self.layout.num_views

    def to(self, device: torch.device | str) -> PackedBatch:
        hide = None if self.hide_features is None else self.hide_features.to(device)
        return PackedBatch(self.layout.to(device), self.node_idx.to(device), self.token_mask.to(device),
                           self.anchor_idx.to(device),
                           None if self.history_exclude is None else self.history_exclude.to(device), hide)


def _as_array(value: Any, dtype: np.dtype) -> np.ndarray:
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype=dtype)
    if isinstance(value, Tensor):
        return value.numpy().astype(dtype, copy=False)
    return np.asarray(value).astype(dtype, copy=False)


def view_arrays(view: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(nodes int64[n], node_types int64[n], dist int8[n*n], edge_types uint8[n*n])`` of a view dict."""
    nodes = np.asarray(view["nodes"], dtype=np.int64)
    n = len(nodes)
    types = np.asarray(view["node_types"], dtype=np.int64)
    dist = _as_array(view["dist"], np.int8)
    edges = _as_array(view["edge_types"], np.uint8)
    if len(types) != n or dist.size != n * n or edges.size != n * n:
        raise ValueError(f"malformed view for anchor {view.get('anchor_idx')}: n={n}, types={len(types)}, "
                         f"dist={dist.size}, edge_types={edges.size}")
    if n == 0 or int(nodes[0]) != int(view["anchor_idx"]):
        raise ValueError(f"view of anchor {view.get('anchor_idx')} must start with its anchor")
    return nodes, types, dist, edges


def pack_views(views: Sequence[Mapping[str, Any]], pad_to: int = 128, max_dist: int | None = None) -> PackedBatch:
    """Concatenate views into one :class:`PackedBatch` (length padded to a multiple of ``pad_to``).

    Args:
        views: view dicts (see module docstring).
        pad_to: FlexAttention block size the packed length is rounded up to.
        max_dist: if given, distances are clipped to ``max_dist + 1`` (unreachable), guarding the bias table.
    """
    if not views:
        raise ValueError("cannot pack zero views")
    lengths, types, dists, edges, nodes = [], [], [], [], []
    for view in views:
        n_arr, t_arr, d_arr, e_arr = view_arrays(view)
        if max_dist is not None:
            d_arr = np.clip(d_arr, 0, max_dist + 1)
        lengths.append(len(n_arr))
        nodes.append(torch.from_numpy(n_arr))
        types.append(torch.from_numpy(t_arr))
        dists.append(torch.from_numpy(d_arr.copy()))
        edges.append(torch.from_numpy(e_arr.copy()))
    layout = build_layout(lengths, types, dists, edges, pad_to=pad_to)
    total = sum(lengths)
    node_idx = torch.zeros(layout.seq_len, dtype=torch.long)
    node_idx[:total] = torch.cat(nodes)
    token_mask = torch.zeros(layout.seq_len, dtype=torch.bool)
    token_mask[:total] = True
    anchor_idx = torch.tensor([int(v["anchor_idx"]) for v in views], dtype=torch.long)
    return PackedBatch(layout=layout, node_idx=node_idx, token_mask=token_mask, anchor_idx=anchor_idx)
