"""One evaluation run, without Dagster: split -> graph on the training events -> HIR fit -> every method.

:func:`evaluate_run` is what the ``evaluation_report`` asset (and ``hir evaluate``) call. It rebuilds the graph
and its views from the *training* events only (cold items keep their entity and catalogue relations but no
activity edge), trains HIR on it with the given (production) settings, and scores HIR and the baselines on the
same held-out targets. :func:`read_evaluation_inputs` reads what it needs from the lake and
:func:`write_evaluation_metrics` replaces the run date's rows of ``evaluation_metrics``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVALUATION_METRICS_DDL
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
from hir_pipeline.timing import Stages
from spark_jobs.delta_io import MissingInput, read_table, replace_run_date, table_exists
from spark_jobs.evaluation_data import collect_content, collect_eval_data
from spark_jobs.evaluation_split import EvaluationSplit, SplitConfig, split_events
from spark_jobs.graph import GraphConfig, GraphSnapshot, build_edges, build_nodes, build_views
from spark_jobs.model_inputs import load_model_inputs

log = logging.getLogger(__name__)

#: The bronze tables the split and the training graph are drawn from.
BRONZE_TABLES = ("entities", "relations", "events")
CONTENT_TABLE = "content_embeddings"


@dataclass(frozen=True)
class EvaluationJobConfig:
    """Every setting of one evaluation run, each read from its one place (the production settings).

    Args:
        split: how the split is drawn; its funnel is the graph's.
        graph: settings of the graph built from the training events; its stage weights also weigh the events
            of the baselines' training matrix.
        model: HIR model settings; its ``max_dist`` is the graph's.
        train: HIR training settings (its ``engagement_weights`` align with the graph's funnel).
        evaluation: cut-off and baselines.
    """

    split: SplitConfig = field(default_factory=SplitConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)

    def __post_init__(self) -> None:
        if tuple(self.split.funnel) != tuple(self.graph.funnel):
            raise ValueError(f"the split's funnel {self.split.funnel} is not the graph's {self.graph.funnel}")
        if self.model.max_dist != self.graph.max_dist:
            raise ValueError(f"model max_dist {self.model.max_dist} is not the graph's {self.graph.max_dist}")


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


def prepare_evaluation(
    bronze: Mapping[str, DataFrame],
    content: DataFrame | None,
    run_date: dt.date,
    config: EvaluationJobConfig,
    stages: Stages | None = None,
    say: Callable[[str], None] = log.info,
) -> tuple[EvaluationSplit, EvalData, Any]:
    """The split, its evaluation data and HIR's training inputs (graph and views of the training events only).

    Args:
        bronze, content, run_date: as in :func:`evaluate_run`.
        config: the run's settings (the split, the graph, and the training's engagement weights are used here).
        stages: times each step (None: untimed).
        say: called with one line per fact worth reporting.

    Returns:
        ``(split, data, inputs)``; ``inputs`` is a :class:`hir_pipeline.training.inputs.ModelInputs`.
    """
    stages = stages or Stages()
    events, graph = bronze["events"], config.graph
    split = stages.run("split", lambda: split_events(events, run_date, config.split))
    split.train_events = split.train_events.localCheckpoint()
    say(f"evaluation split: {split.note}")
    data = stages.run("collect_pairs", lambda: collect_eval_data(split, events, run_date, graph.funnel,
                                                                 graph.stage_weights))
    say(f"evaluation data: {_summary(data)}")
    nodes, edges, views = stages.run("train_graph", lambda: build_split_graph(
        bronze["entities"], bronze["relations"], split.train_events, run_date, graph))
    inputs = stages.run("model_inputs", lambda: load_model_inputs(
        GraphSnapshot(run_date, nodes, edges, views), content, funnel=graph.funnel,
        engagement_weights=config.train.engagement_weights,
        provenance={"purpose": "evaluation", "run_date": str(run_date)}))
    return split, data, inputs


def evaluate_run(
    bronze: Mapping[str, DataFrame],
    content: DataFrame | None,
    run_date: dt.date,
    checkpoint_dir: str | Path,
    config: EvaluationJobConfig | None = None,
    *,
    truth: dict[str, dict[str, int | None]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvaluationOutcome:
    """Split, train HIR on the training part, and evaluate HIR and the baselines on the held-out targets.

    Args:
        bronze: the bronze ``entities``, ``relations`` and ``events`` (:func:`read_evaluation_inputs`).
        content: the ``content_embeddings`` snapshot (fused ``embedding`` column), or ``None``.
        run_date: the run date.
        checkpoint_dir: folder of the evaluation model's epoch checkpoints (a re-run resumes from them).
        config: the split, graph, HIR and evaluation settings (default: the library defaults).
        truth: the planted hierarchy (synthetic source) for NMI, or ``None``.
        progress: called with one line per step (e.g. ``context.log.info``).
    """
    say = progress or log.info
    config = config or EvaluationJobConfig()
    settings = config.evaluation
    stages = Stages(say=say, label="evaluation: ")
    split, data, inputs = prepare_evaluation(bronze, content, run_date, config, stages, say)
    summary = _summary(data)

    from hir_pipeline.training.fit import fit_and_embed

    fit = stages.run("hir_fit", lambda: fit_and_embed(inputs, config.model, config.train, checkpoint_dir))
    entity_ids = [str(e) for e in inputs.entity_ids]
    hir = EmbeddingScorer.from_lookup(data, entity_ids, fit.inference.embeddings, "hir")
    item_content = collect_content(content, data.item_ids)
    scorers = [hir, *make_baselines(settings, item_content)]
    rows, method_seconds = ranking_rows(scorers, data, settings.k, progress=say)
    seconds = {**stages.seconds, **{f"method_{m}": s for m, s in method_seconds.items()}}
    rows += target_ratios(rows, settings.k)
    assignments = [np.argmax(p, axis=1) for p in fit.inference.probs]
    rows += clustering_rows(entity_ids, [str(t) for t in inputs.entity_types], assignments,
                            fit.model_cfg.level_sizes, truth)
    details: dict[str, Any] = {"target_stage": split.target_stage, "split_note": split.note,
                               "users_per_stage": split.users_per_stage}
    for s in scorers:
        if getattr(s, "best", None):
            details[f"{s.name}_best"] = s.best
        if getattr(s, "losses", None):
            details[f"{s.name}_final_loss"] = s.losses[-1]
    return EvaluationOutcome(rows, split, summary, seconds, fit.final_metrics, details)


def read_evaluation_inputs(spark: SparkSession, path: Callable[[str], str], day: dt.date,
                           require_content: bool = False) -> tuple[dict[str, DataFrame], DataFrame | None]:
    """The bronze tables and the content snapshot an evaluation of ``day`` reads.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        day: the run date (a content table with a ``run_date`` column is filtered to it; one without is the
            current snapshot, read whole).
        require_content: a missing ``content_embeddings`` table is an error (else the content is ``None``).

    Returns:
        ``({table: rows} for entities, relations and events, content rows or None)``.

    Raises:
        MissingInput: ``content_embeddings`` does not exist and ``require_content`` is set.
    """
    bronze = {t: read_table(spark, path(t)) for t in BRONZE_TABLES}
    content = None
    if table_exists(spark, path(CONTENT_TABLE)):
        content = read_table(spark, path(CONTENT_TABLE))
        if "run_date" in content.columns:
            content = content.where(F.col("run_date") == F.lit(day))
    elif require_content:
        raise MissingInput(f"{CONTENT_TABLE} does not exist: materialize it for {day} first")
    return bronze, content


def write_evaluation_metrics(spark: SparkSession, path: str, day: dt.date, model_version: str,
                             rows: Sequence[MetricRow]) -> None:
    """Replace the ``day`` rows of ``evaluation_metrics`` with ``rows`` (one Delta commit).

    Args:
        spark: the session.
        path: the table's path.
        day: the run date.
        model_version: the model version the evaluation vouches for.
        rows: ``(method, split, metric, value)`` rows (:attr:`EvaluationOutcome.rows`).
    """
    frame = spark.createDataFrame([(model_version, day, m, s, name, float(v)) for m, s, name, v in rows],
                                  EVALUATION_METRICS_DDL)
    replace_run_date(frame, path, day)
