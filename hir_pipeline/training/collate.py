"""Collation of view dicts into packed batches, the student-view augmentation (node / edge dropout), and the
removal of an engagement pair's target from its views."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hir_pipeline.model.batch import PackedBatch, pack_views, view_arrays

__all__ = ["PackedBatch", "augment_view", "drop_node", "pack_views", "single_node_view"]


def augment_view(view: Mapping[str, Any], rng: np.random.Generator, node_dropout: float,
                 edge_dropout: float) -> dict[str, Any]:
    """Student view augmentation: drop non-anchor nodes and hide direct edges at random.

    Node dropout removes the node's row and column (the anchor is always kept). Edge dropout zeroes the edge
    type of an unordered pair in both directions, keeping the graph symmetric; distances are left as computed
    on the full view (the "hidden edge" is only hidden from the edge-type bias).

    Args:
        view: a view dict (``hir_pipeline.model.batch``).
        rng: numpy generator (all randomness of an epoch comes from one seeded generator).
        node_dropout: probability of dropping each non-anchor node.
        edge_dropout: probability of hiding each direct edge.
    """
    nodes, types, dist, edges = view_arrays(view)
    n = len(nodes)
    keep = np.ones(n, dtype=bool)
    if node_dropout > 0 and n > 1:
        keep[1:] = rng.random(n - 1) >= node_dropout
    idx = np.flatnonzero(keep)
    m = len(idx)
    dist2 = dist.reshape(n, n)[np.ix_(idx, idx)]
    edge2 = edges.reshape(n, n)[np.ix_(idx, idx)].copy()
    if edge_dropout > 0 and m > 1:
        drop = np.triu(rng.random((m, m)) < edge_dropout, k=1)
        drop = drop | drop.T
        edge2[drop] = 0
    return {
        "anchor_idx": int(view["anchor_idx"]),
        "nodes": nodes[idx],
        "node_types": types[idx],
        "dist": np.ascontiguousarray(dist2).reshape(-1),
        "edge_types": np.ascontiguousarray(edge2).reshape(-1),
    }


def drop_node(view: Mapping[str, Any], node: int) -> Mapping[str, Any]:
    """``view`` without ``node`` (its row and column), or ``view`` itself when ``node`` is not in it or is its anchor.

    Used on an engagement pair's views during training: the user's view loses the target item and the item's view
    the user, so the direct edge between them (the answer) is not an input. Distances between the remaining nodes
    are kept as sampled.

    Args:
        view: a view dict (``hir_pipeline.model.batch``).
        node: global node index to remove.
    """
    nodes = np.asarray(view["nodes"], dtype=np.int64)
    hit = np.flatnonzero(nodes[1:] == int(node)) + 1
    if len(hit) == 0:
        return view
    nodes, types, dist, edges = view_arrays(view)
    n = len(nodes)
    keep = np.ones(n, dtype=bool)
    keep[hit] = False
    idx = np.flatnonzero(keep)
    return {
        "anchor_idx": int(view["anchor_idx"]),
        "nodes": nodes[idx],
        "node_types": types[idx],
        "dist": np.ascontiguousarray(dist.reshape(n, n)[np.ix_(idx, idx)]).reshape(-1),
        "edge_types": np.ascontiguousarray(edges.reshape(n, n)[np.ix_(idx, idx)]).reshape(-1),
    }


def single_node_view(node_idx: int, node_type: int) -> dict[str, Any]:
    """The trivial view of a node that has none (it is embedded from its own features only)."""
    return {"anchor_idx": int(node_idx), "nodes": [int(node_idx)], "node_types": [int(node_type)],
            "dist": np.zeros(1, dtype=np.int8), "edge_types": np.zeros(1, dtype=np.uint8)}


