"""One evaluation run, without Dagster: split -> graph on the training events -> HIR fit -> every method.

:func:`evaluate_run` is what the ``evaluation_report`` asset (and ``hir evaluate``) call. It rebuilds the graph
and its views from the *training* events only (cold items keep their entity and catalogue relations but no
activity edge), trains HIR on it with the given (production) settings, and scores HIR and the baselines on the
same held-out targets.

:func:`prepare_validation` carves the inner validation split out of the training part (the split ALS tunes its
grid on, :func:`~hir_pipeline.evaluation.data.validation_split`) and rebuilds HIR's inputs without the held-out
pairs, so that HIR's settings are chosen without looking at the reported targets
(``benchmarks/hir_ablations.py --split validation``).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from hir_pipeline.evaluation.data import VALIDATION, WARM, EvalData, validation_split
from hir_pipeline.evaluation.runner import (
    Comparison,
    EvaluationSettings,
    MetricRow,
    PerUser,
    average_over_seeds,
    clustering_rows,
    comparison_rows,
    make_baselines,
    metric_rows,
    paired_comparisons,
    ranking_results,
)
from hir_pipeline.evaluation.scoring import EmbeddingScorer
from hir_pipeline.model.config import ModelConfig, TrainConfig
from spark_jobs.evaluation_data import DEFAULT_STAGE_WEIGHTS, collect_content, collect_eval_data
from spark_jobs.evaluation_split import EvaluationSplit, SplitConfig, split_events
from spark_jobs.graph import GraphConfig, build_edges, build_nodes, build_views
from spark_jobs.model_inputs import load_model_inputs

log = logging.getLogger(__name__)


@dataclass
class EvaluationOutcome:
    """Args:
    rows: ``(method, split, metric, value)`` metric rows of HIR and every baseline.
    split: the split that was evaluated (its ``note`` says which target stage was used).
    data_summary: users, items, training pairs and targets per split.
    seconds: wall time of each step / method.
    fit_metrics: the HIR fit's last-epoch metrics.
    details: method-specific facts (ALS grid, LightGCN losses, ...).
    """

    rows: list[MetricRow]
    split: EvaluationSplit
    data_summary: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    fit_metrics: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def build_split_graph(entities: DataFrame, relations: DataFrame, train_events: DataFrame, run_date: dt.date,
                      config: GraphConfig) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``(nodes, edges, views)`` of the graph of the training events, each checkpointed once.

    Args:
        entities: bronze entities (every entity stays a node, cold items included).
        relations: bronze relations.
        train_events: the split's training events.
        run_date: the run date (decay is counted to it).
        config: graph settings (the production ones).
    """
    edges = build_edges(entities, relations, train_events, run_date, config).localCheckpoint()
    nodes = build_nodes(entities, edges, run_date, config).localCheckpoint()
    views = build_views(nodes, edges, run_date, config).localCheckpoint()
    return nodes, edges, views


def _summary(data: EvalData) -> dict[str, Any]:
    return {
        "users": data.n_users, "items": data.n_items, "train_pairs": int(data.train.nnz),
        **{f"{s}_targets": int(t.nnz) for s, t in data.targets.items()},
        **{f"{s}_users": int((t.getnnz(axis=1) > 0).sum()) for s, t in data.targets.items()},
        **{f"{s}_candidates": int(c.sum()) for s, c in data.candidates.items()},
    }


def _comparison_details(c: Comparison) -> dict[str, Any]:
    """A comparison as JSON-safe details (an undefined ratio becomes ``None``)."""
    interval = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(c.interval).items()}
    return {"split": c.split, "reference": c.reference, "baseline": c.baseline, **interval}


def _untimed(name: str, fn: Callable[[], Any]) -> Any:
    return fn()


def prepare_evaluation(
    entities: DataFrame,
    relations: DataFrame,
    events: DataFrame,
    content: DataFrame | None,
    run_date: dt.date,
    split_config: SplitConfig,
    graph_config: GraphConfig,
    engagement_weights: Sequence[float] | None = None,
    stage_weights: Sequence[float] = DEFAULT_STAGE_WEIGHTS,
    timed: Callable[[str, Callable[[], Any]], Any] = _untimed,
    say: Callable[[str], None] = log.info,
) -> tuple[EvaluationSplit, EvalData, Any]:
    """The split, its evaluation data and HIR's training inputs (graph and views of the training events only).

    Args:
        entities, relations, events, content, run_date: as in :func:`evaluate_run`.
        split_config: the split.
        graph_config: graph settings of the training graph.
        engagement_weights: engagement weight per funnel stage of HIR's InfoNCE.
        stage_weights: weight of one event per stage in the baselines' training matrix.
        timed: ``timed(step_name, fn)`` runs a step (and may time and report it).
        say: called with one line per fact worth reporting.

    Returns:
        ``(split, data, inputs)``; ``inputs`` is a :class:`hir_pipeline.training.inputs.ModelInputs`.
    """
    split = timed("split", lambda: split_events(events, run_date, split_config))
    split.train_events = split.train_events.localCheckpoint()
    say(f"evaluation split: {split.note}")
    data = timed("collect_pairs", lambda: collect_eval_data(split, events, run_date, graph_config.funnel,
                                                            stage_weights))
    say(f"evaluation data: {_summary(data)}")
    inputs = training_inputs(entities, relations, split.train_events, content, run_date, graph_config,
                             engagement_weights, "evaluation", timed)
    return split, data, inputs


