"""hir_pipeline.retrieval: coarse-to-fine retrieval on hand-built embeddings against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.retrieval import HierarchicalSettings, build_index, exact_top_k, hierarchical_top_k

#: No cap: every member of the probed clusters is scored.
UNCAPPED = dict(candidates=0, candidate_share=0.0)


def separated(seed: int = 0, per: int = 5):
    """Three clusters of ``per`` items around the three axes of R^3 (noise 0.05) and one user per axis: every
    item of a user's cluster has a higher dot product with the user than any other item. Cluster IDs are
    published-style (not 0..K-1)."""
    rng = np.random.default_rng(seed)
    axes = np.eye(3, dtype=np.float32)
    items = np.vstack([axes[c] + 0.05 * rng.standard_normal((per, 3)) for c in range(3)]).astype(np.float32)
    users = (axes + 0.05 * rng.standard_normal((3, 3))).astype(np.float32)
    coarse = np.repeat([17, 4, 9], per)  # cluster of axis 0, 1, 2
    return users, items, [coarse]


def test_perfectly_separating_clusters_give_the_exact_lists_from_one_cluster():
    users, items, levels = separated()
    exact = exact_top_k(users, items, k=4)
    got = hierarchical_top_k(users, items, levels, 4, HierarchicalSettings(clusters=1, **UNCAPPED))
    np.testing.assert_array_equal(got.items, exact.items)
    np.testing.assert_allclose(got.scores, exact.scores, rtol=1e-6)
    assert got.scored.tolist() == [5, 5, 5] and got.rankable.tolist() == [15, 15, 15]
    assert got.probed.tolist() == [1, 1, 1]
    np.testing.assert_allclose(got.scored_share, 5 / 15)
    assert exact.scored.tolist() == [15, 15, 15] and exact.scored_share.tolist() == [1.0, 1.0, 1.0]
    # every user's list comes from its own axis' cluster
    assert [set(row // 5) for row in got.items] == [{0}, {1}, {2}]


def test_probing_every_cluster_equals_exact_search_with_random_allowed_items():
    rng = np.random.default_rng(3)
    users = rng.standard_normal((7, 6)).astype(np.float32)
    items = rng.standard_normal((40, 6)).astype(np.float32)
    levels = [rng.integers(0, 3, 40), rng.integers(0, 9, 40)]
    allowed = rng.random((7, 40)) > 0.3
    exact = exact_top_k(users, items, 10, allowed)
    for level in (0, 1):
        got = hierarchical_top_k(users, items, levels, 10, HierarchicalSettings(level=level, clusters=9, **UNCAPPED),
                                 allowed=allowed)
        np.testing.assert_array_equal(got.items, exact.items)
        np.testing.assert_array_equal(got.scored, allowed.sum(1))
        np.testing.assert_array_equal(got.rankable, allowed.sum(1))
    # a disallowed item is never ranked
    assert all(allowed[b, i] for b, row in enumerate(exact.items) for i in row if i >= 0)


def test_candidate_caps_are_respected_and_keep_the_best_fine_clusters():
    users, items, (coarse,) = separated(per=6)
    # the fine level splits each coarse cluster in two: the first three items of each axis lie closer to it
    items[[0, 1, 2]] *= 1.5
    fine = np.arange(18) // 3
    capped = HierarchicalSettings(level=0, clusters=1, candidates=3, candidate_share=0.0)
    got = hierarchical_top_k(users[:1], items, [coarse, fine], 2, capped)
    assert got.scored.tolist() == [3]
    assert set(got.items[0]) <= {0, 1, 2}  # the fine cluster nearer the user was kept
    share = hierarchical_top_k(users, items, [coarse, fine], 2, HierarchicalSettings(level=0, clusters=3,
                                                                                   candidate_share=0.25))
    assert share.scored.tolist() == [4, 4, 4]  # floor(0.25 x 18): never above the share
    # both caps: the smaller applies; never fewer than k
    both = HierarchicalSettings(level=0, clusters=3, candidates=4, candidate_share=0.5)
    assert hierarchical_top_k(users, items, [coarse, fine], 2, both).scored.tolist() == [4, 4, 4]
    tiny = HierarchicalSettings(level=0, clusters=3, candidates=1, candidate_share=0.0)
    assert hierarchical_top_k(users, items, [coarse, fine], 3, tiny).scored.tolist() == [3, 3, 3]


def test_own_cluster_first_extra_clusters_and_fill_up_to_k():
    users, items, levels = separated()
    settings = HierarchicalSettings(clusters=1, **UNCAPPED)
    # user 0 is nearest axis 0 (cluster 17) but its own cluster is 9: with one cluster probed, that one wins
    got = hierarchical_top_k(users[:1], items, levels, 3, settings, user_clusters=np.array([9]))
    assert set(got.items[0] // 5) == {2} and got.probed.tolist() == [1]
    # a super-graph neighbour is probed on top of the first cluster; an unknown ID is ignored
    got = hierarchical_top_k(users[:1], items, levels, 3, settings, extra_clusters=[[4, 99]])
    assert got.scored.tolist() == [10] and got.probed.tolist() == [2]
    # fewer than k rankable members in the probed cluster: the next clusters by centroid are probed
    allowed = np.ones(15, dtype=bool)
    allowed[[0, 1, 2, 3]] = False  # one member of cluster 17 left
    got = hierarchical_top_k(users[:1], items, levels, 3, settings, allowed=allowed)
    assert got.probed.tolist() == [2] and got.scored.tolist() == [6] and got.rankable.tolist() == [11]
    assert (got.items[0] >= 0).all() and got.items[0][0] == 4


def test_items_without_a_cluster_are_never_candidates_and_short_lists_are_padded():
    users, items, (coarse,) = separated()
    coarse = coarse.copy()
    coarse[5:] = -1  # only cluster 17 exists
    got = hierarchical_top_k(users, items, [coarse], 8, HierarchicalSettings(clusters=3, **UNCAPPED))
    assert got.scored.tolist() == [5, 5, 5] and got.rankable.tolist() == [15, 15, 15]
    assert (got.items[:, 5:] == -1).all() and np.isnan(got.scores[:, 5:]).all()
    assert (got.items[:, :5] < 5).all()


def test_settings_routing_level_and_validation():
    assert HierarchicalSettings().routing_level(3) == 0  # the coarsest level by default
    assert HierarchicalSettings(level=None).routing_level(3) == 1  # None: the middle one
    assert HierarchicalSettings(level=None).routing_level(2) == 0
    assert HierarchicalSettings(level=2).routing_level(3) == 2
    with pytest.raises(ValueError, match="routing level 3 does not exist"):
        HierarchicalSettings(level=3).routing_level(3)
    with pytest.raises(ValueError, match="clusters must be >= 1"):
        HierarchicalSettings(clusters=0)
    with pytest.raises(ValueError, match="candidate_share"):
        HierarchicalSettings(candidate_share=1.5)
    users, items, levels = separated()
    index = build_index(items, levels, 0)
    assert index.route_ids.tolist() == [4, 9, 17] and index.dense(np.array([17, 5, -1])).tolist() == [2, -1, -1]
    np.testing.assert_allclose(index.centroids[2], items[:5].mean(0), rtol=1e-6)
    with pytest.raises(ValueError, match="level 0 has 3 cluster ids for 15 items"):
        build_index(items, [np.zeros(3, dtype=int)], 0)


def test_a_prebuilt_index_gives_the_same_lists_and_must_route_at_the_settings_level():
    rng = np.random.default_rng(4)
    users = rng.standard_normal((5, 4)).astype(np.float32)
    items = rng.standard_normal((30, 4)).astype(np.float32)
    levels = [rng.integers(0, 3, 30), rng.integers(0, 6, 30)]
    settings = HierarchicalSettings(clusters=1, candidate_share=0.3)  # routes at level 0 of 2
    direct = hierarchical_top_k(users, items, levels, 4, settings)
    reused = hierarchical_top_k(users, items, build_index(items, levels, 0), 4, settings)
    np.testing.assert_array_equal(direct.items, reused.items)
    np.testing.assert_array_equal(direct.scored, reused.scored)
    with pytest.raises(ValueError, match="the index routes at level 1, the settings at level 0"):
        hierarchical_top_k(users, items, build_index(items, levels, 1), 4, settings)


def test_an_index_of_the_ranked_catalogue_averages_only_its_members():
    """Centroids of the catalogue being ranked: a cluster whose returnable members are short rows next to long
    non-members is routed by those members, not by the rows that cannot be returned."""
    d = 4
    items = np.zeros((8, d), dtype=np.float32)
    items[:4, 0] = [0.2, 0.2, 5.0, 5.0]  # cluster 0: two short returnable rows, two long others
    items[4:, 1] = [0.4, 0.4, 0.1, 0.1]  # cluster 1: all returnable, along another axis (centroid 0.25)
    clusters = [np.array([0, 0, 0, 0, 1, 1, 1, 1])]
    members = np.array([True, True, False, False, True, True, True, True])
    everything, catalogue = build_index(items, clusters, 0), build_index(items, clusters, 0, members=members)
    np.testing.assert_allclose(everything.centroids[0, 0], 2.6)
    np.testing.assert_allclose(catalogue.centroids[0, 0], 0.2)  # the returnable members only
    assert catalogue.route[2] == catalogue.route[3] == -1  # non-members are in no cluster
    user = np.array([[1.0, 1.0, 0, 0]], dtype=np.float32)
    one = HierarchicalSettings(level=0, clusters=1, candidate_share=0.0)
    # the best returnable items are cluster 1's (0.4); routed by all rows the user would probe cluster 0 first
    routed_all = hierarchical_top_k(user, items, everything, 2, one, allowed=members)
    routed_catalogue = hierarchical_top_k(user, items, catalogue, 2, one, allowed=members)
    assert set(routed_all.items[0]) == {0, 1}
    assert set(routed_catalogue.items[0]) == {4, 5}
    exact = exact_top_k(user, items, 2, members)
    assert set(exact.items[0]) == {4, 5}
