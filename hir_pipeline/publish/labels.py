"""Human-readable cluster labels: the top TF-IDF terms of the members' titles and descriptions.

Each cluster of a level is one "document" (the text of all its members); a term scores
``tf * idf`` with ``tf`` its share of the cluster's terms and ``idf = ln((1 + n) / df)`` over the ``n``
clusters of the level (Salton & Buckley, 1988), so words every cluster shares ("deal", "pack") score near
zero and lose to the words that set a cluster apart, while a level with a single cluster still ranks by tf.
The tokenizer is a regular expression both Python and Spark (Java) accept, so term counting can run distributed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

#: Split on anything that is not a lower-case letter or digit (text is lower-cased first); Java-compatible.
SPLIT_PATTERN = r"[^a-z0-9]+"
#: A term starts with a letter (drops prices, years, SKUs) and has at least this many characters.
MIN_TERM_LENGTH = 3
TERM_PATTERN = r"^[a-z][a-z0-9]*$"
#: Function words and catalog boilerplate that never make a useful label.
_STOPWORDS = """
    a an and are as at be but by for from has have in into is it its of on or our that the their this to was
    were will with you your all any can get new more most now out over per than too very via
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORDS.split())


def tokenize(text: str | None) -> list[str]:
    """Terms of ``text`` exactly as the Spark job counts them (lower-case, split, filtered)."""
    if not text:
        return []
    return [t for t in re.split(SPLIT_PATTERN, text.lower()) if keep_term(t)]


def keep_term(term: str) -> bool:
    """Whether ``term`` counts: long enough, starts with a letter, not a stopword."""
    return len(term) >= MIN_TERM_LENGTH and re.match(TERM_PATTERN, term) is not None and term not in STOPWORDS


def term_counts(texts: Iterable[str | None]) -> Counter[str]:
    """Term frequencies over ``texts`` (the in-memory twin of the Spark aggregation)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(tokenize(text))
    return counts


def tfidf_terms(
    counts: Mapping[int, Mapping[str, int]],
    n_terms: int = 3,
    doc_freq: Mapping[str, int] | None = None,
    n_docs: int | None = None,
) -> dict[int, list[str]]:
    """Top TF-IDF terms per cluster of one level.

    Args:
        counts: cluster -> term -> count (may be truncated to each cluster's most frequent terms).
        n_terms: terms per cluster.
        doc_freq: term -> number of clusters containing it; computed from ``counts`` when None (pass it
            when ``counts`` is truncated, so that idf sees every cluster).
        n_docs: number of clusters of the level (default ``len(counts)``).

    Returns:
        cluster -> up to ``n_terms`` terms, best first (ties broken alphabetically); empty for no text.
    """
    if doc_freq is None:
        doc_freq = Counter(t for terms in counts.values() for t, c in terms.items() if c > 0)
    n = len(counts) if n_docs is None else n_docs
    out: dict[int, list[str]] = {}
    for cluster, terms in counts.items():
        total = sum(terms.values())
        if total <= 0:
            out[cluster] = []
            continue
        scored = [(-(c / total) * math.log((1 + n) / max(doc_freq.get(t, 1), 1)), t)
                  for t, c in terms.items() if c > 0]
        out[cluster] = [t for _, t in sorted(scored)[:n_terms]]
    return out


def make_label(terms: list[str], level: int, cluster_id: int) -> str:
    """``"term1 / term2 / term3"``, or ``"L<level>-<id>"`` for a cluster without any text."""
    return " / ".join(terms) if terms else f"L{level}-{cluster_id}"
