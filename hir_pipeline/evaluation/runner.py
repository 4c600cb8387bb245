"""Run every method on one evaluation split and flatten the results into metric rows.

A metric row is ``(method, split, metric, value)``, the shape of the ``evaluation_metrics`` table (the
orchestration layer adds ``model_version`` and ``run_date``). Ranking rows have split ``warm`` / ``cold``;
clustering rows (HIR only) have split ``all``, ``item`` (every type but users) or an entity type, and metrics
``nmi_level_<l>``, ``clusters_used_level_<l>``, ``usage_perplexity_level_<l>``, ``largest_share_level_<l>``,
``mean_top_probability_level_<l>`` and ``parent_agreement_level_<l>`` (``l >= 1``). On a source whose planted
interests have vocabularies, ``label_purity_level_<l>`` and ``label_purity_real_words_level_<l>`` (split ``item``)
score the finest level's labels (:mod:`hir_pipeline.evaluation.label_purity`).

Comparison rows (HIR only, per split) come from per-user Recall@K: ``recall_at_<k>_vs_<ref>`` is HIR's mean over
the reference's, ``recall_at_<k>_diff_vs_<ref>`` their difference, each with ``_ci_low`` / ``_ci_high`` ends of a
paired bootstrap interval over users (:mod:`~hir_pipeline.evaluation.bootstrap`); ``<ref>`` is
``best_baseline`` (the baseline with the highest mean Recall@K on that split) and, on cold items, ``content``.

Hierarchical retrieval rows (HIR only, per split ``warm`` / ``cold``; :func:`hierarchical_rows`): the production
model's items retrieved coarse to fine through its own clusters (:func:`hir_pipeline.retrieval.hierarchical_top_k`,
``EvaluationSettings.hierarchical``) against exact search: ``hierarchical_recall_at_<k>``,
``hierarchical_recall_ratio`` (its mean Recall@K over exact search's), ``hierarchical_scored_share`` (mean share of
the rankable items scored per user) and ``hierarchical_clusters_probed`` (mean clusters probed per user). A model
whose hierarchy does not route users to their items shows a low ratio.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

import numpy as np

from hir_pipeline.evaluation.baselines import (
    ALSConfig,
    ALSScorer,
    ContentScorer,
    LightGCNConfig,
    LightGCNScorer,
    PopularityScorer,
    RandomScorer,
)
from hir_pipeline.evaluation.bootstrap import PairedInterval, paired_bootstrap
from hir_pipeline.evaluation.data import COLD, WARM, EvalData
from hir_pipeline.evaluation.metrics import cluster_usage, mean_top_probability, nmi, parent_agreement
from hir_pipeline.evaluation.scoring import Scorer, UserScores, evaluate_per_user, evaluate_rankings, summarize
from hir_pipeline.model.tree import majority_parents
from hir_pipeline.retrieval import HierarchicalSettings, build_index, exact_top_k, hierarchical_top_k
from hir_pipeline.timing import Stages

log = logging.getLogger(__name__)

#: ``(method, split, metric, value)``.
MetricRow = tuple[str, str, str, float]
#: Every baseline, in report order; ``random`` is the floor (on cold items the collaborative baselines rank
#: items they never saw, which is no better than it).
Baseline = Literal["popularity", "als", "lightgcn", "content", "random"]
KNOWN_BASELINES: tuple[str, ...] = get_args(Baseline)
BASELINES: tuple[Baseline, ...] = KNOWN_BASELINES
#: Reference names of the comparison rows.
BEST_BASELINE, CONTENT = "best_baseline", "content"
#: Per method, per split, the per-user metrics.
PerUser = dict[str, dict[str, UserScores]]


@dataclass(frozen=True)
class EvaluationSettings:
    """What is evaluated and how.

    Args:
        k: ranking cut-off of Recall@k and NDCG@k (and of the Recall@k the ALS grid maximises).
        baselines: baselines to run, among ``popularity``, ``als``, ``lightgcn``, ``content``, ``random``.
        als: ALS grid.
        lightgcn: LightGCN settings.
        seed: seed of the baselines (ALS initialisation, and its random hold-out for data without a tuning split;
            LightGCN, random; it replaces the seeds of ``als`` and ``lightgcn``) and of the bootstrap resampling.
        hir_seeds: HIR models trained on the split, with the training seeds ``seed, seed + 1, ...`` of the
            training config; HIR's rows are their per-user mean (each extra seed costs one more training).
        bootstrap_samples: resamples of the users for the paired intervals of HIR vs the baselines.
        confidence: nominal coverage of those intervals.
        hierarchical: settings of the hierarchical retrieval scored against exact search (the
            ``hierarchical_*`` rows of HIR's production model).
    """

    k: int = 20
    baselines: tuple[Baseline, ...] = BASELINES
    als: ALSConfig = field(default_factory=ALSConfig)
    lightgcn: LightGCNConfig = field(default_factory=LightGCNConfig)
    seed: int = 0
    hir_seeds: int = 1
    bootstrap_samples: int = 2000
    confidence: float = 0.95
    hierarchical: HierarchicalSettings = field(default_factory=HierarchicalSettings)

    def __post_init__(self) -> None:
        unknown = [b for b in self.baselines if b not in KNOWN_BASELINES]
        if unknown:
            raise ValueError(f"unknown baseline {unknown[0]!r} in baselines; known: {', '.join(KNOWN_BASELINES)}")
        if self.k < 1:
            raise ValueError("k must be >= 1")
        if self.hir_seeds < 1:
            raise ValueError(f"hir_seeds must be >= 1, got {self.hir_seeds}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


def make_baselines(settings: EvaluationSettings, content: np.ndarray | None) -> list[Scorer]:
    """Unfitted baseline scorers; ``content`` (item content aligned with the data's items) feeds content-only.

    Args:
        settings: which baselines and their settings.
        content: float ``[I, Dc]`` item content, or ``None`` (content-only is then skipped with a warning).
    """
    out: list[Scorer] = []
    for name in settings.baselines:
        if name == "popularity":
            out.append(PopularityScorer())
        elif name == "als":
            out.append(ALSScorer(replace(settings.als, k=settings.k, seed=settings.seed)))  # one cut-off, one seed
        elif name == "lightgcn":
            out.append(LightGCNScorer(replace(settings.lightgcn, seed=settings.seed)))
        elif name == "content":
            if content is None or content.shape[1] == 0:
                log.warning("no content embeddings: the content-only baseline is skipped")
                continue
            out.append(ContentScorer(content))
        elif name == "random":
            out.append(RandomScorer(settings.seed))
        else:
            raise ValueError(f"unknown baseline {name!r}; known: {', '.join(KNOWN_BASELINES)}")
    return out


@dataclass
class RankingResults:
    """Args:
    rows: ranking metric rows of every method (means over users, as :func:`ranking_rows`).
    seconds: seconds each method took (fit and evaluation).
    per_user: per method, per split, each user's metrics (what the paired intervals need).
    """

    rows: list[MetricRow]
    seconds: dict[str, float]
    per_user: PerUser


def metric_rows(method: str, per_user: dict[str, UserScores], k: int) -> list[MetricRow]:
    """``(method, split, recall_at_<k> | ndcg_at_<k> | users, value)`` rows of one method's per-user metrics.

    Args:
        method: method name of the rows.
        per_user: per split, the method's per-user metrics.
        k: cut-off (names the metrics).
    """
    return [(method, split, metric, float(value))
            for split, metrics in summarize(per_user, k).items() for metric, value in metrics.items()]


def ranking_results(scorers: Sequence[Scorer], data: EvalData, k: int,
                    progress: Callable[[str], None] | None = None) -> RankingResults:
    """Fit and evaluate every scorer, keeping each user's metrics.

    Args:
        scorers: unfitted scorers (already-fitted ones, like HIR's embedding scorer, just validate).
        data: the evaluation data.
        k: cut-off.
        progress: called with a line per method (e.g. ``context.log.info``).
    """
    stages = Stages()
    out = RankingResults([], stages.seconds, {})
    for scorer in scorers:
        with stages(scorer.name):
            got = evaluate_per_user(scorer.fit(data), data, k)
        out.per_user[scorer.name] = got
        out.rows += metric_rows(scorer.name, got, k)
        if progress is not None:
            summary = ", ".join(f"{s} recall@{k} {m[f'recall_at_{k}']:.4f}" for s, m in summarize(got, k).items())
            progress(f"{scorer.name}: {summary} ({out.seconds[scorer.name]:.1f}s)")
    return out


def ranking_rows(scorers: Sequence[Scorer], data: EvalData, k: int,
                 progress: Callable[[str], None] | None = None) -> tuple[list[MetricRow], dict[str, float]]:
    """Fit and evaluate every scorer; returns the metric rows and the seconds each method took.

    Args:
        scorers: unfitted scorers (already-fitted ones, like HIR's embedding scorer, just validate).
        data: the evaluation data.
        k: cut-off.
        progress: called with a line per method (e.g. ``context.log.info``).
    """
    got = ranking_results(scorers, data, k, progress)
    return got.rows, got.seconds


def average_over_seeds(runs: Sequence[dict[str, UserScores]]) -> dict[str, UserScores]:
    """Each user's metrics averaged over runs of one method that differ only by seed.

    Args:
        runs: per run, per split, the per-user metrics (the same users in every run, as on the same data).
    """
    if not runs:
        raise ValueError("no runs to average")
    out = {}
    for split, first in runs[0].items():
        for run in runs[1:]:
            if not np.array_equal(run[split].users, first.users):
                raise ValueError(f"runs evaluated different users on split {split!r}")
        out[split] = UserScores(first.users, np.mean([r[split].recall for r in runs], axis=0),
                                np.mean([r[split].ndcg for r in runs], axis=0))
    return out


def best_baseline(per_user: PerUser, split: str) -> str | None:
    """The baseline with the highest mean Recall on ``split`` (first in :data:`BASELINES` order on a tie).

    Args:
        per_user: per method, per split, the per-user metrics.
        split: the split.
    """
    means = {m: float(per_user[m][split].recall.mean()) for m in BASELINES
             if m in per_user and split in per_user[m] and per_user[m][split].recall.size}
    return max(means, key=lambda m: (means[m], -BASELINES.index(m))) if means else None


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of HIR with one baseline on one split.

    Args:
        split: the split.
        reference: ``best_baseline`` or ``content``.
        baseline: the baseline's method name.
        interval: HIR (``a``) vs the baseline (``b``), per-user Recall@K.
    """

    split: str
    reference: str
    baseline: str
    interval: PairedInterval


def paired_comparisons(per_user: PerUser, settings: EvaluationSettings, method: str = "hir") -> list[Comparison]:
    """HIR vs the best baseline on every split, and vs content-only on cold items, paired over users.

    The best baseline is chosen by its mean on the whole split (not again in each resample).

    Args:
        per_user: per method, per split, the per-user metrics (``method`` and the baselines).
        settings: resamples, confidence and seed of the bootstrap.
        method: the method compared.
    """
    out = []
    for split, mine in per_user.get(method, {}).items():
        refs = [(BEST_BASELINE, best_baseline(per_user, split))]
        if split == COLD and CONTENT in per_user:
            refs.append((CONTENT, CONTENT))
        for reference, baseline in refs:
            if baseline is None or split not in per_user[baseline]:
                continue
            theirs = per_user[baseline][split]
            if not np.array_equal(theirs.users, mine.users):
                raise ValueError(f"{method} and {baseline} were evaluated on different users of {split!r}")
            out.append(Comparison(split, reference, baseline, paired_bootstrap(
                mine.recall, theirs.recall, settings.bootstrap_samples, settings.confidence, settings.seed)))
    return out


def comparison_rows(comparisons: Sequence[Comparison], k: int, method: str = "hir") -> list[MetricRow]:
    """Metric rows of paired comparisons (the module docstring names them); undefined values (a ratio to a
    baseline whose mean is 0) are left out.

    Args:
        comparisons: from :func:`paired_comparisons`.
        k: cut-off.
        method: method name of the rows.
    """
    metric = f"recall_at_{k}"
    rows: list[MetricRow] = []
    for c in comparisons:
        iv, ref = c.interval, c.reference
        rows += [(method, c.split, f"{metric}_vs_{ref}", iv.ratio),
                 (method, c.split, f"{metric}_vs_{ref}_ci_low", iv.ratio_low),
                 (method, c.split, f"{metric}_vs_{ref}_ci_high", iv.ratio_high),
                 (method, c.split, f"{metric}_diff_vs_{ref}", iv.diff),
                 (method, c.split, f"{metric}_diff_vs_{ref}_ci_low", iv.diff_low),
                 (method, c.split, f"{metric}_diff_vs_{ref}_ci_high", iv.diff_high)]
    return [row for row in rows if math.isfinite(row[3])]


def target_ratios(rows: Sequence[MetricRow], k: int, method: str = "hir") -> list[MetricRow]:
    """The issue's target ratios: warm Recall@k over the best baseline's, cold Recall@k over content-only's.

    Args:
        rows: ranking rows of all methods.
        k: cut-off.
        method: the method compared (``hir``).
    """
    metric = f"recall_at_{k}"
    val = {(m, s): v for m, s, name, v in rows if name == metric}
    out: list[MetricRow] = []
    warm_base = [v for (m, s), v in val.items() if s == WARM and m in BASELINES and math.isfinite(v)]
    if (method, WARM) in val and warm_base and max(warm_base) > 0:
        out.append((method, WARM, f"{metric}_vs_best_baseline", val[(method, WARM)] / max(warm_base)))
    if (method, COLD) in val and val.get(("content", COLD), 0) > 0:
        out.append((method, COLD, f"{metric}_vs_content", val[(method, COLD)] / val[("content", COLD)]))
    return out


def align_levels(num_model_levels: int, truth_levels: Sequence[str]) -> dict[int, str]:
    """Pair model levels with planted levels from the finest up (model level ``L-1`` <-> finest truth).

    Args:
        num_model_levels: levels of the model (coarsest first).
        truth_levels: planted level columns, coarsest first (``level0, level1, level2``).
    """
    pairs = zip(range(num_model_levels - 1, -1, -1), reversed(list(truth_levels)), strict=False)
    return dict(sorted(pairs))


@dataclass(frozen=True)
class ClusterLevels:
    """A model's clusters of every node, per level (coarsest first), as :func:`clustering_rows` scores them.

    Args:
        assignments: per level, int ``[N]`` hard cluster of each node.
        level_sizes: prototypes per level.
        probs: per level float ``[N, K_l]`` cluster probabilities (adds ``mean_top_probability`` rows overall and
            per entity type), or ``None``.
        parent_maps: per level ``l >= 1`` the parent of each cluster at level ``l - 1`` (the published tree);
            ``None``: the majority parents of ``assignments`` (:func:`majority_parents`).
    """

    assignments: Sequence[np.ndarray]
    level_sizes: Sequence[int]
    probs: Sequence[np.ndarray] | None = None
    parent_maps: Sequence[np.ndarray] | None = None


def clustering_rows(
    entity_ids: Sequence[str],
    entity_types: Sequence[str],
    clusters: ClusterLevels,
    truth: Mapping[str, Mapping[str, int | None]] | None = None,
    truth_levels: Sequence[str] = ("level0", "level1", "level2"),
    method: str = "hir",
) -> list[MetricRow]:
    """Cluster usage, sharpness and tree agreement per level and, given the planted hierarchy, NMI per level
    (overall, for items, i.e. every type but users, and per entity type).

    Args:
        entity_ids: id of each node.
        entity_types: type of each node.
        clusters: the model's clusters per level.
        truth: ``entity_id -> {level column: label or None}`` (synthetic ground truth), or ``None``.
        truth_levels: planted level columns, coarsest first.
        method: method name of the rows.
    """
    assignments, level_sizes = clusters.assignments, clusters.level_sizes
    probs, parent_maps = clusters.probs, clusters.parent_maps
    rows: list[MetricRow] = []
    types = np.asarray(entity_types, dtype=object)
    groups = {"all": np.ones(len(types), dtype=bool), "item": types != "user",
              **{t: types == t for t in sorted(set(types))}}
    for lvl, (assign, size) in enumerate(zip(assignments, level_sizes, strict=True)):
        for metric, value in cluster_usage(np.asarray(assign), int(size)).items():
            rows.append((method, "all", f"{metric}_level_{lvl}", float(value)))
        if probs is not None:
            for group, mask in groups.items():
                if mask.any():
                    rows.append((method, group, f"mean_top_probability_level_{lvl}",
                                 mean_top_probability(np.asarray(probs[lvl])[mask])))
        if lvl >= 1:
            fine, coarse = np.asarray(assign), np.asarray(assignments[lvl - 1])
            parents = (majority_parents(fine, coarse, int(size)) if parent_maps is None
                       else np.asarray(parent_maps[lvl - 1]))
            rows.append((method, "all", f"parent_agreement_level_{lvl}", parent_agreement(fine, coarse, parents)))
    if not truth:
        return rows
    for lvl, column in align_levels(len(assignments), truth_levels).items():
        labels = np.array([(truth.get(e) or {}).get(column) for e in entity_ids], dtype=object)
        known = np.array([x is not None and not (isinstance(x, float) and math.isnan(x)) for x in labels])
        pred = np.asarray(assignments[lvl])
        for group, mask in groups.items():
            mask = mask & known
            if mask.sum() >= 2:
                rows.append((method, group, f"nmi_level_{lvl}", nmi(labels[mask].astype(np.int64), pred[mask])))
    return rows


def align_clusters(entity_ids: Sequence[str], assignments: Sequence[np.ndarray],
                   ids: Sequence[str]) -> list[np.ndarray]:
    """Per level, int cluster of each of ``ids`` (``-1`` for an id without a node).

    Args:
        entity_ids: id of each node, in ``assignments``' order.
        assignments: per level, int ``[N]`` hard cluster of each node.
        ids: the ids to look up (e.g. ``data.item_ids``).
    """
    pos = {e: i for i, e in enumerate(entity_ids)}
    rows = np.array([pos.get(e, -1) for e in ids], dtype=np.int64)
    return [np.where(rows >= 0, np.asarray(a, dtype=np.int64)[np.maximum(rows, 0)], -1) for a in assignments]


def hierarchical_rows(
    data: EvalData,
    users: np.ndarray,
    items: np.ndarray,
    item_clusters: Sequence[np.ndarray],
    k: int,
    settings: HierarchicalSettings | None = None,
    user_clusters: Sequence[np.ndarray] | None = None,
    method: str = "hir",
) -> list[MetricRow]:
    """Hierarchical retrieval against exact search on every split of ``data`` (the module docstring names the rows).

    Both rank the split's candidates the user did not engage with in training, by dot product
    (:mod:`hir_pipeline.retrieval`); the ratio is left out where exact search's mean recall is 0.

    Args:
        data: the evaluation data.
        users: float ``[U, d]`` user vectors, row ``u`` = ``data.user_ids[u]``.
        items: float ``[I, d]`` item vectors, row ``i`` = ``data.item_ids[i]``.
        item_clusters: per level (coarsest first), int ``[I]`` cluster of each item (``-1``: none;
            :func:`align_clusters`).
        k: cut-off.
        settings: routing level, clusters probed and candidate caps (default ``HierarchicalSettings()``; no
            super-graph here, so ``neighbours`` is not used).
        user_clusters: per level, int ``[U]`` each user's own cluster (probed first), or ``None``.
        method: method name of the rows.
    """
    settings = settings or HierarchicalSettings()
    level = settings.routing_level(len(item_clusters))
    own = None if user_clusters is None else np.asarray(user_clusters[level])
    shares: list[np.ndarray] = []
    probed: list[np.ndarray] = []

    index = None

    def hierarchical(batch: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        got = hierarchical_top_k(users[batch], items, index, k, settings, allowed=allowed,
                                 user_clusters=None if own is None else own[batch])
        shares.append(got.scored_share)
        probed.append(got.probed)
        return got.items

    def exact(batch: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return exact_top_k(users[batch], items, k, allowed).items

    rows: list[MetricRow] = []
    recall = f"recall_at_{k}"
    for split in data.splits:
        shares.clear()
        probed.clear()
        index = build_index(items, item_clusters, level, members=data.candidates[split])  # the split's catalogue
        hier = summarize(evaluate_rankings(hierarchical, data, k, splits=[split]), k)[split][recall]
        full = summarize(evaluate_rankings(exact, data, k, splits=[split]), k)[split][recall]
        if not shares or not math.isfinite(hier):
            continue
        rows += [(method, split, f"hierarchical_{recall}", hier),
                 (method, split, "hierarchical_scored_share", float(np.concatenate(shares).mean())),
                 (method, split, "hierarchical_clusters_probed", float(np.concatenate(probed).mean()))]
        if full > 0:
            rows.append((method, split, "hierarchical_recall_ratio", hier / full))
    return rows
