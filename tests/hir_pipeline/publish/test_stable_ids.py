"""Stable cluster IDs: Hungarian matching on membership, prototype fallback, fresh IDs, parents, stability."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.publish.stable_ids import (
    BY_OVERLAP,
    BY_PROTOTYPE,
    FRESH,
    Clusters,
    MatchConfig,
    match_level,
    orphans,
    overlap_matrix,
    published_tree,
    stability,
    stabilize,
)


def _overlap(new_of: dict[str, int], old_of: dict[str, int], new_ids, old_ids) -> np.ndarray:
    pairs: dict[tuple[int, int], int] = {}
    for e, n in new_of.items():
        if e in old_of:
            pairs[(n, old_of[e])] = pairs.get((n, old_of[e]), 0) + 1
    return overlap_matrix([(a, b, c) for (a, b), c in pairs.items()], np.array(new_ids), np.array(old_ids))


def _sizes(assign: dict[str, int], ids) -> np.ndarray:
    return np.array([sum(1 for v in assign.values() if v == c) for c in ids])


def test_permuted_clusters_keep_their_ids_and_stability_is_one():
    rng = np.random.default_rng(0)
    old_of = {f"e{i}": int(rng.integers(0, 5)) for i in range(200)}
    old_ids = np.array([10, 11, 12, 13, 14])  # published IDs of the old version, not model indices
    old_of = {e: int(old_ids[c]) for e, c in old_of.items()}
    perm = {10: 3, 11: 0, 12: 4, 13: 1, 14: 2}  # the retrained model numbers the same interests differently
    new_of = {e: perm[c] for e, c in old_of.items()}
    new_ids = np.arange(5)
    overlap = _overlap(new_of, old_of, new_ids, old_ids)
    m = match_level(Clusters(new_ids, _sizes(new_of, new_ids)), Clusters(old_ids, _sizes(old_of, old_ids)),
                    overlap, next_id=15)
    assert m.mapping == {v: k for k, v in perm.items()}
    assert set(m.method.values()) == {BY_OVERLAP}
    assert m.stability == 1.0
    assert m.next_id == 15


def test_split_cluster_keeps_id_on_the_larger_part_and_the_rest_gets_a_fresh_never_used_id():
    old_of = {f"a{i}": 0 for i in range(60)} | {f"b{i}": 1 for i in range(40)}
    # cluster 0 splits: 45 members stay together (model index 5), 15 form a new interest (model index 6)
    new_of = {f"a{i}": 5 if i < 45 else 6 for i in range(60)} | {f"b{i}": 7 for i in range(40)}
    new_ids, old_ids = np.array([5, 6, 7]), np.array([0, 1])
    m = match_level(Clusters(new_ids, _sizes(new_of, new_ids)), Clusters(old_ids, _sizes(old_of, old_ids)),
                    _overlap(new_of, old_of, new_ids, old_ids), next_id=9)
    assert m.mapping == {5: 0, 7: 1, 6: 9}  # 9: IDs 2..8 were used by earlier versions and are never reused
    assert m.method == {5: BY_OVERLAP, 7: BY_OVERLAP, 6: FRESH}
    assert m.next_id == 10
    assert m.stability == pytest.approx(85 / 100)


def test_small_overlap_below_jaccard_threshold_is_a_new_interest():
    old_of = {f"a{i}": 0 for i in range(100)}
    new_of = {f"a{i}": 0 for i in range(3)} | {f"n{i}": 0 for i in range(97)}
    ids = np.array([0])
    m = match_level(Clusters(ids, [100]), Clusters(ids, [100]), _overlap(new_of, old_of, ids, ids), next_id=1,
                    config=MatchConfig(min_jaccard=0.1))
    assert m.mapping == {0: 1} and m.method == {0: FRESH}
    assert m.stability == 0.0


def test_prototype_fallback_when_members_do_not_overlap():
    protos_old = np.eye(3)
    # all new members are new entities: no overlap, but the prototypes are the old ones, permuted and nudged
    protos_new = protos_old[[2, 0, 1]] + 0.05
    m = match_level(Clusters([0, 1, 2], [5, 5, 5], protos_new), Clusters([7, 8, 9], [5, 5, 5], protos_old),
                    np.zeros((3, 3), np.int64), next_id=10)
    assert m.mapping == {0: 9, 1: 7, 2: 8}
    assert set(m.method.values()) == {BY_PROTOTYPE}
    assert m.stability is None  # no shared entity: nothing to measure


def test_dissimilar_prototypes_get_fresh_ids():
    m = match_level(Clusters([0], [5], [[1.0, 0.0]]), Clusters([4], [5], [[0.0, 1.0]]), None, next_id=0)
    assert m.mapping == {0: 5} and m.method == {0: FRESH}  # fresh IDs start above the old ones


def test_first_version_numbers_clusters_in_model_order():
    m = match_level(Clusters([3, 1, 8], [1, 1, 1]), None, None, next_id=0)
    assert m.mapping == {1: 0, 3: 1, 8: 2} and m.stability is None and m.next_id == 3


def test_stabilize_relabels_parents_consistently():
    # previous version: level 0 {100, 101}; level 1 {200 -> 100, 201 -> 101}
    old0 = {"a": 100, "b": 100, "c": 101, "d": 101}
    old1 = {"a": 200, "b": 200, "c": 201, "d": 201}
    # new model swaps indices at both levels
    new0 = {"a": 1, "b": 1, "c": 0, "d": 0}
    new1 = {"a": 0, "b": 0, "c": 1, "d": 1}
    parents = [{0: None, 1: None}, {0: 1, 1: 0}]
    new_levels = [Clusters([0, 1], _sizes(new0, [0, 1])), Clusters([0, 1], _sizes(new1, [0, 1]))]
    old_levels = [Clusters([100, 101], [2, 2]), Clusters([200, 201], [2, 2])]
    overlaps = [_overlap(new0, old0, [0, 1], [100, 101]), _overlap(new1, old1, [0, 1], [200, 201])]
    h = stabilize(new_levels, parents, old_levels, overlaps, next_ids=[102, 202])
    assert h.levels[0].mapping == {1: 100, 0: 101}
    assert h.levels[1].mapping == {0: 200, 1: 201}
    assert h.parents[0] == {100: None, 101: None}
    assert h.parents[1] == {200: 100, 201: 101}
    assert h.stability() == {0: 1.0, 1: 1.0}


def test_stabilize_rejects_unpublished_parent():
    with pytest.raises(ValueError, match="parent"):
        stabilize([Clusters([0], [1]), Clusters([0], [1])], [{0: None}, {0: 5}])


def test_only_clusters_with_members_are_published_and_orphans_get_their_members_parent():
    sizes = [{0: 0, 1: 3, 2: 0}, {0: 0, 1: 2, 2: 0, 3: 1}]
    parents = [{0: None, 1: None, 2: None}, {0: 0, 1: 0, 2: 2, 3: 1}]
    assert orphans(sizes, parents) == [set(), {1}]  # cluster 1's model parent 0 holds no member at level 0
    keep, tree = published_tree(sizes, parents, [{}, {1: 1}])
    assert keep == [[1], [1, 3]]
    assert tree == [{1: None}, {1: 1, 3: 1}]
    with pytest.raises(ValueError, match="parent is empty"):
        published_tree(sizes, parents)


def test_stability_counts_only_shared_entities():
    overlap = np.array([[3, 1], [0, 4]])
    assert stability(overlap, np.array([0, 1]), np.array([10, 11]), {0: 10, 1: 11}) == pytest.approx(7 / 8)
    assert stability(np.zeros((1, 1)), np.array([0]), np.array([0]), {0: 0}) is None
