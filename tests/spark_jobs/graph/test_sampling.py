"""The numpy kernels of the views stage against straightforward per-anchor reference implementations."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from spark_jobs.graph.sampling import (
    AdjacencyRows,
    NodeRows,
    PairRows,
    ViewGraph,
    build_view_batch,
    edges_among,
    hop_prefix,
    induced_edges,
    mix64,
    oriented_pairs,
    sample_batch,
    sample_keys,
    sampling_adjacency,
    unit_interval,
    view_code,
)


def _random_graph(rng, n=60, p=0.08, hub_cap=6, weights=None):
    """A random symmetric graph with hub-capped sampling adjacency and degree-oriented pairs."""
    und = {(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p}
    types = {}
    for i, j in und:  # one or both directions typed
        if rng.random() < 0.8:
            types[(i, j)] = int(rng.integers(1, 12))
        if rng.random() < 0.8 or (i, j) not in types:
            types[(j, i)] = int(rng.integers(1, 12))
    nbrs = {i: [] for i in range(n)}
    for i, j in und:
        nbrs[i].append(j)
        nbrs[j].append(i)
    adj_src, adj_dst, adj_w, adj_cap = [], [], [], []
    for i in range(n):
        cand = list(rng.permutation(nbrs[i]))  # a stand-in for the seeded hub-cap sample
        for j in cand[:hub_cap]:
            adj_src.append(i)
            adj_dst.append(int(j))
            adj_w.append(float(weights(i, j)) if weights else float(rng.uniform(0.05, 10)))
            adj_cap.append(len(cand) > hub_cap)
    deg = np.array([len(nbrs[i]) for i in range(n)])
    p_src, p_dst, p_fwd, p_bwd = [], [], [], []
    for i, j in und:
        a, b = (i, j) if (deg[i], i) <= (deg[j], j) else (j, i)
        p_src.append(a)
        p_dst.append(b)
        p_fwd.append(types.get((a, b), 0))
        p_bwd.append(types.get((b, a), 0))
    graph = ViewGraph.from_arrays(
        NodeRows(np.arange(n), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64), rng.integers(0, 5, n)),
        AdjacencyRows(np.array(adj_src, dtype=np.int64), np.array(adj_dst), np.array(adj_w), np.array(adj_cap)),
        PairRows(np.array(p_src, dtype=np.int64), np.array(p_dst), np.array(p_fwd), np.array(p_bwd)),
    )
    return graph, types, list(zip(p_src, p_dst, strict=True))


def _key(graph, anchor, hop, nbr, w, seed, view):
    prefix = hop_prefix(seed, view, graph.node_hash[[anchor]], hop)
    return float(sample_keys(prefix, graph.node_hash[[nbr]], np.array([w]))[0])


def _reference_view(graph, anchor, fanout, seed, view, max_view_nodes):
    """The documented sampling semantics, one anchor, plain Python."""
    members = {anchor: (0, 0.0, False)}  # node -> (hop, key, trunc)
    frontier = [anchor]
    for hop, k in enumerate(fanout, start=1):
        chosen: dict[int, tuple[float, int, bool]] = {}
        for p in frontier:
            lo, hi = graph.adj_ptr[p], graph.adj_ptr[p + 1]
            cand = sorted(
                (_key(graph, anchor, hop, int(j), w, seed, view), int(j))
                for j, w in zip(graph.adj_dst[lo:hi], graph.adj_w[lo:hi], strict=True) if int(j) not in members
            )
            if not cand:
                continue
            trunc = len(cand) > k or bool(graph.capped[p])
            for key, j in cand[:k]:
                if j in chosen:
                    old = chosen[j]
                    best = min((key, p), old[:2])
                    chosen[j] = (*best, trunc or old[2])
                else:
                    chosen[j] = (key, p, trunc)
        for j, (key, _, trunc) in chosen.items():
            members[j] = (hop, key, trunc)
        frontier = list(chosen)
    order = sorted(members, key=lambda v: (members[v][0], members[v][1], v))
    over = len(order) > max_view_nodes
    kept = order[:max_view_nodes]
    return kept, [members[v][2] or over for v in kept]


@pytest.mark.parametrize("seed", range(10))
def test_sample_batch_matches_reference(seed):
    rng = np.random.default_rng(seed)
    graph, _, _ = _random_graph(rng, n=int(rng.integers(5, 70)), p=float(rng.uniform(0.02, 0.3)),
                                hub_cap=int(rng.integers(3, 16)))
    fanout = tuple(int(k) for k in rng.integers(1, 5, int(rng.integers(1, 4))))
    max_nodes = int(rng.integers(2, 25))
    anchors = rng.permutation(graph.num_nodes)
    got = sample_batch(graph, anchors, fanout, seed=seed, view="broad", max_view_nodes=max_nodes)
    assert got.ptr[0] == 0 and got.ptr[-1] == len(got.nodes) == len(got.trunc)
    for b, a in enumerate(anchors):
        nodes, trunc = _reference_view(graph, int(a), fanout, seed, "broad", max_nodes)
        lo, hi = got.ptr[b], got.ptr[b + 1]
        assert got.nodes[lo:hi].tolist() == nodes
        assert got.trunc[lo:hi].tolist() == trunc
        assert got.truncated[b] == any(trunc)


def test_sample_batch_independent_of_batching_and_weight_scale():
    rng = np.random.default_rng(11)
    graph, _, _ = _random_graph(rng, n=80, p=0.1)
    anchors = np.arange(graph.num_nodes)
    kw = {"seed": 3, "view": "narrow", "max_view_nodes": 20}
    whole = sample_batch(graph, anchors, (5, 3), **kw)
    for a in (0, 17, 79):
        one = sample_batch(graph, np.array([a]), (5, 3), **kw)
        assert one.nodes.tolist() == whole.nodes[whole.ptr[a]:whole.ptr[a + 1]].tolist()
    scaled = ViewGraph(**{**graph.__dict__, "adj_w": graph.adj_w * 0.37})
    again = sample_batch(scaled, anchors, (5, 3), **kw)
    assert again.nodes.tolist() == whole.nodes.tolist() and again.trunc.tolist() == whole.trunc.tolist()
    other = sample_batch(graph, anchors, (5, 3), **{**kw, "view": "broad"})
    assert other.nodes.tolist() != whole.nodes.tolist()


def test_weighted_sample_frequencies():
    """Fan-out 1 from a star picks each neighbour with probability w / sum(w) (Efraimidis-Spirakis)."""
    rng = np.random.default_rng(0)
    stars, weights = 6000, np.array([1.0, 2.0, 7.0])
    centre = np.arange(stars) * 4
    src = np.repeat(centre, 3)
    dst = src + np.tile([1, 2, 3], stars)
    n = 4 * stars
    graph = ViewGraph.from_arrays(
        NodeRows(np.arange(n), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64), np.zeros(n)),
        AdjacencyRows(src, dst, np.tile(weights, stars), np.zeros(len(src), dtype=bool)),
        PairRows([], [], [], []),
    )
    got = sample_batch(graph, centre, (1,), seed=5, view="broad", max_view_nodes=8)
    picked = got.nodes[got.ptr[:-1] + 1] - centre
    freq = np.bincount(picked, minlength=4)[1:] / stars
    np.testing.assert_allclose(freq, weights / weights.sum(), atol=0.02)
    assert got.truncated.all()  # 3 candidates for a fan-out of 1


def test_hash_helpers():
    assert int(mix64(np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF  # splitmix64, seed 0
    assert view_code("broad") == view_code("broad") != view_code("narrow")
    u = unit_interval(np.array([0, 2**63, 2**64 - 1], dtype=np.uint64))
    assert (u > 0).all() and (u < 1).all() and u[1] == pytest.approx(0.5)
    h = mix64(np.arange(200_000, dtype=np.uint64))
    assert abs(unit_interval(h).mean() - 0.5) < 0.005


def test_induced_edges_and_structure_match_brute_force():
    rng = np.random.default_rng(4)
    graph, types, pairs = _random_graph(rng, n=50, p=0.12)
    anchors = np.arange(graph.num_nodes)
    views = sample_batch(graph, anchors, (4, 3), seed=1, view="broad", max_view_nodes=14)
    edges = induced_edges(graph, views)
    rows = build_view_batch(graph, anchors, (4, 3), seed=1, view="broad", max_view_nodes=14, max_dist=3)
    for b in range(len(anchors)):
        nodes = views.nodes[views.ptr[b]:views.ptr[b + 1]].tolist()
        lo, hi = edges.ptr[b], edges.ptr[b + 1]
        got = {(nodes[s], nodes[d], f, w) for s, d, f, w in zip(edges.src[lo:hi], edges.dst[lo:hi],
                                                                 edges.fwd[lo:hi], edges.bwd[lo:hi], strict=True)}
        want = {(a, c, types.get((a, c), 0), types.get((c, a), 0)) for a, c in pairs if a in nodes and c in nodes}
        assert got == want and hi - lo == len(want)
        # structure: distances on the induced subgraph, edge types per direction
        assert rows.nodes[b].tolist() == nodes and rows.node_types[b].tolist() == graph.node_type[nodes].tolist()
        n = len(nodes)
        dist = np.frombuffer(rows.dist[b], np.int8).reshape(n, n)
        et = np.frombuffer(rows.edge_types[b], np.uint8).reshape(n, n)
        sub = nx.Graph()
        sub.add_nodes_from(nodes)
        sub.add_edges_from((i, j) for i, j in types if i in sub and j in sub)
        lengths = dict(nx.all_pairs_shortest_path_length(sub, cutoff=3))
        for x, a in enumerate(nodes):
            for y, c in enumerate(nodes):
                assert dist[x, y] == lengths[a].get(c, 4)
                assert et[x, y] == (0 if x == y else types.get((a, c), 0))
    assert rows.truncated.tolist() == views.truncated.tolist()


def test_isolated_anchor_and_empty_batch():
    rng = np.random.default_rng(2)
    graph, _, _ = _random_graph(rng, n=10, p=0.0)
    rows = build_view_batch(graph, np.array([3]), (4, 2), seed=0, view="broad", max_view_nodes=5, max_dist=2)
    assert rows.nodes[0].tolist() == [3] and rows.dist == [b"\x00"] and not rows.truncated[0]
    empty = build_view_batch(graph, np.zeros(0, np.int64), (4,), seed=0, view="broad", max_view_nodes=5,
                             max_dist=2)
    assert empty.nodes == [] and len(empty.truncated) == 0


def _edge_rows(rng, n=30, p=0.2):
    """Symmetric edge rows with multi-edges (two types on some pairs) and a self-loop."""
    rows = []
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < p:
                for t in ([1, 3] if rng.random() < 0.3 else [int(rng.integers(1, 5))]):
                    w = float(rng.uniform(0.1, 5))
                    rows += [(i, j, w, t), (j, i, w, t + 10)]
    rows += [(0, 0, 1.0, 2), (0, 0, 1.0, 12)]
    src, dst, w, t = (np.array(c) for c in zip(*rows, strict=True))
    return src, dst, w, t


def test_sampling_adjacency_keeps_each_nodes_smallest_keys_over_merged_weights():
    rng = np.random.default_rng(4)
    src, dst, w, _ = _edge_rows(rng)
    hashes = rng.integers(-2**63, 2**63 - 1, 30, dtype=np.int64)
    got = sampling_adjacency(src, dst, w, hashes, hub_cap=4, seed=9)
    for node in range(30):
        merged: dict[int, float] = {}
        for a, b, x in zip(src, dst, w, strict=True):
            if a == node and b != node:
                merged[b] = merged.get(b, 0.0) + x
        keys = {b: sample_keys(hop_prefix(9, "pool", hashes[[node]], 0), hashes[[b]], np.array([x]))[0]
                for b, x in merged.items()}
        want = sorted(keys, key=lambda b: (keys[b], b))[:4]
        mine = got.src == node
        assert sorted(got.dst[mine].tolist()) == sorted(want)
        np.testing.assert_allclose(got.w[mine][np.argsort(got.dst[mine])], [merged[b] for b in sorted(want)])
        assert (got.capped[mine] == (len(merged) > 4)).all()


def test_oriented_pairs_store_each_pair_once_from_the_lower_degree_end():
    rng = np.random.default_rng(5)
    src, dst, _, t = _edge_rows(rng)
    got = oriented_pairs(src, dst, t)
    degree = np.bincount(src, minlength=30)
    seen = set()
    for a, b, fwd, bwd in zip(*got, strict=True):
        assert a != b and (min(a, b), max(a, b)) not in seen
        seen.add((min(a, b), max(a, b)))
        assert (degree[a], a) < (degree[b], b)
        assert fwd == t[(src == a) & (dst == b)].max() and bwd == t[(src == b) & (dst == a)].max()
    assert seen == {(min(a, b), max(a, b)) for a, b in zip(src, dst, strict=True) if a != b}


def test_edges_among_known_nodes_only():
    present = np.array([True, False, True])
    src, dst = np.array([0, 0, 2, -1, 5]), np.array([2, 1, 0, 0, 0])
    assert edges_among(src, dst, present).tolist() == [True, False, True, False, False]
