"""Per-view structure in numpy: shortest-path distances and edge types among a view's nodes.

Views hold at most a few hundred nodes, so an all-sources, level-synchronous BFS (one boolean
matrix product per level, at most ``max_dist`` levels) is cheaper than a per-source queue and exactly as
exact; distances feed the shortest-path spatial encoding of Graphormer (Ying et al., NeurIPS 2021).
"""

from __future__ import annotations

import numpy as np


def view_structure(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    type_fwd: np.ndarray,
    type_bwd: np.ndarray,
    max_dist: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Distances and edge types of the subgraph induced by one view.

    Args:
        n: number of nodes in the view (positions ``0..n-1``, position 0 is the anchor).
        src, dst: positions of the endpoints of each undirected pair connected in the graph.
        type_fwd: edge type id of ``src -> dst`` (0 when that direction is absent).
        type_bwd: edge type id of ``dst -> src`` (0 when absent).
        max_dist: distances are truncated here; unreachable pairs get ``max_dist + 1``.

    Returns:
        ``(dist, edge_types)``: ``n x n`` ``int8`` distances (symmetric, zero diagonal) and ``uint8`` edge type
        ids (``[i, j]`` is the highest id of an edge ``i -> j``, 0 if none; the diagonal is 0 even for
        self-loops, which never shorten a path).
    """
    types = np.zeros((n, n), dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if len(src):
        # np.maximum.at: with multi-edges the deepest (highest id) type wins, independent of row order.
        np.maximum.at(types, (src, dst), np.asarray(type_fwd, dtype=np.int64))
        np.maximum.at(types, (dst, src), np.asarray(type_bwd, dtype=np.int64))
    np.fill_diagonal(types, 0)
    if types.max(initial=0) > 255:
        raise ValueError("edge type ids above 255 do not fit the uint8 edge_types contract")
    adj = ((types > 0) | (types.T > 0)).astype(np.float32)
    dist = np.full((n, n), max_dist + 1, dtype=np.int8)
    np.fill_diagonal(dist, 0)
    reached = np.eye(n, dtype=bool)
    frontier = reached.astype(np.float32)
    for d in range(1, max_dist + 1):
        new = ((frontier @ adj) > 0) & ~reached
        if not new.any():
            break
        dist[new] = d
        reached |= new
        frontier = new.astype(np.float32)
    return dist, types.astype(np.uint8)
