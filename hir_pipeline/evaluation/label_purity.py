"""Label purity: do a cluster's label terms come from the planted interest it stands for?

On a source generated from a planted hierarchy whose interests have vocabularies (the synthetic source), each
planted fine interest is matched to the learned cluster holding most of its labelled members (majority matching;
several interests may match one cluster); its purity is the share of that cluster's label terms
(:mod:`hir_pipeline.publish.labels`) that belong to the interest's vocabulary, 0 when the cluster has no label term.
The rows report the mean over matched interests, and over those whose vocabulary is made of real words
(``label_purity_level_<l>``, ``label_purity_real_words_level_<l>``, split ``item``, ``l`` = the model level paired
with the finest planted level).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: ``(method, split, metric, value)``, as :data:`hir_pipeline.evaluation.runner.MetricRow`.
MetricRow = tuple[str, str, str, float]
#: Split of the label purity rows: labels are made from content entities only.
SPLIT = "item"


@dataclass(frozen=True)
class InterestVocabulary:
    """The words a planted interest's content is written with.

    Args:
        terms: its terms, tokenized like labels (:func:`hir_pipeline.publish.labels.tokenize`).
        real_words: whether they are real words (the synthetic generator invents pseudo-words beyond its taxonomy).
    """

    terms: frozenset[str]
    real_words: bool = True


def majority_clusters(members: Mapping[str, int], truth: Mapping[str, int | None]) -> dict[int, int]:
    """Planted interest -> the learned cluster holding most of its members (the smallest ID on a tie).

    Args:
        members: entity -> learned cluster (the labelled entities).
        truth: entity -> planted interest (None or missing: not counted).
    """
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    for entity, cluster in members.items():
        interest = truth.get(entity)
        if interest is not None:
            counts[int(interest)][int(cluster)] += 1
    return {i: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for i, c in counts.items()}


def label_purity(
    labels: Mapping[int, Sequence[str]],
    members: Mapping[str, int],
    truth: Mapping[str, int | None],
    vocabularies: Mapping[int, InterestVocabulary],
) -> dict[int, float]:
    """Per planted interest with a vocabulary and members, the share of its matched cluster's label terms that
    come from its vocabulary.

    Args:
        labels: learned cluster -> its label terms.
        members: entity -> learned cluster (the labelled entities).
        truth: entity -> planted interest.
        vocabularies: planted interest -> its vocabulary.
    """
    out: dict[int, float] = {}
    for interest, cluster in majority_clusters(members, truth).items():
        if interest not in vocabularies:
            continue
        terms = list(labels.get(cluster, []))
        out[interest] = sum(t in vocabularies[interest].terms for t in terms) / len(terms) if terms else 0.0
    return out


def label_purity_rows(purity: Mapping[int, float], vocabularies: Mapping[int, InterestVocabulary], level: int,
                      method: str = "hir") -> list[MetricRow]:
    """Metric rows of :func:`label_purity` (the module docstring names them); none without a matched interest.

    Args:
        purity: planted interest -> purity.
        vocabularies: planted interest -> its vocabulary (which are real words).
        level: the model level the labels belong to.
        method: method name of the rows.
    """
    rows: list[MetricRow] = []
    groups = {"label_purity": list(purity),
              "label_purity_real_words": [i for i in purity if vocabularies[i].real_words]}
    for name, interests in groups.items():
        if interests:
            rows.append((method, SPLIT, f"{name}_level_{level}", sum(purity[i] for i in interests) / len(interests)))
    return rows
