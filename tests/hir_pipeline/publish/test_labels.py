"""Cluster labels: tokenizer and TF-IDF ranking."""

from __future__ import annotations

import re

from hir_pipeline.publish.labels import SPLIT_PATTERN, make_label, term_counts, tfidf_terms, tokenize


def test_tokenize_drops_stopwords_numbers_and_short_words():
    assert tokenize("The NEW 4K Gaming-Console, by Acme (2024) for you!") == ["gaming", "console", "acme"]
    assert tokenize(None) == [] and tokenize("") == []


def test_split_pattern_is_plain_enough_for_java_regex():
    # the Spark job passes SPLIT_PATTERN to Java's regex engine: no Python-only syntax
    assert not re.search(r"\(\?P|\\[dwsb]", SPLIT_PATTERN)


def test_tfidf_prefers_distinguishing_terms_over_shared_ones():
    counts = {
        0: term_counts(["running shoes sale", "trail running shoes", "running socks sale"]),
        1: term_counts(["espresso coffee sale", "coffee beans sale", "coffee grinder"]),
        2: term_counts(["yoga mat sale", "yoga blocks"]),
    }
    terms = tfidf_terms(counts, n_terms=2)
    assert terms[0] == ["running", "shoes"]
    assert terms[1][0] == "coffee"
    assert terms[2][0] == "yoga"
    assert all("sale" not in t for t in terms.values())  # in every cluster: low idf


def test_tfidf_with_external_document_frequencies_and_empty_cluster():
    terms = tfidf_terms({0: {"shoes": 5, "sale": 6}, 1: {}}, n_terms=1, doc_freq={"shoes": 1, "sale": 10}, n_docs=10)
    assert terms == {0: ["shoes"], 1: []}
    assert make_label(terms[0], 0, 0) == "shoes"
    assert make_label(terms[1], 2, 7) == "L2-7"
