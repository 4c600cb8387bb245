"""Every baseline beats random scores on a planted toy, on the split it is meant for."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hir_pipeline.evaluation.baselines import (
    ALSConfig,
    ALSScorer,
    ContentScorer,
    LightGCNConfig,
    LightGCNScorer,
    PopularityScorer,
    RandomScorer,
)
from hir_pipeline.evaluation.data import COLD, VALIDATION, WARM, validation_split
from hir_pipeline.evaluation.scoring import EmbeddingScorer, Scorer, evaluate_scorer

K = 5


@pytest.fixture(scope="module")
def random_scores(planted):
    data, _, _ = planted
    return evaluate_scorer(RandomScorer(seed=3).fit(data), data, K)


def _recall(scorer, data, split):
    assert isinstance(scorer, Scorer)
    return evaluate_scorer(scorer.fit(data), data, K)[split][f"recall_at_{K}"]


def test_popularity_beats_random(planted, random_scores):
    data, _, _ = planted
    pop = PopularityScorer()
    assert _recall(pop, data, WARM) > random_scores[WARM][f"recall_at_{K}"] + 0.05
    # the score is the summed training weight per item, so cold items (no training events) score zero
    np.testing.assert_allclose(pop.item_scores, np.asarray(data.train.sum(0)).ravel())
    assert pop.item_scores[data.candidates[COLD]].sum() == 0


def test_als_beats_random(planted, random_scores):
    data, _, _ = planted
    als = ALSScorer(ALSConfig(factors=(8,), regularization=(0.01, 0.1), alpha=(1.0,), num_threads=1))
    assert _recall(als, data, WARM) > random_scores[WARM][f"recall_at_{K}"] + 0.1
    assert len(als.grid) == 2 and als.best["factors"] == 8


def test_als_grid_is_scored_on_the_tuning_split_when_the_data_has_one(planted):
    data, _, _ = planted
    config = ALSConfig(factors=(4, 8), regularization=(0.1,), alpha=(1.0,), num_threads=1)
    tuning = validation_split(data, 0.5, seed=7)  # any inner split: here one the fallback would never draw
    with_tuning = dataclasses.replace(data, tuning=tuning)
    als = ALSScorer(config).fit(with_tuning)
    for point in als.grid:
        u, i = ALSScorer(config)._fit_once(tuning.train, point["factors"], point["regularization"], point["alpha"])
        got = evaluate_scorer(EmbeddingScorer(u, i), tuning, config.k)[VALIDATION][f"recall_at_{config.k}"]
        assert point[f"recall_at_{config.k}"] == pytest.approx(got)
    fallback = ALSScorer(config).fit(data)  # no tuning split: the seeded random hold-out of validation_fraction
    assert [p[f"recall_at_{config.k}"] for p in fallback.grid] != [p[f"recall_at_{config.k}"] for p in als.grid]
    assert with_tuning.renamed({WARM: "w"}).tuning is tuning and with_tuning.only(WARM).tuning is None


def test_lightgcn_beats_random_and_is_seeded(planted, random_scores):
    data, _, _ = planted
    cfg = LightGCNConfig(embedding_dim=16, num_layers=2, epochs=15, batch_size=256, lr=0.02)
    a = LightGCNScorer(cfg)
    assert _recall(a, data, WARM) > random_scores[WARM][f"recall_at_{K}"] + 0.1
    b = LightGCNScorer(cfg).fit(data)
    np.testing.assert_array_equal(a.user_emb, b.user_emb)


def test_content_only_beats_random_on_cold_items(planted, random_scores):
    data, content, _ = planted
    assert _recall(ContentScorer(content), data, COLD) > random_scores[COLD][f"recall_at_{K}"] + 0.2


def test_embedding_scorer_aligns_by_id(planted, random_scores):
    data, _, comm = planted
    # perfect one-hot community embeddings rank own-community items first
    ids = list(comm)
    emb = np.eye(4)[[comm[e] for e in ids]]
    hir = EmbeddingScorer.from_lookup(data, ids[::-1], emb[::-1])
    for split in (WARM, COLD):
        assert _recall(hir, data, split) > random_scores[split][f"recall_at_{K}"] + 0.2


def test_validation_split_moves_pairs_out_of_train(planted):
    data, _, _ = planted
    inner = validation_split(data, 0.25, seed=1)
    val = inner.targets[VALIDATION]
    assert inner.train.nnz + val.nnz <= data.train.nnz and val.nnz > 0
    assert inner.train.multiply(val).nnz == 0  # disjoint
    assert (data.train.astype(bool).multiply(val) != val).nnz == 0  # held-out pairs come from train
