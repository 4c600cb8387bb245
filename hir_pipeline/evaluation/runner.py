"""Run every method on one evaluation split and flatten the results into metric rows.

A metric row is ``(method, split, metric, value)``, the shape of the ``evaluation_metrics`` table (the
orchestration layer adds ``model_version`` and ``run_date``). Ranking rows have split ``warm`` / ``cold``;
clustering rows (HIR only) have split ``all``, ``item`` (every type but users) or an entity type, and metrics
``nmi_level_<l>``, ``clusters_used_level_<l>``, ``usage_perplexity_level_<l>``, ``largest_share_level_<l>``,
``mean_top_probability_level_<l>`` and ``parent_agreement_level_<l>`` (``l >= 1``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

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
from hir_pipeline.evaluation.data import COLD, WARM, EvalData
from hir_pipeline.evaluation.metrics import (
    cluster_usage,
    majority_parents,
    mean_top_probability,
    nmi,
    parent_agreement,
)
from hir_pipeline.evaluation.scoring import Scorer, evaluate_scorer

log = logging.getLogger(__name__)

#: ``(method, split, metric, value)``.
MetricRow = tuple[str, str, str, float]
BASELINES = ("popularity", "als", "lightgcn", "content")


@dataclass(frozen=True)
class EvaluationSettings:
    """What is evaluated and how.

    Args:
        k: ranking cut-off (Recall@k, NDCG@k).
        baselines: baselines to run, among ``popularity``, ``als``, ``lightgcn``, ``content``, ``random``.
        als: ALS grid.
        lightgcn: LightGCN settings.
        seed: seed of the random baseline.
    """

    k: int = 20
    baselines: tuple[str, ...] = BASELINES
    als: ALSConfig = field(default_factory=ALSConfig)
    lightgcn: LightGCNConfig = field(default_factory=LightGCNConfig)
    seed: int = 0


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
            out.append(ALSScorer(settings.als))
        elif name == "lightgcn":
            out.append(LightGCNScorer(settings.lightgcn))
        elif name == "content":
            if content is None or content.shape[1] == 0:
                log.warning("no content embeddings: the content-only baseline is skipped")
                continue
            out.append(ContentScorer(content))
        elif name == "random":
            out.append(RandomScorer(settings.seed))
        else:
            raise ValueError(f"unknown baseline {name!r}; known: {', '.join((*BASELINES, 'random'))}")
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
    rows: list[MetricRow] = []
    seconds: dict[str, float] = {}
    for scorer in scorers:
        t0 = time.perf_counter()
        got = evaluate_scorer(scorer.fit(data), data, k)
        seconds[scorer.name] = time.perf_counter() - t0
        for split, metrics in got.items():
            rows += [(scorer.name, split, metric, float(value)) for metric, value in metrics.items()]
        if progress is not None:
            summary = ", ".join(f"{s} recall@{k} {m[f'recall_at_{k}']:.4f}" for s, m in got.items())
            progress(f"{scorer.name}: {summary} ({seconds[scorer.name]:.1f}s)")
    return rows, seconds


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


def clustering_rows(
    entity_ids: Sequence[str],
    entity_types: Sequence[str],
    assignments: Sequence[np.ndarray],
    level_sizes: Sequence[int],
    truth: Mapping[str, Mapping[str, int | None]] | None = None,
    truth_levels: Sequence[str] = ("level0", "level1", "level2"),
    method: str = "hir",
    probs: Sequence[np.ndarray] | None = None,
    parent_maps: Sequence[np.ndarray] | None = None,
) -> list[MetricRow]:
    """Cluster usage, sharpness and tree agreement per level and, given the planted hierarchy, NMI per level
    (overall, for items, i.e. every type but users, and per entity type).

    Args:
        entity_ids: id of each node.
        entity_types: type of each node.
        assignments: per model level (coarsest first), int ``[N]`` hard cluster of each node.
        level_sizes: prototypes per model level.
        truth: ``entity_id -> {level column: label or None}`` (synthetic ground truth), or ``None``.
        truth_levels: planted level columns, coarsest first.
        method: method name of the rows.
        probs: per model level float ``[N, K_l]`` cluster probabilities (adds ``mean_top_probability`` rows
            overall and per entity type), or ``None``.
        parent_maps: per level ``l >= 1`` the parent of each cluster at level ``l - 1`` (the published tree);
            ``None``: the majority parents of ``assignments`` (:func:`majority_parents`).
    """
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
