"""Toy typed interaction graph with planted communities, as view dicts + node features (tests, benchmarks).

``C`` communities, each with users, products and one category. Users engage (funnel stages 1..4) mostly with
products of their own community; products belong to their community's category. Product/category content
embeddings are a community centroid plus noise; users have no content. A model that learns the structure
clusters nodes by community.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from hir_pipeline.contracts import ENTITY_TYPES
from hir_pipeline.model.features import NodeColumns, NodeFeatures

_USER, _PRODUCT, _CATEGORY = (ENTITY_TYPES.index(t) for t in ("user", "product", "category"))
#: Edge-type ids of the toy graph: funnel stages 1..4 forward (odd) / reverse (even), like
#: ``contracts.edge_type_vocabulary``; then product_in_category (9) and its reverse (10).
_IN_CATEGORY, _REV_IN_CATEGORY = 9, 10


@dataclass
class ToyGraph:
    """Args:
    features: node features.
    broad_views, narrow_views: one view dict per node (teacher / student views).
    community: int ``[N]`` planted community of each node.
    engagement: ``(user_idx, item_idx, weight)`` arrays.
    entity_ids: string id of each node.
    """

    features: NodeFeatures
    broad_views: list[dict[str, Any]]
    narrow_views: list[dict[str, Any]]
    community: np.ndarray
    engagement: tuple[np.ndarray, np.ndarray, np.ndarray]
    entity_ids: list[str]


def _view(anchor: int, adj: list[dict[int, int]], node_type: np.ndarray, hops: int, cap: int, max_dist: int,
          rng: np.random.Generator) -> dict[str, Any]:
    order, seen, frontier = [anchor], {anchor}, deque([(anchor, 0)])
    while frontier and len(order) < cap:
        u, d = frontier.popleft()
        if d == hops:
            continue
        nbrs = list(adj[u])
        rng.shuffle(nbrs)
        for w in nbrs:
            if w not in seen and len(order) < cap:
                seen.add(w)
                order.append(w)
                frontier.append((w, d + 1))
    n = len(order)
    pos = {u: i for i, u in enumerate(order)}
    edges = np.zeros((n, n), dtype=np.uint8)
    for i, u in enumerate(order):
        for w, t in adj[u].items():
            if w in pos:
                edges[i, pos[w]] = t
    dist = np.full((n, n), max_dist + 1, dtype=np.int8)
    for i in range(n):  # BFS inside the view's induced subgraph
        dist[i, i] = 0
        queue = deque([i])
        while queue:
            a = queue.popleft()
            if dist[i, a] >= max_dist:
                continue
            for b in np.flatnonzero(edges[a]):
                if dist[i, b] > dist[i, a] + 1:
                    dist[i, b] = dist[i, a] + 1
                    queue.append(b)
    return {"anchor_idx": anchor, "nodes": order, "node_types": node_type[order].tolist(),
            "dist": dist.reshape(-1).tobytes(), "edge_types": edges.reshape(-1).tobytes()}


@dataclass(frozen=True)
class ToyGraphSettings:
    """Size and generator settings of :func:`make_toy_graph`.

    Args:
        num_communities: planted communities ``C``.
        users_per: users per community.
        items_per: products per community.
        content_dim: width of the toy content embeddings.
        events_per_user: engaged products per user.
        p_in: probability that an engagement stays in the user's community.
        max_dist: distances above it are "unreachable" (``max_dist + 1``).
        broad_cap: node cap of the broad (2-hop) views.
        narrow_cap: node cap of the narrow (1-hop) views.
        id_buckets: hashed-ID buckets of the features.
        seed: generator seed.
    """

    num_communities: int = 4
    users_per: int = 12
    items_per: int = 8
    content_dim: int = 16
    events_per_user: int = 5
    p_in: float = 0.9
    max_dist: int = 3
    broad_cap: int = 24
    narrow_cap: int = 12
    id_buckets: int = 1024
    seed: int = 0


def make_toy_graph(settings: ToyGraphSettings | None = None) -> ToyGraph:
    """Build a :class:`ToyGraph`.

    Args:
        settings: sizes and seed of the graph; default: ``ToyGraphSettings()``.
    """
    s = ToyGraphSettings() if settings is None else settings
    num_communities, users_per, items_per = s.num_communities, s.users_per, s.items_per
    rng = np.random.default_rng(s.seed)
    types, community = [], []
    for c in range(num_communities):
        types += [_USER] * users_per + [_PRODUCT] * items_per + [_CATEGORY]
        community += [c] * (users_per + items_per + 1)
    node_type = np.asarray(types, dtype=np.int64)
    community = np.asarray(community, dtype=np.int64)
    n = len(node_type)
    block = users_per + items_per + 1
    users = lambda c: np.arange(c * block, c * block + users_per)  # noqa: E731
    items = lambda c: np.arange(c * block + users_per, c * block + users_per + items_per)  # noqa: E731
    adj: list[dict[int, int]] = [dict() for _ in range(n)]
    eu, ei, ew = [], [], []
    for c in range(num_communities):
        cat = c * block + block - 1
        for it in items(c):
            adj[it][cat], adj[cat][it] = _IN_CATEGORY, _REV_IN_CATEGORY
        for u in users(c):
            for _ in range(s.events_per_user):
                cc = c if rng.random() < s.p_in else int(rng.integers(num_communities))
                it = int(rng.choice(items(cc)))
                stage = int(rng.integers(1, 5))
                adj[u][it], adj[it][u] = 2 * stage - 1, 2 * stage
                eu.append(int(u))
                ei.append(it)
                ew.append(float(stage))
    centroids = rng.normal(size=(num_communities, s.content_dim)).astype(np.float32)
    has_content = node_type != _USER
    content = (centroids[community] + 0.3 * rng.normal(size=(n, s.content_dim))).astype(np.float32)
    content[~has_content] = 0.0
    degree = np.array([len(a) for a in adj])
    degree_bucket = np.minimum(np.floor(np.log2(degree + 1)).astype(np.int64), 15)
    has_history = np.zeros(n, dtype=bool)
    has_history[eu] = True
    has_history[ei] = True
    entity_ids = [f"{ENTITY_TYPES[t]}_{i}" for i, t in enumerate(node_type)]
    features = NodeFeatures.from_arrays(NodeColumns(entity_ids, node_type, degree_bucket, has_history), s.id_buckets,
                                        content, has_content)
    broad = [_view(a, adj, node_type, 2, s.broad_cap, s.max_dist, rng) for a in range(n)]
    narrow = [_view(a, adj, node_type, 1, s.narrow_cap, s.max_dist, rng) for a in range(n)]
    engagement = (np.asarray(eu, dtype=np.int64), np.asarray(ei, dtype=np.int64), np.asarray(ew, dtype=np.float32))
    return ToyGraph(features, broad, narrow, community, engagement, entity_ids)