def training_inputs(
    entities: DataFrame,
    relations: DataFrame,
    train_events: DataFrame,
    content: DataFrame | None,
    run_date: dt.date,
    graph_config: GraphConfig,
    engagement_weights: Sequence[float] | None = None,
    purpose: str = "evaluation",
    timed: Callable[[str, Callable[[], Any]], Any] = _untimed,
) -> Any:
    """HIR's training inputs from the graph and views of ``train_events`` only (a ``ModelInputs``).

    Args:
        entities, relations, content, run_date: as in :func:`evaluate_run`.
        train_events: the events HIR may learn from.
        graph_config: graph settings of the training graph.
        engagement_weights: engagement weight per funnel stage of HIR's InfoNCE.
        purpose: recorded in the inputs' provenance.
        timed: ``timed(step_name, fn)`` runs a step (and may time and report it).
    """
    nodes, edges, views = timed("train_graph", lambda: build_split_graph(
        entities, relations, train_events, run_date, graph_config))
    return timed("model_inputs", lambda: load_model_inputs(
        nodes, views, content, edges, funnel=graph_config.funnel, engagement_weights=engagement_weights,
        provenance={"purpose": purpose, "run_date": str(run_date)}))


def held_out_pairs(data: EvalData, inner: EvalData) -> list[tuple[str, str]]:
    """``(user_id, entity_id)`` of the training pairs of ``data`` that ``inner`` no longer trains on.

    Args:
        data: the evaluation data.
        inner: data carved from it by :func:`~hir_pipeline.evaluation.data.validation_split`.
    """
    gone = (data.train.astype(bool).astype(np.int8) - inner.train.astype(bool).astype(np.int8)).tocoo()
    keep = gone.data > 0
    return [(data.user_ids[u], data.item_ids[i]) for u, i in zip(gone.row[keep], gone.col[keep], strict=True)]


def prepare_validation(
    entities: DataFrame,
    relations: DataFrame,
    split: EvaluationSplit,
    data: EvalData,
    content: DataFrame | None,
    run_date: dt.date,
    graph_config: GraphConfig,
    fraction: float,
    seed: int,
    cold_fraction: float,
    engagement_weights: Sequence[float] | None = None,
    timed: Callable[[str, Callable[[], Any]], Any] = _untimed,
) -> tuple[EvalData, Any]:
    """The inner validation split of the training part and HIR's inputs rebuilt without its held-out pairs.

    The split is :func:`~hir_pipeline.evaluation.data.validation_split` (the one ALS's grid search draws: pass
    its ``validation_fraction`` and ``seed``) with ``cold_fraction`` of the items made cold; every training
    event of a held-out pair (warm validation or cold) is dropped before the graph is rebuilt, so HIR never
    trains on a validation target.

    Args:
        entities, relations, content, run_date: as in :func:`evaluate_run`.
        split: the outer split (its ``train_events``).
        data: the outer split's evaluation data (its ``train`` is what the inner split is carved from).
        graph_config: graph settings of the training graph.
        fraction: share of each user's training pairs held out as warm validation targets.
        seed: seed of the inner split.
        cold_fraction: share of the items still trained on that become cold validation items.
        engagement_weights: engagement weight per funnel stage of HIR's InfoNCE.
        timed: ``timed(step_name, fn)`` runs a step (and may time and report it).

    Returns:
        ``(inner, inputs)``: the inner data with splits ``warm`` (the validation pairs) and ``cold``, and HIR's
        inputs of the remaining training events.
    """
    inner = validation_split(data, fraction, seed, cold_fraction).renamed({VALIDATION: WARM})
    pairs = held_out_pairs(data, inner)
    session = split.train_events.sparkSession
    gone = session.createDataFrame(pairs, "user_id string, entity_id string")
    train_events = split.train_events.join(F.broadcast(gone), ["user_id", "entity_id"], "left_anti")
    inputs = training_inputs(entities, relations, train_events, content, run_date, graph_config,
                             engagement_weights, "validation", timed)
    return inner, inputs


