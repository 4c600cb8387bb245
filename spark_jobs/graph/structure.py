"""Per-view structure in numpy: shortest-path distances and edge types among a view's nodes.

Views hold at most a few hundred nodes, so an all-sources, level-synchronous BFS (one boolean
matrix product per level, at most ``max_dist`` levels) is cheaper than a per-source queue and exactly as
exact; distances feed the shortest-path spatial encoding of Graphormer (Ying et al., NeurIPS 2021).
A batch of views runs as stacked matrix products, views of similar size padded to a common width (padding
nodes have no edges, so they change no distance): the Python overhead is per width, not per view.
"""

from __future__ import annotations

import numpy as np

#: Views are padded to a multiple of this many nodes and processed together per padded width.
PAD_STEP = 16


def batch_structure(
    sizes: np.ndarray,
    edge_ptr: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    type_fwd: np.ndarray,
    type_bwd: np.ndarray,
    max_dist: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Distances and edge types of the subgraph induced by each view of a batch.

    Args:
        sizes: nodes of each view (positions ``0..n-1``, position 0 is the anchor).
        edge_ptr: the pairs of view ``b`` are at ``edge_ptr[b]:edge_ptr[b + 1]`` of the arrays below.
        src, dst: positions of the endpoints of each undirected pair connected in the graph.
        type_fwd: edge type id of ``src -> dst`` (0 when that direction is absent).
        type_bwd: edge type id of ``dst -> src`` (0 when absent).
        max_dist: distances are truncated here; unreachable pairs get ``max_dist + 1``.

    Returns:
        ``(dist, edge_types)``, one ``n x n`` array per view: ``int8`` distances (symmetric, zero diagonal) and
        ``uint8`` edge type ids (``[i, j]`` is the highest id of an edge ``i -> j``, 0 if none; the diagonal is 0
        even for self-loops, which never shorten a path).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    type_fwd, type_bwd = np.asarray(type_fwd, dtype=np.int64), np.asarray(type_bwd, dtype=np.int64)
    if max(type_fwd.max(initial=0), type_bwd.max(initial=0)) > 255:
        raise ValueError("edge type ids above 255 do not fit the uint8 edge_types contract")
    view_of_edge = np.repeat(np.arange(len(sizes)), np.diff(np.asarray(edge_ptr, dtype=np.int64)))
    widths = -(-np.maximum(sizes, 1) // PAD_STEP) * PAD_STEP
    dist_out: list[np.ndarray] = [np.zeros((0, 0), np.int8)] * len(sizes)
    type_out: list[np.ndarray] = [np.zeros((0, 0), np.uint8)] * len(sizes)
    for width in np.unique(widths):
        views = np.flatnonzero(widths == width)
        local = np.full(len(sizes), -1)
        local[views] = np.arange(len(views))
        sel = local[view_of_edge] >= 0
        v, s, d = local[view_of_edge[sel]], src[sel], dst[sel]
        types = np.zeros((len(views), width, width), dtype=np.int16)  # ids are <= 255 here
        # np.maximum.at: with multi-edges the deepest (highest id) type wins, independent of row order.
        np.maximum.at(types, (v, s, d), type_fwd[sel].astype(np.int16))
        np.maximum.at(types, (v, d, s), type_bwd[sel].astype(np.int16))
        diag = np.arange(width)
        types[:, diag, diag] = 0
        dist = _distances((types > 0) | (types.transpose(0, 2, 1) > 0), max_dist)
        types8 = types.astype(np.uint8)
        for i, view in enumerate(views):
            n = sizes[view]
            dist_out[view], type_out[view] = dist[i, :n, :n], types8[i, :n, :n]
    return dist_out, type_out


def _distances(adj: np.ndarray, max_dist: int) -> np.ndarray:
    """``[B, n, n]`` BFS distances over boolean adjacencies, truncated at ``max_dist`` (``max_dist + 1`` beyond)."""
    b, n, _ = adj.shape
    dist = np.full((b, n, n), max_dist + 1, dtype=np.int8)
    diag = np.arange(n)
    # Level 1 is the adjacency itself: only the later levels need a product.
    frontier = adj.copy()
    frontier[:, diag, diag] = False
    dist[frontier] = 1
    dist[:, diag, diag] = 0
    reached = frontier.copy()
    reached[:, diag, diag] = True
    adj = adj.astype(np.float32)
    for d in range(2, max_dist + 1):
        new = (np.matmul(frontier.astype(np.float32), adj) > 0) & ~reached
        if not new.any():
            break
        dist[new] = d
        reached |= new
        frontier = new
    return dist


def view_structure(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    type_fwd: np.ndarray,
    type_bwd: np.ndarray,
    max_dist: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Distances and edge types of one view: :func:`batch_structure` of a batch of one (same arguments)."""
    dist, types = batch_structure(np.array([n]), np.array([0, len(src)]), src, dst, type_fwd, type_bwd, max_dist)
    return dist[0], types[0]
