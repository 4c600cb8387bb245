"""Metric rows of a whole evaluation, the target ratios, level alignment, and the comparison table / plot."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.evaluation.baselines import ALSConfig, LightGCNConfig
from hir_pipeline.evaluation.metrics import nmi
from hir_pipeline.evaluation.report import comparison_plot, comparison_table
from hir_pipeline.evaluation.runner import (
    EvaluationSettings,
    align_levels,
    clustering_rows,
    make_baselines,
    ranking_rows,
    target_ratios,
)
from hir_pipeline.evaluation.scoring import EmbeddingScorer


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
    assert methods == {"hir", "popularity", "als", "lightgcn", "content"} == set(seconds)
    assert {(s, name) for _, s, name, _ in rows} == {(s, n) for s in ("warm", "cold")
                                                     for n in ("recall_at_5", "ndcg_at_5", "users")}
    assert len(lines) == 5 and lines[0].startswith("hir: warm recall@5")
    ratios = {(s, name): v for _, s, name, v in target_ratios(rows, 5)}
    val = {(m, s, n): v for m, s, n, v in rows}
    best_warm = max(val[(m, "warm", "recall_at_5")] for m in ("popularity", "als", "lightgcn", "content"))
    assert ratios[("warm", "recall_at_5_vs_best_baseline")] == pytest.approx(val[("hir", "warm", "recall_at_5")]
                                                                             / best_warm)
    assert ratios[("cold", "recall_at_5_vs_content")] == pytest.approx(val[("hir", "cold", "recall_at_5")]
                                                                       / val[("content", "cold", "recall_at_5")])
    table = comparison_table(rows + target_ratios(rows, 5), 5, note="targets: conversion")
    assert table.splitlines()[0] == "| method | warm recall@5 | warm ndcg@5 | cold recall@5 | cold ndcg@5 |"
    assert table.splitlines()[2].startswith("| hir | ") and "vs_best_baseline" in table
    assert table.endswith("targets: conversion")
    assert comparison_plot(rows, 5)[:8] == b"\x89PNG\r\n\x1a\n"


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
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, [coarse, fine], [8, 4], truth,
                                                        ("level0", "level1"))}
    assert rows[("all", "nmi_level_0")] == pytest.approx(1.0)
    assert rows[("all", "nmi_level_1")] < 1.0  # 4 planted fine labels in 2 clusters; adv has none
    assert rows[("user", "nmi_level_0")] == pytest.approx(1.0)
    assert rows[("all", "clusters_used_level_0")] == 2 and rows[("all", "clusters_used_level_1")] == 2
    assert ("all", "nmi_level_0") not in {(s, m) for _, s, m, _ in clustering_rows(ids, types, [coarse], [8])}


def test_clustering_rows_items_sharpness_and_tree_agreement():
    ids = ["u1", "u2", "p1", "p2", "adv"]
    types = ["user", "user", "product", "product", "advertiser"]
    truth = {"u1": {"level0": 0}, "u2": {"level0": 1}, "p1": {"level0": 1}, "p2": {"level0": 1}, "adv": {"level0": 0}}
    coarse = np.array([0, 1, 1, 1, 1])  # right for users, one item (adv) wrong
    fine = np.array([0, 1, 1, 2, 2])
    probs = [np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.3, 0.7], [0.5, 0.5]]), np.full((5, 3), 1 / 3)]
    nmi_rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, [coarse], [2], truth, ("level0",))}
    assert nmi_rows[("user", "nmi_level_0")] == pytest.approx(1.0) and nmi_rows[("item", "nmi_level_0")] < 1.0
    assert nmi_rows[("item", "nmi_level_0")] == pytest.approx(nmi([1, 1, 0], [1, 1, 1]))
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, [coarse, fine], [2, 3], probs=probs)}
    assert rows[("all", "mean_top_probability_level_0")] == pytest.approx((0.9 + 0.8 + 0.6 + 0.7 + 0.5) / 5)
    assert rows[("user", "mean_top_probability_level_0")] == pytest.approx(0.85)
    assert rows[("item", "mean_top_probability_level_1")] == pytest.approx(1 / 3)
    assert rows[("all", "parent_agreement_level_1")] == 1.0  # majority parents: every fine cluster inside one
    published = [np.array([1, 1, 0])]  # a tree that puts fine 0 and 2 under the wrong parent: nodes 1, 2 agree
    rows = {(s, m): v for _, s, m, v in clustering_rows(ids, types, [coarse, fine], [2, 3], parent_maps=published)}
    assert rows[("all", "parent_agreement_level_1")] == pytest.approx(2 / 5)
