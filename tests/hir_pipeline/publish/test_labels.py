"""Cluster labels: tokenizer, attribute values, lift ranking and sibling-distinct labels."""

from __future__ import annotations

import json
import re

from hir_pipeline.publish.labels import (
    SPLIT_PATTERN,
    WHOLE_LEVEL,
    ancestor_chains,
    attribute_values,
    count_level_terms,
    entity_terms,
    level_labels,
    lift_scores,
    make_label,
    reference_keys,
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
    # two clusters of crime films under one parent, a cluster of animation alone under another
    terms = {**{f"a{i}": {"crime", "thriller", "noir"} for i in range(3)},
             **{f"b{i}": {"crime", "heist"} for i in range(2)}, **{f"c{i}": {"animation"} for i in range(4)}}
    clusters = {e: "abc".index(e[0]) for e in terms}
    chains = {0: (7,), 1: (7,), 2: (8,)}
    siblings = level_labels(count_level_terms(terms, clusters, chains, comparison="parent"), chains, n_terms=3)
    # within their parent every member is a crime film: "crime" sets neither apart; the only child is compared
    # with the whole level
    assert siblings == {0: ["noir", "thriller"], 1: ["heist"], 2: ["animation"]}
    # compared with the catalogue, "crime" (5 of 9 members) describes both: the larger sibling takes it
    siblings = level_labels(count_level_terms(terms, clusters, chains), chains, n_terms=3)
    assert siblings == {0: ["noir", "thriller", "crime"], 1: ["heist"], 2: ["animation"]}
    # not siblings (different parents, each an only child): both may name what sets them apart from the level
    cousins = {0: (7,), 1: (9,), 2: (8,)}
    assert level_labels(count_level_terms(terms, clusters, cousins), cousins, n_terms=3)[1] == ["heist", "crime"]
    # the same term ranks in two siblings: the larger keeps it, the other passes it over
    terms = {**{f"a{i}": {"crime", "noir"} for i in range(3)}, **{f"b{i}": {"crime", "heist"} for i in range(2)},
             **{f"c{i}": {"animation"} for i in range(4)}}
    roots = level_labels(count_level_terms(terms, clusters), {}, n_terms=2)
    assert roots[0] == ["noir", "crime"] and roots[1] == ["heist"]  # "crime" would rank second in 1
    # on the movie catalogue: three sibling clusters, three different labels
    movies = count_level_terms(TERMS, {"m0": 0, "m2": 0, "m1": 1, "m6": 1, "m3": 2, "m4": 2, "m5": 2})
    labels = level_labels(movies, {}, n_terms=2)
    assert len({t for terms in labels.values() for t in terms}) == 6


def test_comparison_set_is_the_catalogue_or_the_parent_or_the_nearest_ancestor_with_other_members():
    chains = ancestor_chains([{}, {0: 0, 1: 0, 2: 1}, {0: 0, 1: 1, 2: 2, 3: 2}], 2, range(4))
    assert chains == {0: (0, 0), 1: (1, 0), 2: (2, 1), 3: (2, 1)}
    keys = reference_keys({0: 5, 1: 3, 2: 4, 3: 1}, chains, comparison="parent")
    # 2 and 3 share a parent; 0 and 1 are only children, compared with their grandparent's members; a cluster
    # alone under its whole ancestry is compared with the whole level
    assert keys == {0: (2, 0), 1: (2, 0), 2: (1, 2), 3: (1, 2)}
    assert reference_keys({0: 5, 1: 0}, chains, comparison="parent") == {0: WHOLE_LEVEL, 1: (2, 0)}
    # the default: every cluster is compared with the whole level, whatever its ancestry
    assert reference_keys({0: 5, 1: 3, 2: 4, 3: 1}, chains) == dict.fromkeys(range(4), WHOLE_LEVEL)
    assert ancestor_chains([{}, {0: None}], 1, [0, 1]) == {0: (), 1: ()}


def test_number_of_terms_and_fallback_label():
    level = count_level_terms(TERMS, {e: 0 for e in TERMS})  # one cluster = the whole catalogue: nothing stands out
    assert level_labels(level, {}, n_terms=3) == {0: []}
    assert make_label([], 2, 7) == "L2-7"
    level = count_level_terms(TERMS, {"m3": 0, "m4": 0, "m5": 0, "m0": 1})
    assert len(level_labels(level, {}, n_terms=1)[0]) == 1 and len(level_labels(level, {}, n_terms=4)[0]) == 4
    assert make_label(["crime", "drama"], 0, 0) == "crime / drama"


# Movies carry the description template ("Genres: ... Released ...", attribute key "genres") and differ by their
# genre values; the companies, most of the catalogue, have no template. Over the whole catalogue the template
# words have a lift of 20 / 8 in every cluster of movies and outrank genres that only part of a cluster holds.
GENRES = {"c0": "Crime Thriller", "c1": "Crime Drama", "c2": "Crime Mystery", "c3": "Drama Thriller",
          "a0": "Animation Family", "a1": "Animation Musical", "a2": "Animation Fantasy", "a3": "Family Musical"}
TYPED = {
    **{e: ("movie", f"Title{e}", f"Movie. Genres: {g}. Released 1995.", json.dumps({"genres": g.split()}))
       for e, g in GENRES.items()},
    **{f"s{i}": ("company", f"Studio{i}", "Production company of pictures.", '{"country": "France"}')
       for i in range(12)},
}
TEMPLATE = {"movie", "genres", "released"}


def test_template_words_of_one_entity_type_never_make_a_label():
    terms = {e: entity_terms(*row[1:]) for e, row in TYPED.items()}
    types = {e: row[0] for e, row in TYPED.items()}
    assert terms["c0"] >= TEMPLATE and not TEMPLATE & terms["s0"]
    # coarsest level: crime films, animated films, and the companies in two clusters
    coarse = {e: "ca".index(e[0]) if e[0] != "s" else 2 + int(e[1:]) % 2 for e in TYPED}
    labels = level_labels(count_level_terms(terms, coarse, types=types), {}, n_terms=3)
    assert not TEMPLATE & {t for got in labels.values() for t in got}, labels
    assert labels[0][0] == "crime" and labels[1][0] == "animation"
    # one level down: the two clusters of films under one parent still differ by their genre values
    chains = {0: (0,), 1: (0,), 2: (1,), 3: (1,)}
    labels = level_labels(count_level_terms(terms, coarse, chains, types), chains, n_terms=3)
    assert not TEMPLATE & {t for got in labels.values() for t in got}, labels
    assert labels[0][0] == "crime" and labels[1][0] == "animation"
