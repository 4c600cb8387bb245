"""Label purity rows of an evaluation: the finest model level labelled from bronze entities, scored on vocabularies."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.evaluation.label_purity import InterestVocabulary
from hir_pipeline.evaluation.runner import ClusterLevels
from spark_jobs.evaluation.run import label_purity_level_rows


def test_label_purity_of_the_finest_level(spark):
    rows = [("p0", "product", "Running shoes - marathon", "Premium running shoes. From our store.", "{}"),
            ("p1", "product", "Running shoes - trail", "Classic running shoes. From our store.", "{}"),
            ("p2", "product", "Espresso machines - crema", "Premium espresso machines. From our store.", "{}"),
            ("p3", "product", "Espresso machines - barista", "Classic espresso machines. From our store.", "{}"),
            ("u0", "user", None, None, '{"occupation": "runner"}')]
    entities = spark.createDataFrame(rows, "entity_id string, entity_type string, title string, description string, "
                                           "attributes string")
    ids = [r[0] for r in rows]
    clusters = ClusterLevels([np.zeros(5, dtype=int), np.array([0, 0, 1, 1, 0])], [1, 2])
    truth = {"p0": {"level2": 0}, "p1": {"level2": 0}, "p2": {"level2": 1}, "p3": {"level2": 1}, "u0": {"level2": 0}}
    vocab = {0: InterestVocabulary(frozenset({"running", "shoes", "marathon", "trail"})),
             1: InterestVocabulary(frozenset({"espresso", "machines", "crema"}), real_words=False)}
    got = {(m, s, n): v for m, s, n, v in label_purity_level_rows(entities, ids, clusters, truth, vocab)}
    # model level 1 is paired with the finest planted level; labels are "running / shoes / marathon" and
    # "espresso / machines / barista" (every term of cluster 1 but "barista" is in interest 1's vocabulary)
    assert got == pytest.approx({("hir", "item", "label_purity_level_1"): (1 + 2 / 3) / 2,
                                 ("hir", "item", "label_purity_real_words_level_1"): 1.0})
