"""Label purity on a tiny planted hierarchy."""

from __future__ import annotations

import pytest

from hir_pipeline.evaluation.label_purity import (
    InterestVocabulary,
    label_purity,
    label_purity_rows,
    majority_clusters,
)

VOCAB = {0: InterestVocabulary(frozenset({"running", "shoes", "marathon"})),
         1: InterestVocabulary(frozenset({"espresso", "machines", "crema"})),
         2: InterestVocabulary(frozenset({"kamiloven", "goods"}), real_words=False)}
# interest 0 lives mostly in cluster 10, interest 1 in cluster 11, interest 2 shares cluster 11 with it
TRUTH = {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "f": 2, "u": None}
MEMBERS = {"a": 10, "b": 10, "c": 11, "d": 11, "e": 11, "f": 11, "u": 10}


def test_majority_matching():
    assert majority_clusters(MEMBERS, TRUTH) == {0: 10, 1: 11, 2: 11}
    assert majority_clusters({"x": 4, "y": 3}, {"x": 0, "y": 0}) == {0: 3}  # tie: smallest cluster ID


def test_purity_is_the_share_of_label_terms_from_the_interests_vocabulary():
    labels = {10: ["running", "shoes", "trail"], 11: ["espresso", "crema"]}
    purity = label_purity(labels, MEMBERS, TRUTH, VOCAB)
    assert purity == pytest.approx({0: 2 / 3, 1: 1.0, 2: 0.0})
    assert label_purity({10: []}, MEMBERS, TRUTH, VOCAB)[0] == 0.0  # a cluster without label terms
    rows = dict(((m, s, name), v) for m, s, name, v in label_purity_rows(purity, VOCAB, level=2))
    assert rows[("hir", "item", "label_purity_level_2")] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert rows[("hir", "item", "label_purity_real_words_level_2")] == pytest.approx((2 / 3 + 1) / 2)
    assert label_purity_rows({}, VOCAB, level=2) == []
