import networkx as nx
import numpy as np
import pytest

from spark_jobs.graph.structure import PAD_STEP, batch_structure, view_structure


def _random_graph(rng, n, p):
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j and rng.random() < p]
    src = np.array([a for a, _ in pairs], dtype=np.int64)
    dst = np.array([b for _, b in pairs], dtype=np.int64)
    return src, dst


def _networkx_distances(n, src, dst, max_dist):
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    want = np.full((n, n), max_dist + 1)
    for s, lengths in nx.all_pairs_shortest_path_length(g, cutoff=max_dist):
        for t, d in lengths.items():
            want[s, t] = d
    return want


@pytest.mark.parametrize("seed", range(12))
def test_distances_match_networkx(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    src, dst = _random_graph(rng, n, float(rng.uniform(0.01, 0.2)))
    fwd = rng.integers(1, 10, len(src))
    max_dist = int(rng.integers(1, 6))
    dist, types = view_structure(n, src, dst, fwd, np.zeros(len(src), dtype=np.int64), max_dist)
    assert dist.dtype == np.int8 and types.dtype == np.uint8
    np.testing.assert_array_equal(dist, _networkx_distances(n, src, dst, max_dist))
    assert (dist == dist.T).all() and (np.diagonal(dist) == 0).all()


def test_a_batch_of_views_of_several_padded_widths_equals_each_view_alone():
    """Views padded to a common width share stacked products: no distance or type may leak between them."""
    rng = np.random.default_rng(3)
    sizes = [int(x) for x in rng.integers(1, 3 * PAD_STEP, 25)] + [PAD_STEP, PAD_STEP + 1]
    graphs = [_random_graph(rng, n, 0.1) for n in sizes]
    fwd = [rng.integers(1, 10, len(s)) for s, _ in graphs]
    bwd = [rng.integers(0, 10, len(s)) for s, _ in graphs]
    ptr = np.r_[0, np.cumsum([len(s) for s, _ in graphs])]
    dist, types = batch_structure(np.array(sizes), ptr, *(np.concatenate(x) for x in zip(*graphs, strict=True)),
                                  np.concatenate(fwd), np.concatenate(bwd), 3)
    for i, n in enumerate(sizes):
        alone = view_structure(n, *graphs[i], fwd[i], bwd[i], 3)
        np.testing.assert_array_equal(dist[i], _networkx_distances(n, *graphs[i], 3))
        np.testing.assert_array_equal(types[i], alone[1])
        assert dist[i].shape == types[i].shape == (n, n)


def test_multi_edges_keep_highest_type_and_self_loops_are_ignored():
    src = np.array([0, 0, 1, 2])
    dst = np.array([1, 1, 1, 2])  # two 0-1 edges, two self-loops
    fwd = np.array([3, 7, 5, 5])
    bwd = np.array([4, 8, 6, 6])
    dist, types = view_structure(4, src, dst, fwd, bwd, max_dist=3)
    assert types[0, 1] == 7 and types[1, 0] == 8
    assert (np.diagonal(types) == 0).all() and (np.diagonal(dist) == 0).all()
    assert dist[0, 1] == 1 and dist[0, 2] == 4 and dist[3, 0] == 4  # 2 and 3 unreachable -> max_dist + 1


def test_single_node_and_one_direction_edges():
    dist, types = view_structure(1, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), 4)
    assert dist.tolist() == [[0]] and types.tolist() == [[0]]
    dist, types = view_structure(2, np.array([0]), np.array([1]), np.array([0]), np.array([2]), 4)
    assert dist[0, 1] == dist[1, 0] == 1 and types[1, 0] == 2 and types[0, 1] == 0
