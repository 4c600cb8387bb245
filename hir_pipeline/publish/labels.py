"""Human-readable cluster labels: the terms that set a cluster's members apart from the catalogue (or the parent).

An entity's terms are the words of its title, its description and the *values* of its ``attributes`` JSON (a
genre, a brand, a category name; never the keys), each counted once per entity. A term scores
``p_c * ln(p_c / p)`` in a cluster, with ``p_c`` the share of the cluster's labelled members that hold it and ``p``
its share in the cluster's comparison set: its log-lift weighted by its support (one term of the KL divergence of
the cluster's term distribution from the comparison set's). The comparison set (:data:`LabelComparison`) is the
whole catalogue by default (a label says what its members are about; an interest that the model splits into sibling
clusters gives each of them its own words), or the parent cluster (the level's members under the same parent: the
cluster and its siblings; an only child looks one level further up; the catalogue at the coarsest level: a label
then says what sets a cluster apart from its siblings). ``p`` is taken entity type by entity type and weighted by
the cluster's own type mix, so a cluster of movies is compared with the movies of its comparison set: a word most
entities of a type share (a description template such as "Genres: ... Released ...", boilerplate) has a lift near 1
and scores near zero however frequent it is, even where other types lack it; a word frequent in the cluster and
rare among its comparison set scores highest; a rare word held by a few members scores little.

Sibling clusters (same parent; the roots at level 0) never share a label term: siblings are labelled largest first
and a term already taken by a sibling is passed over for the cluster's next distinguishing term.
The tokenizer is a regular expression both Python and Spark (Java) accept, so term counting can run distributed
(:func:`spark_jobs.publish.transform.level_term_counts` is the Spark twin of :func:`count_level_terms`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

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
class TermCounts:
    """Labelled entities of one set (a cluster, a comparison set) and how many of them hold each term, by type.

    Args:
        members: entity type -> labelled entities of the set (those with at least one term).
        terms: term -> entity type -> entities of the set holding the term.
    """

    members: Mapping[str, int]
    terms: Mapping[str, Mapping[str, int]]

    @property
    def size(self) -> int:
        """Labelled entities of the set, all types together."""
        return sum(self.members.values())


@dataclass(frozen=True)
class LevelTerms:
    """Term counts of the clusters of one level and of the sets each is compared with.

    Args:
        clusters: cluster -> its :class:`TermCounts` (its terms may be truncated to the most frequent ones).
        references: cluster -> the :class:`TermCounts` of its comparison set (:func:`reference_keys`), holding at
            least every term of the cluster's counts.
    """

    clusters: Mapping[int, TermCounts]
    references: Mapping[int, TermCounts]


#: What a cluster's terms are compared with: ``"catalogue"`` (every member of the level) or ``"parent"`` (the members
#: under its parent cluster, :func:`reference_keys`).
LabelComparison = Literal["catalogue", "parent"]

#: A comparison set of one level: ``(depth, ancestor)`` = the level's members under the cluster ``depth`` levels
#: up; :data:`WHOLE_LEVEL` = every member of the level (the catalogue: every entity is assigned at every level).
RefKey = tuple[int, int]
WHOLE_LEVEL: RefKey = (0, -1)


def ancestor_chains(parents: Sequence[Mapping[int, int | None]], level: int,
                    clusters: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Each cluster's ancestors, parent first, up to level 0 or the first missing parent.

    Args:
        parents: per level, cluster -> its parent at the level above (None or missing at level 0).
        level: the clusters' level.
        clusters: the clusters of ``level``.
    """
    out: dict[int, tuple[int, ...]] = {}
    for cluster in clusters:
        chain: list[int] = []
        node: int | None = int(cluster)
        for lvl in range(level, 0, -1):
            node = parents[lvl].get(node) if lvl < len(parents) and node is not None else None
            if node is None:
                break
            chain.append(int(node))
        out[int(cluster)] = tuple(chain)
    return out


def in_reference(chain: Sequence[int], key: RefKey) -> bool:
    """Whether a cluster with ancestors ``chain`` belongs to the comparison set ``key``.

    Args:
        chain: the cluster's ancestors, parent first (:func:`ancestor_chains`).
        key: a comparison set.
    """
    depth, ancestor = key
    return key == WHOLE_LEVEL or (len(chain) >= depth and chain[depth - 1] == ancestor)


def reference_keys(sizes: Mapping[int, int], chains: Mapping[int, Sequence[int]],
                   comparison: LabelComparison = "catalogue") -> dict[int, RefKey]:
    """Each cluster's comparison set: the whole level, or with ``comparison="parent"`` the members of the level
    under its parent (itself and its siblings).

    Compared with its parent, a cluster that holds all of its parent's members at the level (an only child) is
    compared one level further up, and so on; the roots, and clusters without a parent, with the whole level.

    Args:
        sizes: cluster -> labelled members.
        chains: cluster -> its ancestors, parent first (:func:`ancestor_chains`); missing: none.
        comparison: ``"catalogue"`` or ``"parent"`` (:data:`LabelComparison`).
    """
    if comparison == "catalogue":
        return {cluster: WHOLE_LEVEL for cluster in sizes}
    group: Counter[RefKey] = Counter()
    for cluster, n in sizes.items():
        for depth, ancestor in enumerate(chains.get(cluster, ()), 1):
            group[(depth, ancestor)] += n
    return {cluster: next(((d, a) for d, a in enumerate(chains.get(cluster, ()), 1) if group[(d, a)] > n),
                          WHOLE_LEVEL)
            for cluster, n in sizes.items()}


