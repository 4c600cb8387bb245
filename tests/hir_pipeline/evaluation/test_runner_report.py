"""Metric rows of a whole evaluation, the target ratios, level alignment, and the comparison table / plot."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.evaluation.baselines import ALSConfig, LightGCNConfig
from hir_pipeline.evaluation.metrics import nmi
from hir_pipeline.evaluation.report import comparison_bars, comparison_plot, comparison_table
from hir_pipeline.evaluation.runner import (
    BASELINES,
    ClusterLevels,
    EvaluationSettings,
    align_clusters,
    align_levels,
    average_over_seeds,
    best_baseline,
    clustering_rows,
    comparison_rows,
    hierarchical_rows,
    make_baselines,
    paired_comparisons,
    ranking_results,
    ranking_rows,
    target_ratios,
)
from hir_pipeline.evaluation.scoring import EmbeddingScorer, UserScores, evaluate_per_user
from hir_pipeline.retrieval import HierarchicalSettings


def test_ranking_rows_cover_every_method_and_split(planted):
    data, content, comm = planted
    ids = list(comm)
    hir = EmbeddingScorer.from_lookup(data, ids, np.eye(4)[[comm[e] for e in ids]])
    settings = EvaluationSettings(k=5, als=ALSConfig(factors=(8,), regularization=(0.1,), alpha=(1.0,),
                                                     num_threads=1),
                                  lightgcn=LightGCNConfig(embedding_dim=8, epochs=2))
    lines = []
    rows, seconds = ranking_rows([hir, *make_baselines(settings, content)], data, 5, progress=lines.append)
    methods = {m for m, _, _, _ in rows}
    assert methods == {"hir", "popularity", "als", "lightgcn", "content", "random"} == set(seconds)
    assert {(s, name) for _, s, name, _ in rows} == {(s, n) for s in ("warm", "cold")
                                                     for n in ("recall_at_5", "ndcg_at_5", "users")}
    assert len(lines) == 6 and lines[0].startswith("hir: warm recall@5")
    ratios = {(s, name): v for _, s, name, v in target_ratios(rows, 5)}
    val = {(m, s, n): v for m, s, n, v in rows}
    best_warm = max(val[(m, "warm", "recall_at_5")] for m in ("popularity", "als", "lightgcn", "content", "random"))
    assert ratios[("warm", "recall_at_5_vs_best_baseline")] == pytest.approx(val[("hir", "warm", "recall_at_5")]
                                                                             / best_warm)
    assert ratios[("cold", "recall_at_5_vs_content")] == pytest.approx(val[("hir", "cold", "recall_at_5")]
                                                                       / val[("content", "cold", "recall_at_5")])
    table = comparison_table(rows + target_ratios(rows, 5), 5, note="targets: conversion")
    assert table.splitlines()[0] == "| method | warm recall@5 | warm ndcg@5 | cold recall@5 | cold ndcg@5 |"
    assert table.splitlines()[2].startswith("| hir | ") and "warm recall@5 vs best baseline (" in table
    assert table.endswith("targets: conversion")
    assert comparison_plot(rows, 5)[:8] == b"\x89PNG\r\n\x1a\n"
    # one seed: bars without errors; several: HIR's recall bars carry the standard deviation over its seeds
    assert all(not any(errors) for by in comparison_bars(rows, 5).values() for _, errors in by.values())
    seeded = [*rows, ("hir", "warm", "recall_at_5_seed_std", 0.02), ("hir", "cold", "recall_at_5_seed_std", 0.03)]
    bars = comparison_bars(seeded, 5)
    assert bars["recall_at_5"]["hir"] == ([val[("hir", s, "recall_at_5")] for s in ("warm", "cold")], [0.02, 0.03])
    assert bars["ndcg_at_5"]["hir"][1] == [0.0, 0.0] and bars["recall_at_5"]["als"][1] == [0.0, 0.0]
    assert list(bars["recall_at_5"])[0] == "hir" and comparison_plot(seeded, 5) != comparison_plot(rows, 5)


def test_unknown_baseline_and_missing_content():
    assert [s.name for s in make_baselines(EvaluationSettings(baselines=("popularity", "content")), None)] == [
        "popularity"]
    with pytest.raises(ValueError, match="unknown baseline"):
        make_baselines(EvaluationSettings(baselines=("bpr",)), None)


def test_align_levels_from_the_finest():
    assert align_levels(3, ("level0", "level1", "level2")) == {0: "level0", 1: "level1", 2: "level2"}
    assert align_levels(1, ("level0", "level1", "level2")) == {0: "level2"}
    assert align_levels(4, ("level0", "level1", "level2")) == {1: "level0", 2: "level1", 3: "level2"}


def test_clustering_rows_nmi_and_usage():
    ids = ["u1", "u2", "p1", "p2", "adv"]
    types = ["user", "user", "product", "product", "advertiser"]
    truth = {"u1": {"level0": 0, "level1": 0}, "u2": {"level0": 1, "level1": 2}, "p1": {"level0": 0, "level1": 1},
             "p2": {"level0": 1, "level1": 3}, "adv": {"level0": 1, "level1": None}}
    coarse = np.array([5, 6, 5, 6, 6])  # matches level0 exactly
    fine = np.array([0, 1, 0, 1, 1])  # merges level1 pairs
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, ClusterLevels([coarse, fine], [8, 4]),
                                                        truth, ("level0", "level1"))}
    assert rows[("all", "nmi_level_0")] == pytest.approx(1.0)
    assert rows[("all", "nmi_level_1")] < 1.0  # 4 planted fine labels in 2 clusters; adv has none
    assert rows[("user", "nmi_level_0")] == pytest.approx(1.0)
    assert rows[("all", "clusters_used_level_0")] == 2 and rows[("all", "clusters_used_level_1")] == 2
    no_truth = clustering_rows(ids, types, ClusterLevels([coarse], [8]))
    assert ("all", "nmi_level_0") not in {(s, m) for _, s, m, _ in no_truth}


def _scores(users, recall) -> UserScores:
    return UserScores(np.asarray(users), np.asarray(recall, dtype=float), np.asarray(recall, dtype=float))


def test_ranking_results_keep_each_users_metrics(planted):
    data, content, _ = planted
    pop = make_baselines(EvaluationSettings(baselines=("popularity", "random")), content)
    got = ranking_results(pop, data, 5)
    assert set(got.per_user) == {"popularity", "random"} and set(got.seconds) == {"popularity", "random"}
    val = {(m, s, n): v for m, s, n, v in got.rows}
    for method, per_split in got.per_user.items():
        for split, scores in per_split.items():
            assert val[(method, split, "recall_at_5")] == pytest.approx(scores.recall.mean())
            assert val[(method, split, "users")] == len(scores.users)
    assert ranking_rows(pop, data, 5)[0] == got.rows


def test_average_over_seeds_is_per_user():
    runs = [{"warm": _scores([0, 2], [1.0, 0.0])}, {"warm": _scores([0, 2], [0.5, 0.5])}]
    got = average_over_seeds(runs)["warm"]
    assert got.users.tolist() == [0, 2] and got.recall.tolist() == [0.75, 0.25]
    with pytest.raises(ValueError, match="different users"):
        average_over_seeds([runs[0], {"warm": _scores([0, 1], [1.0, 0.0])}])


def test_paired_comparisons_against_the_best_baseline_and_content():
    n = 400
    rng = np.random.default_rng(0)
    u = rng.random(n)
    users = np.arange(n)
    per_user = {
        "hir": {"warm": _scores(users, u < 0.3), "cold": _scores(users, u < 0.2)},
        "als": {"warm": _scores(users, u < 0.25), "cold": _scores(users, u < 0.01)},
        "popularity": {"warm": _scores(users, u < 0.1), "cold": _scores(users, u < 0.02)},
        "content": {"warm": _scores(users, u < 0.05), "cold": _scores(users, u < 0.1)},
        "random": {"warm": _scores(users, u < 0.01), "cold": _scores(users, u < 0.15)},
        "hir_mean_user": {"warm": _scores(users, u < 0.5), "cold": _scores(users, u < 0.5)},  # not a baseline
    }
    assert best_baseline(per_user, "warm") == "als" and best_baseline(per_user, "cold") == "random"
    settings = EvaluationSettings(bootstrap_samples=500)
    comps = {(c.split, c.reference): c for c in paired_comparisons(per_user, settings)}
    assert set(comps) == {("warm", "best_baseline"), ("cold", "best_baseline"), ("cold", "content")}
    warm = comps[("warm", "best_baseline")]
    assert warm.baseline == "als" and comps[("cold", "content")].baseline == "content"
    # HIR's hits are a superset of ALS's: every resample has HIR ahead
    assert warm.interval.diff == pytest.approx((u < 0.3).mean() - (u < 0.25).mean())
    assert 0 < warm.interval.diff_low <= warm.interval.diff <= warm.interval.diff_high
    assert warm.interval.ratio_low > 1.0
    rows = {(s, m): v for _, s, m, v in comparison_rows(list(comps.values()), 20)}
    assert rows[("warm", "recall_at_20_vs_best_baseline")] == pytest.approx(warm.interval.ratio)
    assert rows[("cold", "recall_at_20_diff_vs_content_ci_low")] == comps[("cold", "content")].interval.diff_low
    assert len(rows) == 3 * 6
    zero = {m: {"warm": _scores(users, np.zeros(n))} for m in ("als", "popularity")}
    [c] = paired_comparisons({"hir": {"warm": _scores(users, u < 0.3)}, **zero}, settings)
    assert {m for _, _, m, _ in comparison_rows([c], 20)} == {f"recall_at_20_diff_vs_best_baseline{e}"
                                                             for e in ("", "_ci_low", "_ci_high")}
    table = comparison_table([("hir", "warm", "recall_at_20", 0.3), ("als", "warm", "recall_at_20", 0.25),
                              *comparison_rows(list(comps.values()), 20)], 20, confidence=0.9)
    iv = warm.interval
    assert f"vs best baseline (als) = {iv.ratio:.2f}x [{iv.ratio_low:.2f}x, {iv.ratio_high:.2f}x]" in table
    assert "(90% paired bootstrap intervals over users)" in table


def test_mean_user_row_next_to_hir(planted):
    data, _, comm = planted
    ids = list(comm)
    hir = EmbeddingScorer.from_lookup(data, ids, np.eye(4)[[comm[e] for e in ids]])
    got = ranking_results([hir, hir.mean_user()], data, 5)
    # one community vector for everyone cannot personalise: it ranks below the planted communities
    for split in ("warm", "cold"):
        assert got.per_user["hir_mean_user"][split].recall.mean() < got.per_user["hir"][split].recall.mean()
    table = comparison_table(got.rows, 5)
    assert [line.split(" |")[0] for line in table.splitlines()[2:4]] == ["| hir", "| hir_mean_user"]
    assert "random" in BASELINES and evaluate_per_user(hir, data, 5)["warm"].users.size > 0


def test_table_names_the_best_baseline_like_the_runner():
    rows = [("hir", "warm", "recall_at_20", 0.3), ("als", "warm", "recall_at_20", 0.25),
            ("popularity", "warm", "recall_at_20", 0.25), ("hir", "warm", "recall_at_20_vs_best_baseline", 1.2)]
    per_user = {m: {"warm": _scores([0], [v])} for m, _, _, v in rows[1:3]}
    assert best_baseline(per_user, "warm") == "popularity"  # a tie goes to the first in BASELINES order
    assert "warm recall@20 vs best baseline (popularity) = 1.20x" in comparison_table(rows, 20)


def test_table_reports_the_label_purity_on_a_planted_source():
    rows = [("hir", "warm", "recall_at_20", 0.3), ("hir", "item", "label_purity_level_2", 0.75),
            ("hir", "item", "label_purity_real_words_level_2", 0.875)]
    table = comparison_table(rows, 20)
    assert "label purity vs planted vocabularies: level 2 0.750, real words level 2 0.875" in table
    assert "label purity" not in comparison_table(rows[:1], 20)


def test_clustering_rows_items_sharpness_and_tree_agreement():
    ids = ["u1", "u2", "p1", "p2", "adv"]
    types = ["user", "user", "product", "product", "advertiser"]
    truth = {"u1": {"level0": 0}, "u2": {"level0": 1}, "p1": {"level0": 1}, "p2": {"level0": 1}, "adv": {"level0": 0}}
    coarse = np.array([0, 1, 1, 1, 1])  # right for users, one item (adv) wrong
    fine = np.array([0, 1, 1, 2, 2])
    probs = [np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.3, 0.7], [0.5, 0.5]]), np.full((5, 3), 1 / 3)]
    nmi_rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, ClusterLevels([coarse], [2]), truth,
                                                            ("level0",))}
    assert nmi_rows[("user", "nmi_level_0")] == pytest.approx(1.0) and nmi_rows[("item", "nmi_level_0")] < 1.0
    assert nmi_rows[("item", "nmi_level_0")] == pytest.approx(nmi([1, 1, 0], [1, 1, 1]))
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, ClusterLevels([coarse, fine], [2, 3], probs))}
    assert rows[("all", "mean_top_probability_level_0")] == pytest.approx((0.9 + 0.8 + 0.6 + 0.7 + 0.5) / 5)
    assert rows[("user", "mean_top_probability_level_0")] == pytest.approx(0.85)
    assert rows[("item", "mean_top_probability_level_1")] == pytest.approx(1 / 3)
    assert rows[("all", "parent_agreement_level_1")] == 1.0  # majority parents: every fine cluster inside one
    published = [np.array([1, 1, 0])]  # a tree that puts fine 0 and 2 under the wrong parent: nodes 1, 2 agree
    clusters = ClusterLevels([coarse, fine], [2, 3], parent_maps=published)
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, clusters)}
    assert rows[("all", "parent_agreement_level_1")] == pytest.approx(2 / 5)


def test_hierarchical_rows_against_exact_search(planted):
    """Clusters that are the planted communities route every user to its items: the same lists as exact search
    from about a quarter of the items; clusters that ignore the communities lose most of the recall."""
    data, _, comm = planted
    ids = list(comm)
    noise = 0.01 * np.random.default_rng(1).standard_normal((len(ids), 4))  # no exact ties
    hir = EmbeddingScorer.from_lookup(data, ids, np.eye(4)[[comm[e] for e in ids]] + noise)
    items = np.array([comm[i] for i in data.item_ids])
    users = np.array([comm[u] for u in data.user_ids])
    one = HierarchicalSettings(level=0, clusters=1, candidate_share=0.0)
    rows = hierarchical_rows(data, hir.users, hir.items, [items], 5, one, [users])
    got = {(s, name): v for _, s, name, v in rows}
    exact = evaluate_per_user(hir, data, 5)
    for split in ("warm", "cold"):
        assert got[(split, "hierarchical_recall_ratio")] == pytest.approx(1.0)
        assert got[(split, "hierarchical_recall_at_5")] == pytest.approx(exact[split].recall.mean())
    # warm: one community of four, less the seen items; cold: 3 items a community, so a second cluster fills k = 5
    assert 0.1 <= got[("warm", "hierarchical_scored_share")] <= 0.3
    assert got[("warm", "hierarchical_clusters_probed")] == 1
    assert got[("cold", "hierarchical_scored_share")] == 0.5 and got[("cold", "hierarchical_clusters_probed")] == 2
    assert {m for m, _, _, _ in rows} == {"hir"}
    scrambled = np.random.default_rng(0).integers(0, 4, len(items))
    bad = {(s, name): v for _, s, name, v in hierarchical_rows(data, hir.users, hir.items, [scrambled], 5, one)}
    assert bad[("warm", "hierarchical_recall_ratio")] < 0.8
    # every cluster probed, no cap: exact search
    full = HierarchicalSettings(level=0, clusters=4, candidate_share=0.0)
    every = {(s, name): v for _, s, name, v in hierarchical_rows(data, hir.users, hir.items, [scrambled], 5, full)}
    assert every[("warm", "hierarchical_recall_ratio")] == pytest.approx(1.0)
    assert every[("warm", "hierarchical_scored_share")] == pytest.approx(1.0)
    assert align_clusters(["a", "b"], [np.array([3, 5])], ["b", "x", "a"])[0].tolist() == [5, -1, 3]


def test_table_reports_hierarchical_retrieval():
    rows = [("hir", "warm", "recall_at_20", 0.3), ("hir", "warm", "hierarchical_recall_ratio", 0.962),
            ("hir", "warm", "hierarchical_scored_share", 0.184), ("hir", "cold", "hierarchical_scored_share", 0.5)]
    assert comparison_table(rows).splitlines()[-1] == ("hierarchical retrieval: warm recall 0.96x of exact search, "
                                                       "18.4% of the items scored; cold recall - of exact search, "
                                                       "50.0% of the items scored")
    assert "hierarchical" not in comparison_table(rows[:1])