def evaluate_run(
    entities: DataFrame,
    relations: DataFrame,
    events: DataFrame,
    content: DataFrame | None,
    run_date: dt.date,
    checkpoint_dir: str | Path,
    *,
    split_config: SplitConfig | None = None,
    graph_config: GraphConfig | None = None,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    engagement_weights: Sequence[float] | None = None,
    settings: EvaluationSettings | None = None,
    stage_weights: Sequence[float] = DEFAULT_STAGE_WEIGHTS,
    truth: dict[str, dict[str, int | None]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvaluationOutcome:
    """Split, train HIR on the training part, and evaluate HIR and the baselines on the held-out targets.

    HIR is trained ``settings.hir_seeds`` times (training seeds ``train_config.seed``, ``+ 1``, ...; the first is
    the production model, whose clusters are scored) and its rows are each user's metrics averaged over the
    seeds; ``hir_mean_user`` scores HIR's items against the mean user vector (a global prior, no
    personalisation); HIR's comparison rows carry paired bootstrap intervals over users
    (:func:`hir_pipeline.evaluation.runner.comparison_rows`).

    Args:
        entities: bronze entities.
        relations: bronze relations.
        events: bronze events.
        content: the ``content_embeddings`` snapshot (fused ``embedding`` column), or ``None``.
        run_date: the run date.
        checkpoint_dir: folder of the evaluation model's epoch checkpoints (a re-run resumes from them).
        split_config: the split (hold-out share, cold share, target stage, seed).
        graph_config: graph settings for the training graph (production defaults).
        model_config: HIR model settings (production).
        train_config: HIR training settings (production).
        engagement_weights: engagement weight per funnel stage of HIR's InfoNCE (``load_model_inputs`` default
            when ``None``).
        settings: cut-off, baselines, HIR seeds and the bootstrap of the intervals.
        stage_weights: weight of one event per stage in the baselines' training matrix.
        truth: the planted hierarchy (synthetic source) for NMI, or ``None``.
        progress: called with one line per step (e.g. ``context.log.info``).
    """
    say = progress or log.info
    split_config = split_config or SplitConfig()
    graph_config = graph_config or GraphConfig(funnel=split_config.funnel)
    settings = settings or EvaluationSettings()
    seconds: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        say(f"evaluation: {name} ...")
        t0 = time.perf_counter()
        out = fn()
        seconds[name] = round(time.perf_counter() - t0, 2)
        say(f"evaluation: {name} done in {seconds[name]:.1f}s")
        return out

    split, data, inputs = prepare_evaluation(
        entities, relations, events, content, run_date, split_config, graph_config, engagement_weights,
        stage_weights, timed, say)
    summary = _summary(data)

    from hir_pipeline.training.fit import fit_and_embed

    model_config, train_config = model_config or ModelConfig(), train_config or TrainConfig()
    entity_ids = [str(e) for e in inputs.entity_ids]
    seeds = [train_config.seed + i for i in range(settings.hir_seeds)]
    runs: list[PerUser] = []
    fit = None
    for i, seed in enumerate(seeds):
        # the first seed is the production one and keeps the checkpoint folder a re-run resumes from
        ckpt = Path(checkpoint_dir) if i == 0 else Path(checkpoint_dir) / f"seed_{seed}"
        cfg = replace(train_config, seed=seed)
        got = timed("hir_fit" if i == 0 else f"hir_fit_seed_{seed}",
                    lambda cfg=cfg, ckpt=ckpt: fit_and_embed(inputs, model_config, cfg, ckpt))
        fit = fit or got
        hir = EmbeddingScorer.from_lookup(data, entity_ids, got.inference.embeddings, "hir")
        scored = ranking_results([hir, hir.mean_user()], data, settings.k, progress=say)
        seconds.update({f"method_{m}" + (f"_seed_{seed}" if i else ""): round(v, 2)
                        for m, v in scored.seconds.items()})
        runs.append(scored.per_user)
    assert fit is not None
    per_user: PerUser = {m: average_over_seeds([r[m] for r in runs]) for m in runs[0]}
    rows: list[MetricRow] = [row for m, got in per_user.items() for row in metric_rows(m, got, settings.k)]
    recall = f"recall_at_{settings.k}"
    by_seed = {seed: {s: float(v.recall.mean()) for s, v in r["hir"].items()} for seed, r in zip(seeds, runs,
                                                                                                 strict=True)}
    if len(seeds) > 1:
        rows += [("hir", s, f"{recall}_seed_std", float(np.std([by_seed[x][s] for x in seeds], ddof=1)))
                 for s in per_user["hir"]]
    item_content = collect_content(content, data.item_ids)
    scorers = make_baselines(settings, item_content)
    baselines = ranking_results(scorers, data, settings.k, progress=say)
    seconds.update({f"method_{m}": round(v, 2) for m, v in baselines.seconds.items()})
    rows += baselines.rows
    per_user.update(baselines.per_user)
    comparisons = paired_comparisons(per_user, settings)
    rows += comparison_rows(comparisons, settings.k)
    assignments = [np.argmax(p, axis=1) for p in fit.inference.probs]
    rows += clustering_rows(entity_ids, [str(t) for t in inputs.entity_types], assignments,
                            fit.model_cfg.level_sizes, truth)
    details: dict[str, Any] = {"target_stage": split.target_stage, "split_note": split.note,
                               "users_per_stage": split.users_per_stage,
                               "hir_seeds": {str(seed): {s: round(v, 4) for s, v in got.items()}
                                             for seed, got in by_seed.items()},
                               "comparisons": [_comparison_details(c) for c in comparisons]}
    for s in scorers:
        if getattr(s, "best", None):
            details[f"{s.name}_best"] = s.best
        if getattr(s, "losses", None):
            details[f"{s.name}_final_loss"] = s.losses[-1]
    return EvaluationOutcome(rows, split, summary, seconds, fit.final_metrics, details)
