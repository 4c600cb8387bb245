"""One evaluation run, without Dagster: split -> graph on the training events -> HIR fit -> every method.

:func:`evaluate_run` is what the ``evaluation_report`` asset (and ``hir evaluate``) call. It rebuilds the graph
and its views from the *training* events only (cold items keep their entity and catalogue relations but no
activity edge), trains HIR on it with the given (production) settings, and scores HIR and the baselines on the
same held-out targets. :func:`read_evaluation_inputs` reads what it needs from the lake and
:func:`write_evaluation_metrics` replaces the run date's rows of ``evaluation_metrics``.

:func:`inner_split` applies the split's own rules to its training events: the baselines' grids tune on that
inner split, and :func:`prepare_validation` also rebuilds HIR's inputs from its training events, so that HIR's
settings are chosen on the same question as the reported one without looking at the reported targets
(``benchmarks/hir_ablations.py --split validation``).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import EVALUATION_METRICS_DDL
from hir_pipeline.evaluation.data import VALIDATION, WARM, EvalData
from hir_pipeline.evaluation.label_purity import InterestVocabulary, label_purity, label_purity_rows
from hir_pipeline.evaluation.runner import (
    ClusterLevels,
    Comparison,
    EvaluationSettings,
    MetricRow,
    PerUser,
    align_clusters,
    align_levels,
    average_over_seeds,
    clustering_rows,
    comparison_rows,
    hierarchical_rows,
    make_baselines,
    metric_rows,
    paired_comparisons,
    ranking_results,
)
from hir_pipeline.evaluation.scoring import EmbeddingScorer
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.model.tree import majority_parents
from hir_pipeline.publish.labels import ancestor_chains, count_level_terms, level_labels
from hir_pipeline.timing import Stages
from spark_jobs.delta_io import MissingInput, read_table, replace_run_date, table_exists
from spark_jobs.evaluation.data import collect_entity_content, collect_eval_data
from spark_jobs.evaluation.split import EvaluationSplit, SplitConfig, split_events
from spark_jobs.graph import GraphConfig, GraphSnapshot, build_edges, build_nodes, build_views
from spark_jobs.model.inputs import load_model_inputs
from spark_jobs.publish.transform import PublishSettings, entity_terms

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


def _comparison_details(c: Comparison) -> dict[str, Any]:
    """A comparison as JSON-safe details (an undefined ratio becomes ``None``)."""
    interval = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(c.interval).items()}
    return {"split": c.split, "reference": c.reference, "baseline": c.baseline, **interval}


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
    _, tuning = stages.run("tuning_split", lambda: inner_split(bronze, split, run_date, config))
    data.tuning = tuning.only(WARM, VALIDATION)
    say(f"evaluation data: {_summary(data)}; baselines tune on {_summary(data.tuning)}")
    inputs = training_inputs(bronze, split.train_events, content, run_date, config, "evaluation", stages)
    return split, data, inputs


def training_inputs(
    bronze: Mapping[str, DataFrame],
    train_events: DataFrame,
    content: DataFrame | None,
    run_date: dt.date,
    config: EvaluationJobConfig,
    purpose: str = "evaluation",
    stages: Stages | None = None,
) -> Any:
    """HIR's training inputs from the graph and views of ``train_events`` only (a ``ModelInputs``).

    Args:
        bronze, content, run_date: as in :func:`evaluate_run` (the bronze ``events`` are not read).
        train_events: the events HIR may learn from.
        config: the run's settings (its graph settings and the training's engagement weights are used here).
        purpose: recorded in the inputs' provenance.
        stages: times each step (None: untimed).
    """
    stages = stages or Stages()
    graph = config.graph
    nodes, edges, views = stages.run("train_graph", lambda: build_split_graph(
        bronze["entities"], bronze["relations"], train_events, run_date, graph))
    return stages.run("model_inputs", lambda: load_model_inputs(
        GraphSnapshot(run_date, nodes, edges, views), content, funnel=graph.funnel,
        engagement_weights=config.train.engagement_weights,
        provenance={"purpose": purpose, "run_date": str(run_date)}))


def inner_split(bronze: Mapping[str, DataFrame], split: EvaluationSplit, run_date: dt.date,
                config: EvaluationJobConfig) -> tuple[EvaluationSplit, EvalData]:
    """The split's own rules (``config.split``: temporal per-user hold-out, deep-funnel targets, cold items)
    applied to its training events: the inner split that settings are chosen on, so that validation asks the
    question the reported split asks, one step earlier in time.

    Args:
        bronze: the bronze tables (their ``events`` define the item universe, as in the outer split).
        split: the outer split (its ``train_events``).
        run_date, config: as in :func:`evaluate_run`.

    Returns:
        ``(inner, data)``: the inner split (its ``train_events`` checkpointed) and its evaluation data, splits
        ``warm`` and ``cold``.
    """
    graph = config.graph
    inner = split_events(split.train_events, run_date, config.split)
    inner.train_events = inner.train_events.localCheckpoint()
    return inner, collect_eval_data(inner, bronze["events"], run_date, graph.funnel, graph.stage_weights)


def prepare_validation(
    bronze: Mapping[str, DataFrame],
    split: EvaluationSplit,
    content: DataFrame | None,
    run_date: dt.date,
    config: EvaluationJobConfig,
    stages: Stages | None = None,
) -> tuple[EvalData, Any]:
    """The inner validation split of the training part (:func:`inner_split`) and HIR's inputs of its training
    events, so that HIR's settings are chosen without looking at the reported targets.

    The baselines tune on the same rules one level further in (the inner data's ``tuning``), as they do on the
    reported split.

    Args:
        bronze, content, run_date: as in :func:`evaluate_run`.
        split: the outer split (its ``train_events``).
        config: the run's settings.
        stages: times each step (None: untimed).

    Returns:
        ``(inner, inputs)``: the inner data with splits ``warm`` (the validation targets) and ``cold``, and HIR's
        inputs of the inner training events (no event of a held-out pair, none on a new cold item).
    """
    stages = stages or Stages()
    inner, data = stages.run("validation_split", lambda: inner_split(bronze, split, run_date, config))
    _, tuning = stages.run("tuning_split", lambda: inner_split(bronze, inner, run_date, config))
    data.tuning = tuning.only(WARM, VALIDATION)
    inputs = training_inputs(bronze, inner.train_events, content, run_date, config, "validation", stages)
    return data, inputs


def evaluate_run(
    bronze: Mapping[str, DataFrame],
    content: DataFrame | None,
    run_date: dt.date,
    checkpoint_dir: str | Path,
    config: EvaluationJobConfig | None = None,
    *,
    truth: dict[str, dict[str, int | None]] | None = None,
    vocabularies: Mapping[int, InterestVocabulary] | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvaluationOutcome:
    """Split, train HIR on the training part, and evaluate HIR and the baselines on the held-out targets.

    HIR is trained ``config.evaluation.hir_seeds`` times (training seeds ``config.train.seed``, ``+ 1``, ...; the
    first is the production model, whose clusters are scored) and its rows are each user's metrics averaged over
    the seeds; ``hir_mean_user`` scores HIR's items against the mean user vector (a global prior, no
    personalisation); the production model's ``hierarchical_*`` rows measure coarse-to-fine retrieval through its
    own clusters against exact search (:func:`hir_pipeline.evaluation.runner.hierarchical_rows`); HIR's comparison
    rows carry paired bootstrap intervals over users (:func:`hir_pipeline.evaluation.runner.comparison_rows`).

    Args:
        bronze: the bronze ``entities``, ``relations`` and ``events`` (:func:`read_evaluation_inputs`).
        content: the ``content_embeddings`` snapshot (fused ``embedding`` column), or ``None``.
        run_date: the run date.
        checkpoint_dir: folder of the evaluation model's epoch checkpoints (a re-run resumes from them).
        config: the split, graph, HIR and evaluation settings (default: the library defaults).
        truth: the planted hierarchy (synthetic source) for NMI, or ``None``.
        vocabularies: planted fine interest -> its vocabulary (synthetic source), for the label purity rows
            (:func:`label_purity_level_rows`; only with ``truth``), or ``None``.
        progress: called with one line per step (e.g. ``context.log.info``).
    """
    say = progress or log.info
    config = config or EvaluationJobConfig()
    settings = config.evaluation
    stages = Stages(say=say, label="evaluation: ")
    seconds = stages.seconds
    split, data, inputs = prepare_evaluation(bronze, content, run_date, config, stages, say)
    summary = _summary(data)

    from hir_pipeline.training.fit import fit_and_embed

    model_config, train_config = config.model, config.train
    entity_ids = [str(e) for e in inputs.entity_ids]
    seeds = [train_config.seed + i for i in range(settings.hir_seeds)]
    runs: list[PerUser] = []
    fit = first = None
    for i, seed in enumerate(seeds):
        # the first seed is the production one and keeps the checkpoint folder a re-run resumes from
        ckpt = Path(checkpoint_dir) if i == 0 else Path(checkpoint_dir) / f"seed_{seed}"
        cfg = replace(train_config, seed=seed)
        got = stages.run("hir_fit" if i == 0 else f"hir_fit_seed_{seed}",
                         lambda cfg=cfg, ckpt=ckpt: fit_and_embed(inputs, model_config, cfg, ckpt))
        fit = fit or got
        hir = EmbeddingScorer.from_lookup(data, entity_ids, got.inference.embeddings, "hir")
        first = first or hir
        scored = ranking_results([hir, hir.mean_user()], data, settings.k, progress=say)
        seconds.update({f"method_{m}" + (f"_seed_{seed}" if i else ""): round(v, 2)
                        for m, v in scored.seconds.items()})
        runs.append(scored.per_user)
    assert fit is not None and first is not None
    per_user: PerUser = {m: average_over_seeds([r[m] for r in runs]) for m in runs[0]}
    rows: list[MetricRow] = [row for m, got in per_user.items() for row in metric_rows(m, got, settings.k)]
    recall = f"recall_at_{settings.k}"
    by_seed = {seed: {s: float(v.recall.mean()) for s, v in r["hir"].items()} for seed, r in zip(seeds, runs,
                                                                                                 strict=True)}
    if len(seeds) > 1:
        rows += [("hir", s, f"{recall}_seed_std", float(np.std([by_seed[x][s] for x in seeds], ddof=1)))
                 for s in per_user["hir"]]
    item_content = collect_entity_content(content, data.item_ids)
    scorers = make_baselines(settings, item_content)
    baselines = ranking_results(scorers, data, settings.k, progress=say)
    seconds.update({f"method_{m}": round(v, 2) for m, v in baselines.seconds.items()})
    rows += baselines.rows
    per_user.update(baselines.per_user)
    comparisons = paired_comparisons(per_user, settings)
    rows += comparison_rows(comparisons, settings.k)
    assignments = [np.argmax(p, axis=1) for p in fit.inference.probs]
    clusters = ClusterLevels(assignments, fit.model_cfg.level_sizes, probs=fit.inference.probs,
                             parent_maps=fit.inference.parent_maps)
    rows += clustering_rows(entity_ids, [str(t) for t in inputs.entity_types], clusters, truth)
    # the production model's items retrieved coarse to fine through its own clusters, against exact search
    rows += stages.run("hierarchical_retrieval", lambda: hierarchical_rows(
        data, first.users, first.items, align_clusters(entity_ids, assignments, data.item_ids), settings.k,
        settings.hierarchical, align_clusters(entity_ids, assignments, data.user_ids)))
    if truth and vocabularies:
        rows += label_purity_level_rows(bronze["entities"], entity_ids, clusters, truth, vocabularies)
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


def label_purity_level_rows(
    entities: DataFrame,
    entity_ids: Sequence[str],
    clusters: ClusterLevels,
    truth: Mapping[str, Mapping[str, int | None]],
    vocabularies: Mapping[int, InterestVocabulary],
    settings: PublishSettings | None = None,
) -> list[MetricRow]:
    """Label purity rows (:mod:`hir_pipeline.evaluation.label_purity`) of the model level paired with the finest
    planted level (``level2``): its clusters labelled as a publication labels them (the same terms, the same
    label settings and comparison sets, distinct among its siblings under the model's tree).

    Args:
        entities: bronze entities (``entity_id, entity_type, title, description, attributes``).
        entity_ids: id of each node, in ``clusters``' order.
        clusters: the model's clusters per level.
        truth: ``entity_id -> {"level2": fine interest, ...}``.
        vocabularies: fine interest -> its vocabulary.
        settings: the label settings (default: a default publication's).
    """
    settings = settings or PublishSettings()
    paired = [lvl for lvl, column in align_levels(len(clusters.assignments), ("level0", "level1", "level2")).items()
              if column == "level2"]
    if not paired:
        return []
    level = paired[0]
    terms: dict[str, set[str]] = {}
    types: dict[str, str] = {}
    for entity, entity_type, term in entity_terms(entities, settings.label_entity_types).toLocalIterator():
        terms.setdefault(entity, set()).add(term)
        types[entity] = entity_type
    index = {e: i for i, e in enumerate(entity_ids)}
    assign = np.asarray(clusters.assignments[level])
    members = {e: int(assign[index[e]]) for e in terms if e in index}
    parents: list[dict[int, int | None]] = [{}]
    for lvl in range(1, level + 1):  # the model's tree above the level: comparison sets and siblings
        up = (np.asarray(clusters.parent_maps[lvl - 1]) if clusters.parent_maps is not None
              else majority_parents(np.asarray(clusters.assignments[lvl]), np.asarray(clusters.assignments[lvl - 1]),
                                    int(clusters.level_sizes[lvl])))
        parents.append({c: int(p) for c, p in enumerate(up)})
    chains = ancestor_chains(parents, level, set(members.values()))
    labels = level_labels(count_level_terms(terms, members, chains, types, settings.label_comparison), chains,
                          settings.label_terms)
    fine = {e: (truth.get(e) or {}).get("level2") for e in members}
    return label_purity_rows(label_purity(labels, members, fine, vocabularies), vocabularies, level)


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
