"""One evaluation run, without Dagster: split -> graph on the training events -> HIR fit -> every method.

:func:`evaluate_run` is what the ``evaluation_report`` asset (and ``hir evaluate``) call. It rebuilds the graph
and its views from the *training* events only (cold items keep their entity and catalogue relations but no
activity edge), trains HIR on it with the given (production) settings, and scores HIR and the baselines on the
same held-out targets.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame

from hir_pipeline.evaluation.data import EvalData
from hir_pipeline.evaluation.runner import (
    EvaluationSettings,
    MetricRow,
    clustering_rows,
    make_baselines,
    ranking_rows,
    target_ratios,
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
    nodes, edges, views = timed("train_graph", lambda: build_split_graph(
        entities, relations, split.train_events, run_date, graph_config))
    inputs = timed("model_inputs", lambda: load_model_inputs(
        nodes, views, content, edges, funnel=graph_config.funnel, engagement_weights=engagement_weights,
        provenance={"purpose": "evaluation", "run_date": str(run_date)}))
    return split, data, inputs


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
        settings: cut-off and baselines.
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

    fit = timed("hir_fit", lambda: fit_and_embed(inputs, model_config or ModelConfig(),
                                                 train_config or TrainConfig(), checkpoint_dir))
    entity_ids = [str(e) for e in inputs.entity_ids]
    hir = EmbeddingScorer.from_lookup(data, entity_ids, fit.inference.embeddings, "hir")
    item_content = collect_content(content, data.item_ids)
    scorers = [hir, *make_baselines(settings, item_content)]
    rows, method_seconds = ranking_rows(scorers, data, settings.k, progress=say)
    seconds.update({f"method_{m}": round(s, 2) for m, s in method_seconds.items()})
    rows += target_ratios(rows, settings.k)
    assignments = [np.argmax(p, axis=1) for p in fit.inference.probs]
    rows += clustering_rows(entity_ids, [str(t) for t in inputs.entity_types], assignments,
                            fit.model_cfg.level_sizes, truth, probs=fit.inference.probs,
                            parent_maps=fit.inference.parent_maps)
    details: dict[str, Any] = {"target_stage": split.target_stage, "split_note": split.note,
                               "users_per_stage": split.users_per_stage}
    for s in scorers:
        if getattr(s, "best", None):
            details[f"{s.name}_best"] = s.best
        if getattr(s, "losses", None):
            details[f"{s.name}_final_loss"] = s.losses[-1]
    return EvaluationOutcome(rows, split, summary, seconds, fit.final_metrics, details)
