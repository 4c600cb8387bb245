"""Human-readable cluster labels: the terms that set a cluster's members apart from the whole catalogue.

An entity's terms are the words of its title, its description and the *values* of its ``attributes`` JSON (a
genre, a brand, a category name; never the keys), each counted once per entity. A term scores
``p_c * ln(p_c / p)`` in a cluster, with ``p_c`` the share of the cluster's labelled members that hold it and ``p``
the same share over the whole labelled catalogue: its log-lift weighted by its support (one term of the KL
divergence of the cluster's term distribution from the catalogue's). A word most entities share (a description
template, boilerplate) has a lift near 1 and scores near zero however frequent it is; a word frequent in the
cluster and rare elsewhere scores highest; a rare word held by a few members scores little.

Sibling clusters (same parent; the roots at level 0) never share a label term: siblings are labelled largest first
and a term already taken by a sibling is passed over for the cluster's next distinguishing term.
The tokenizer is a regular expression both Python and Spark (Java) accept, so term counting can run distributed.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

#: Split on anything that is not a lower-case letter or digit (text is lower-cased first); Java-compatible.
SPLIT_PATTERN = r"[^a-z0-9]+"
#: A term starts with a letter (drops prices, years, SKUs) and has at least this many characters.
MIN_TERM_LENGTH = 3
TERM_PATTERN = r"^[a-z][a-z0-9]*$"
#: Function words that never make a useful label (catalogue boilerplate is left to the lift).
_STOPWORDS = """
    a an and are as at be but by for from has have in into is it its of on or our that the their this to was
    were will with you your all any can get new more most now out over per than too very via
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORDS.split())


def tokenize(text: str | None) -> list[str]:
    """Terms of ``text`` exactly as the Spark job counts them (lower-case, split, filtered).

    Args:
        text: any text, or None.
    """
    if not text:
        return []
    return [t for t in re.split(SPLIT_PATTERN, text.lower()) if keep_term(t)]


def keep_term(term: str) -> bool:
    """Whether ``term`` counts: long enough, starts with a letter, not a stopword.

    Args:
        term: a lower-case token.
    """
    return len(term) >= MIN_TERM_LENGTH and re.match(TERM_PATTERN, term) is not None and term not in STOPWORDS


def attribute_values(attributes: str | None) -> list[str]:
    """The values of an ``attributes`` JSON object as text, without its keys.

    A string value is itself; any other value (a list of genres, a number) is its JSON text, as Spark's
    ``from_json(attributes, 'map<string,string>')`` gives it. Anything but a JSON object gives nothing.

    Args:
        attributes: the entity's ``attributes`` column.
    """
    if not attributes:
        return []
    try:
        parsed = json.loads(attributes)
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    return [v if isinstance(v, str) else json.dumps(v) for v in parsed.values() if v is not None]


def entity_terms(title: str | None, description: str | None, attributes: str | None = None) -> set[str]:
    """The distinct terms of one entity (the in-memory twin of :func:`spark_jobs.publish.transform.entity_terms`).

    Args:
        title: the entity's title.
        description: its description.
        attributes: its ``attributes`` JSON object (values count, keys do not).
    """
    return set(tokenize(" ".join(t for t in (title, description, *attribute_values(attributes)) if t)))


@dataclass(frozen=True)
class LevelTerms:
    """Term counts of the clusters of one level.

    Args:
        counts: cluster -> term -> labelled members holding the term (may be truncated to each cluster's most
            frequent terms).
        members: cluster -> labelled members (those with at least one term).
        doc_freq: term -> labelled entities of the catalogue holding it (at least every term of ``counts``).
        n_entities: labelled entities of the catalogue.
    """

    counts: Mapping[int, Mapping[str, int]]
    members: Mapping[int, int]
    doc_freq: Mapping[str, int]
    n_entities: int


def count_level_terms(terms: Mapping[str, Collection[str]], clusters: Mapping[str, int]) -> LevelTerms:
    """:class:`LevelTerms` of one level from in-memory entities (the twin of the Spark aggregation).

    Args:
        terms: entity -> its distinct terms (:func:`entity_terms`); entities without terms are not labelled.
        clusters: entity -> its cluster at the level; entities missing here are not counted.
    """
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    members: Counter[int] = Counter()
    doc_freq: Counter[str] = Counter()
    for entity, held in terms.items():
        if not held or entity not in clusters:
            continue
        cluster = int(clusters[entity])
        members[cluster] += 1
        counts[cluster].update(set(held))
        doc_freq.update(set(held))
    return LevelTerms(dict(counts), dict(members), dict(doc_freq), sum(members.values()))


def lift_scores(level: LevelTerms) -> dict[int, list[tuple[str, float]]]:
    """Every cluster's terms that are more common in it than in the catalogue, best first (ties alphabetical).

    Args:
        level: the level's term counts.

    Returns:
        cluster -> ``[(term, p_c * ln(p_c / p)), ...]`` with positive scores only.
    """
    out: dict[int, list[tuple[str, float]]] = {}
    n = max(level.n_entities, 1)
    for cluster, terms in level.counts.items():
        size = level.members.get(cluster, 0)
        scored = []
        for term, count in terms.items():
            if count <= 0 or size <= 0:
                continue
            p_c = count / size
            p = max(level.doc_freq.get(term, count), count) / n
            score = p_c * math.log(p_c / p)
            if score > 0:
                scored.append((term, score))
        out[cluster] = sorted(scored, key=lambda ts: (-ts[1], ts[0]))
    return out


def sibling_distinct_terms(
    ranked: Mapping[int, list[tuple[str, float]]],
    parents: Mapping[int, int | None],
    sizes: Mapping[int, int],
    n_terms: int,
) -> dict[int, list[str]]:
    """Up to ``n_terms`` best terms per cluster, no term shared by two siblings.

    Siblings are labelled largest first (then by ID); a term a sibling already took is skipped, so the next
    distinguishing term takes its place.

    Args:
        ranked: cluster -> scored terms, best first (:func:`lift_scores`).
        parents: cluster -> parent (None at level 0: the roots are siblings); clusters missing are roots.
        sizes: cluster -> size (the labelling order among siblings).
        n_terms: terms per label.
    """
    families: dict[int | None, list[int]] = defaultdict(list)
    for cluster in ranked:
        families[parents.get(cluster)].append(cluster)
    out: dict[int, list[str]] = {}
    for siblings in families.values():
        taken: set[str] = set()
        for cluster in sorted(siblings, key=lambda c: (-sizes.get(c, 0), c)):
            picked = [t for t, _ in ranked[cluster] if t not in taken][:n_terms]
            taken.update(picked)
            out[cluster] = picked
    return out


def level_labels(level: LevelTerms, parents: Mapping[int, int | None], n_terms: int) -> dict[int, list[str]]:
    """Label terms of every cluster of one level: lift-ranked, distinct among siblings.

    Args:
        level: the level's term counts.
        parents: cluster -> parent cluster (None or missing at level 0).
        n_terms: terms per label.
    """
    return sibling_distinct_terms(lift_scores(level), parents, level.members, n_terms)


def make_label(terms: list[str], level: int, cluster_id: int) -> str:
    """``"term1 / term2 / term3"``, or ``"L<level>-<id>"`` for a cluster without any distinguishing term.

    Args:
        terms: the label terms, best first.
        level: the cluster's level.
        cluster_id: its published ID.
    """
    return " / ".join(terms) if terms else f"L{level}-{cluster_id}"
