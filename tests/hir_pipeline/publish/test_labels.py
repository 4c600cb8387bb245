"""Cluster labels: tokenizer, attribute values, lift ranking and sibling-distinct labels."""

from __future__ import annotations

import re

from hir_pipeline.publish.labels import (
    SPLIT_PATTERN,
    attribute_values,
    count_level_terms,
    entity_terms,
    level_labels,
    lift_scores,
    make_label,
    tokenize,
)

# A template shared by every entity ("Movie. Genres: ... Released ...") and a genre in the attributes.
CATALOG = {
    "m0": ("Heat", "Movie. Genres: Crime, Thriller. Released 1995.", '{"genres": ["Crime", "Thriller"]}'),
    "m1": ("Casino", "Movie. Genres: Crime, Drama. Released 1995.", '{"genres": ["Crime", "Drama"]}'),
    "m2": ("Seven", "Movie. Genres: Crime, Thriller. Released 1995.", '{"genres": ["Crime", "Thriller"]}'),
    "m3": ("Toy Story", "Movie. Genres: Animation, Children. Released 1995.", '{"genres": ["Animation"]}'),
    "m4": ("Aladdin", "Movie. Genres: Animation, Musical. Released 1992.", '{"genres": ["Animation"]}'),
    "m5": ("Lion King", "Movie. Genres: Animation, Children. Released 1994.", '{"genres": ["Animation"]}'),
    "m6": ("Fargo", "Movie. Genres: Crime, Drama. Released 1996.", '{"studio": "Gramercy"}'),
}
TERMS = {e: entity_terms(*row) for e, row in CATALOG.items()}


def test_tokenize_drops_stopwords_numbers_and_short_words():
    assert tokenize("The NEW 4K Gaming-Console, by Acme (2024) for you!") == ["gaming", "console", "acme"]
    assert tokenize(None) == [] and tokenize("") == []


def test_split_pattern_is_plain_enough_for_java_regex():
    # the Spark job passes SPLIT_PATTERN to Java's regex engine: no Python-only syntax
    assert not re.search(r"\(\?P|\\[dwsb]", SPLIT_PATTERN)


def test_attribute_values_are_terms_and_keys_are_not():
    assert attribute_values('{"brand": "Acme", "genres": ["Noir", "Drama"], "price": 9.5}') == [
        "Acme", '["Noir", "Drama"]', "9.5"]
    assert attribute_values("not json") == attribute_values("[1, 2]") == attribute_values(None) == []
    terms = entity_terms("Widget", None, '{"brand": "Acme", "department": "Kitchen"}')
    assert terms == {"widget", "acme", "kitchen"}  # values, never the keys "brand" / "department"
    assert "studio" not in TERMS["m6"] and "gramercy" in TERMS["m6"]


def test_template_words_score_near_zero_and_lose_to_distinguishing_ones():
    level = count_level_terms(TERMS, {"m0": 0, "m1": 0, "m2": 0, "m6": 0, "m3": 1, "m4": 1, "m5": 1})
    scores = {c: dict(terms) for c, terms in lift_scores(level).items()}
    # "movie", "genres", "released" are in every entity: lift 1, no positive score in any cluster
    assert not {"movie", "genres", "released"} & (set(scores[0]) | set(scores[1]))
    labels = level_labels(level, {}, n_terms=2)
    assert labels[0] == ["crime", "drama"]
    assert labels[1] == ["animation", "children"]


def test_siblings_never_share_a_label_term():
    # two clusters of crime films under one parent: the larger keeps "crime", the other does without it
    terms = {**{f"a{i}": {"crime", "thriller", "noir"} for i in range(3)},
             **{f"b{i}": {"crime", "heist"} for i in range(2)}, **{f"c{i}": {"animation"} for i in range(4)}}
    level = count_level_terms(terms, {e: "abc".index(e[0]) for e in terms})
    siblings = level_labels(level, {0: 7, 1: 7, 2: 8}, n_terms=3)
    assert siblings == {0: ["noir", "thriller", "crime"], 1: ["heist"], 2: ["animation"]}
    # not siblings (different parents): both may name the term that sets them apart from the catalogue
    cousins = level_labels(level, {0: 7, 1: 9, 2: 8}, n_terms=3)
    assert cousins[1] == ["heist", "crime"]
    # on the movie catalogue: three sibling clusters, three different labels
    movies = count_level_terms(TERMS, {"m0": 0, "m2": 0, "m1": 1, "m6": 1, "m3": 2, "m4": 2, "m5": 2})
    labels = level_labels(movies, {}, n_terms=2)
    assert len({t for terms in labels.values() for t in terms}) == 6


def test_number_of_terms_and_fallback_label():
    level = count_level_terms(TERMS, {e: 0 for e in TERMS})  # one cluster = the whole catalogue: nothing stands out
    assert level_labels(level, {}, n_terms=3) == {0: []}
    assert make_label([], 2, 7) == "L2-7"
    level = count_level_terms(TERMS, {"m3": 0, "m4": 0, "m5": 0, "m0": 1})
    assert len(level_labels(level, {}, n_terms=1)[0]) == 1 and len(level_labels(level, {}, n_terms=4)[0]) == 4
    assert make_label(["crime", "drama"], 0, 0) == "crime / drama"