def reference_members(keys: Collection[RefKey], sizes: Mapping[int, Mapping[str, int]],
                      chains: Mapping[int, Sequence[int]]) -> dict[RefKey, list[int]]:
    """Comparison set -> the clusters it is made of.

    Args:
        keys: the comparison sets wanted.
        sizes: cluster -> its labelled members (any mapping keyed by the level's clusters).
        chains: cluster -> its ancestors, parent first.
    """
    return {key: sorted(c for c in sizes if in_reference(chains.get(c, ()), key)) for key in set(keys)}


def _add(into: dict[str, dict[str, int]], terms: Mapping[str, Mapping[str, int]]) -> None:
    for term, by_type in terms.items():
        slot = into.setdefault(term, {})
        for etype, n in by_type.items():
            slot[etype] = slot.get(etype, 0) + n


def count_level_terms(
    terms: Mapping[str, Collection[str]],
    clusters: Mapping[str, int],
    chains: Mapping[int, Sequence[int]] | None = None,
    types: Mapping[str, str] | None = None,
    comparison: LabelComparison = "catalogue",
) -> LevelTerms:
    """:class:`LevelTerms` of one level from in-memory entities (the twin of the Spark aggregation).

    Args:
        terms: entity -> its distinct terms (:func:`entity_terms`); entities without terms are not labelled.
        clusters: entity -> its cluster at the level; entities missing here are not counted.
        chains: cluster -> its ancestors, parent first (:func:`ancestor_chains`); None: every cluster is a root.
        types: entity -> its entity type; None or missing: one type for all.
        comparison: what each cluster is compared with (:func:`reference_keys`).
    """
    members: dict[int, Counter[str]] = defaultdict(Counter)
    counts: dict[int, dict[str, dict[str, int]]] = defaultdict(dict)
    for entity, held in terms.items():
        if not held or entity not in clusters:
            continue
        cluster, etype = int(clusters[entity]), (types or {}).get(entity, "")
        members[cluster][etype] += 1
        _add(counts[cluster], {term: {etype: 1} for term in set(held)})
    own = {c: TermCounts(dict(members[c]), counts[c]) for c in members}
    chains = chains or {}
    keys = reference_keys({c: t.size for c, t in own.items()}, chains, comparison)
    sets: dict[RefKey, TermCounts] = {}
    for key, parts in reference_members(keys.values(), own, chains).items():
        ref_members: Counter[str] = Counter()
        ref_terms: dict[str, dict[str, int]] = {}
        for c in parts:
            ref_members.update(own[c].members)
            _add(ref_terms, own[c].terms)
        sets[key] = TermCounts(dict(ref_members), ref_terms)
    return LevelTerms(own, {c: sets[keys[c]] for c in own})


def lift_scores(level: LevelTerms) -> dict[int, list[tuple[str, float]]]:
    """Every cluster's terms that are more common in it than in its comparison set, best first (ties alphabetical).

    The comparison share of a term is that of the comparison set taken type by type and weighted by the cluster's
    own type mix, so a cluster of movies is compared with movies even where the set also holds other types.

    Args:
        level: the level's term counts.

    Returns:
        cluster -> ``[(term, p_c * ln(p_c / p)), ...]`` with positive scores only.
    """
    out: dict[int, list[tuple[str, float]]] = {}
    for cluster, own in level.clusters.items():
        ref, size = level.references[cluster], own.size
        mix = sorted(own.members.items())  # a fixed order: the same float sums on every path
        scored = []
        for term, held in own.terms.items():
            count = sum(held.values())
            if count <= 0 or size <= 0:
                continue
            p_c = count / size
            in_ref = ref.terms.get(term, {})
            # a comparison set holds the cluster: never fewer entities or holders than the cluster itself
            p = sum(n / size * max(in_ref.get(t, 0), held.get(t, 0)) / max(ref.members.get(t, 0), n)
                    for t, n in mix)
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


def level_labels(level: LevelTerms, chains: Mapping[int, Sequence[int]], n_terms: int) -> dict[int, list[str]]:
    """Label terms of every cluster of one level: lift-ranked within the comparison sets, distinct among siblings.

    Args:
        level: the level's term counts (:func:`count_level_terms` or the Spark aggregation).
        chains: cluster -> its ancestors, parent first (:func:`ancestor_chains`); missing: a root.
        n_terms: terms per label.
    """
    parents = {c: (chain[0] if chain else None) for c, chain in chains.items()}
    sizes = {c: t.size for c, t in level.clusters.items()}
    return sibling_distinct_terms(lift_scores(level), parents, sizes, n_terms)


def make_label(terms: list[str], level: int, cluster_id: int) -> str:
    """``"term1 / term2 / term3"``, or ``"L<level>-<id>"`` for a cluster without any distinguishing term.

    Args:
        terms: the label terms, best first.
        level: the cluster's level.
        cluster_id: its published ID.
    """
    return " / ".join(terms) if terms else f"L{level}-{cluster_id}"
