"""Evaluation: does tonight's model recommend better than simple baselines, on held-out deep-funnel activity?

``evaluation_report`` draws the evaluation split from the bronze events (:mod:`spark_jobs.evaluation_split`:
per-user temporal hold-out, deep-funnel targets, a seeded share of cold items whose events never train),
rebuilds the graph and its views from the training events only (with the graph assets' settings: the shared
``graph_settings`` resource), trains HIR on it with the production settings
(the ``model_meta.json`` of the run date's training run when there is one, else this asset's ``training``
config), and scores HIR (by the encoder those settings publish, ``published_encoder``: a training run that
predates the choice published the teacher) and the baselines (popularity, ALS, LightGCN, content-only, random)
on the same targets (:func:`spark_jobs.evaluation.evaluate_run`), with a mean-user diagnostic row
(``hir_mean_user``) and HIR's ratio to the best baseline with a paired bootstrap interval over users (the number
of HIR seeds averaged is ``EvaluationSettings.hir_seeds``, one by default). Results go to

* the Delta table ``evaluation_metrics`` (the run date's rows replaced on a re-run),
* MLflow metrics ``eval.<method>.<split>.<metric>`` plus the comparison table and plot, on the training run of
  the date (the published model the evaluation vouches for),
* the asset's metadata: comparison table, plot, target ratios, split facts.

The ``promotion_gate`` check (non-blocking) compares HIR's warm and cold Recall@K with the current champion's
and, when they are within ``gate_tolerance``, moves the MLflow alias ``champion`` to the date's model version.
"""

import datetime as dt
import shutil
import time
from dataclasses import fields, replace

import dagster as dg
from pydantic import Field
from pyspark.sql import functions as F

from assets.evaluation_tracking import (
    NO_MODEL_VERSION,
    champion,
    evaluation_run,
    log_evaluation,
    production_configs,
    promote,
    training_run,
)
from assets.model import TrainingConfig, forward_training_logs
from assets.partitions import daily_partitions, run_date
from hir_pipeline.contracts import EVALUATION_METRICS_DDL
from hir_pipeline.evaluation.baselines import ALSConfig, LightGCNConfig
from hir_pipeline.evaluation.gate import promotion_gate
from hir_pipeline.evaluation.report import comparison_plot, comparison_table, png_markdown
from hir_pipeline.evaluation.runner import BASELINES, EvaluationSettings
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.settings import state_dir
from resources import GraphSettingsResource, LakeResource, MLflowResource, SourceResource, SparkResource
from spark_jobs.delta_io import latest_version, read_table, replace_where, table_exists
from spark_jobs.evaluation import evaluate_run
from spark_jobs.evaluation_data import DEFAULT_STAGE_WEIGHTS, read_ground_truth
from spark_jobs.evaluation_split import COLD, WARM, SplitConfig

GROUP = "evaluation"
GATE_CHECK = "promotion_gate"
_A, _L = ALSConfig(), LightGCNConfig()


class EvaluationConfig(dg.Config):
    """Run config of ``evaluation_report``."""

    # -- split
    holdout_fraction: float = Field(0.2, description="Share of each user's latest events held out.")
    cold_item_fraction: float = Field(0.1, description="Share of items whose events are all withheld from training.")
    target_stage: str | None = Field(None, description="Funnel stage a target must reach (default: the deepest).")
    min_target_users: int = Field(50, description="Fewest users with a target at a stage before falling back one "
                                  "stage shallower (the fallback is reported).")
    split_seed: int = Field(0, description="Seed of the cold-item choice.")
    # -- metrics and baselines
    k: int = Field(20, description="Ranking cut-off of Recall@k and NDCG@k.")
    baselines: list[str] = Field(list(BASELINES), description="Baselines to run: popularity, als, lightgcn, "
                                 "content (and random).")
    stage_weights: list[float] = Field(list(DEFAULT_STAGE_WEIGHTS), description="Weight of one event per funnel "
                                       "stage in the baselines' user x item training matrix.")
    als_factors: list[int] = Field(list(_A.factors), description="ALS grid: latent dimensions.")
    als_regularization: list[float] = Field(list(_A.regularization), description="ALS grid: L2 weights.")
    als_alpha: list[float] = Field(list(_A.alpha), description="ALS grid: confidence scales.")
    als_iterations: int = Field(_A.iterations, description="ALS sweeps per fit.")
    lightgcn_dim: int = Field(_L.embedding_dim, description="LightGCN embedding width.")
    lightgcn_layers: int = Field(_L.num_layers, description="LightGCN propagation layers.")
    lightgcn_epochs: int = Field(_L.epochs, description="LightGCN passes over the training pairs.")
    lightgcn_lr: float = Field(_L.lr, description="LightGCN Adam learning rate.")
    seed: int = Field(0, description="Seed of the baselines (ALS init, LightGCN, validation split).")
    # -- the HIR model trained on the split
    training: TrainingConfig = Field(TrainingConfig(), description="HIR settings used when the run date has no "
                                     "training run to copy them from (or use_production_config is off).")
    use_production_config: bool = Field(True, description="Train with the model/train config logged by the run "
                                        "date's interest_model run (model_meta.json) when there is one.")
    epochs: int | None = Field(None, description="Override of the training epochs (None: as configured).")
    require_content: bool = Field(False, description="Fail when content_embeddings is missing (else HIR trains "
                                  "on structure alone and content-only is skipped).")
    keep_checkpoints: bool = Field(False, description="Keep the evaluation model's epoch checkpoints.")
    # -- promotion
    gate_tolerance: float = Field(0.05, description="The model becomes champion when its warm and cold Recall@k "
                                  "are >= (1 - tolerance) x the champion's (1.0 always promotes).")

    def split_config(self, funnel: tuple[str, ...]) -> SplitConfig:
        """The split over ``funnel`` (the ``graph_settings`` resource's, so targets and graph share stages)."""
        return SplitConfig(holdout_fraction=self.holdout_fraction, cold_item_fraction=self.cold_item_fraction,
                           funnel=tuple(funnel), target_stage=self.target_stage,
                           min_target_users=self.min_target_users, seed=self.split_seed)

    def settings(self) -> EvaluationSettings:
        als = ALSConfig(factors=tuple(self.als_factors), regularization=tuple(self.als_regularization),
                        alpha=tuple(self.als_alpha), iterations=self.als_iterations, k=self.k, seed=self.seed)
        lgcn = LightGCNConfig(embedding_dim=self.lightgcn_dim, num_layers=self.lightgcn_layers,
                              epochs=self.lightgcn_epochs, lr=self.lightgcn_lr, seed=self.seed)
        return EvaluationSettings(k=self.k, baselines=tuple(self.baselines), als=als, lightgcn=lgcn, seed=self.seed)


def evaluation_checkpoint_dir(day: dt.date) -> str:
    """``<HIR state dir>/checkpoints/evaluation/<run_date>`` (a re-run after a crash resumes from it)."""
    return str(state_dir() / "checkpoints" / "evaluation" / str(day))


def hir_configs(config: EvaluationConfig, logged: tuple[dict, dict] | None) -> tuple[ModelConfig, TrainConfig, str]:
    """The model and training settings of the evaluation model, and where they came from."""
    if logged is not None and config.use_production_config:
        model_d, train_d = logged
        known_m, known_t = {f.name for f in fields(ModelConfig)}, {f.name for f in fields(TrainConfig)}
        model_cfg = ModelConfig(**{k: tuple(v) if k == "level_sizes" else v
                                   for k, v in model_d.items() if k in known_m})
        train_d = {"published_encoder": "teacher", **train_d}  # logged before the choice existed: the teacher
        train_cfg = TrainConfig(**{k: v for k, v in train_d.items() if k in known_t and k != "checkpoint_dir"})
        source = "training run of the date (model_meta.json)"
    else:
        model_cfg, train_cfg = config.training.to_model_config(), config.training.to_train_config()
        source = "evaluation_report config"
    if config.epochs is not None:
        train_cfg = replace(train_cfg, epochs=config.epochs)
        source += f", epochs overridden to {config.epochs}"
    return model_cfg, train_cfg, source


@dg.asset(
    name="evaluation_report",
    group_name=GROUP,
    deps=[dg.AssetKey(k) for k in ("interest_model", "events", "entities", "relations", "content_embeddings")],
    partitions_def=daily_partitions,
    compute_kind="pytorch",
    check_specs=[dg.AssetCheckSpec(
        GATE_CHECK, asset="evaluation_report", blocking=False,
        description="HIR's warm and cold Recall@k are within the tolerance of the champion's; when they are, the "
                    "run date's model version gets the MLflow alias 'champion'.")],
    description="HIR vs popularity / ALS / LightGCN / content-only on a temporal, deep-funnel, cold-start split: "
                "Delta evaluation_metrics, MLflow metrics on the training run, comparison table and plot.",
)
def evaluation_report(
    context: dg.AssetExecutionContext,
    config: EvaluationConfig,
    spark: SparkResource,
    lake: LakeResource,
    mlflow: MLflowResource,
    source: SourceResource,
    graph_settings: GraphSettingsResource,
):
    from mlflow import MlflowClient

    day = run_date(context)
    graph_cfg = graph_settings.graph_config()  # the graph assets' settings: a bad value fails before any work
    session = spark.get_session()
    experiment_id = mlflow.activate()
    client = MlflowClient()
    train_run = training_run(client, experiment_id, str(day))
    model_version = train_run.data.tags["hir.model_version"] if train_run else NO_MODEL_VERSION
    model_cfg, train_cfg, cfg_source = hir_configs(
        config, production_configs(client, train_run) if train_run else None)
    context.log.info(f"Evaluating {day} for model version {model_version} ({train_cfg.published_encoder} "
                     f"published); HIR settings from {cfg_source}")

    bronze = {t: read_table(session, lake.path(t)) for t in ("entities", "relations", "events")}
    content = None
    if table_exists(session, lake.path("content_embeddings")):
        content = read_table(session, lake.path("content_embeddings"))
        if "run_date" in content.columns:
            content = content.where(F.col("run_date") == F.lit(day))
    elif config.require_content:
        raise dg.Failure(f"content_embeddings does not exist: materialize it for {day} first")
    truth = read_ground_truth(session, source.prepare(session)) if source.name != "movielens" else None

    if config.training.torch_threads:  # oversubscribed cores slow sparse/attention kernels by 10x or more
        import torch

        torch.set_num_threads(config.training.torch_threads)
    ckpt = evaluation_checkpoint_dir(day)
    settings = config.settings()
    t0 = time.perf_counter()
    with forward_training_logs(context), forward_training_logs(context, "hir_pipeline.evaluation"):
        outcome = evaluate_run(
            bronze["entities"], bronze["relations"], bronze["events"], content, day, ckpt,
            split_config=config.split_config(graph_cfg.funnel), graph_config=graph_cfg, model_config=model_cfg,
            train_config=train_cfg, engagement_weights=config.training.engagement_weights,
            settings=settings, stage_weights=config.stage_weights, truth=truth,
            progress=context.log.info)
    total_s = time.perf_counter() - t0

    rows = outcome.rows
    path = lake.path("evaluation_metrics")
    frame = session.createDataFrame([(model_version, day, m, s, name, float(v)) for m, s, name, v in rows],
                                    EVALUATION_METRICS_DDL)
    replace_where(frame, path, f"run_date = '{day}'", ["run_date"])
    table_md = comparison_table(rows, config.k, note=outcome.split.note, confidence=settings.confidence)
    plot = comparison_plot(rows, config.k)
    details = {**outcome.details, "data": outcome.data_summary, "seconds": outcome.seconds,
               "hir_fit": outcome.fit_metrics, "hir_settings_from": cfg_source, "model_version": model_version,
               "hir_published_encoder": train_cfg.published_encoder}
    run = train_run or evaluation_run(client, experiment_id, str(day))
    n_logged = log_evaluation(client, run.info.run_id, rows, table_md, plot, details,
                              int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp() * 1000))
    client.set_tag(run.info.run_id, "hir.evaluation.target_stage", outcome.split.target_stage)
    context.log.info(f"evaluation of {day}:\n{table_md}")

    if not config.keep_checkpoints:
        shutil.rmtree(ckpt, ignore_errors=True)
    value = {(m, s, name): v for m, s, name, v in rows}
    recall = f"recall_at_{config.k}"
    yield dg.MaterializeResult(metadata={
        "dagster/row_count": len(rows),
        "run_date": str(day),
        "model_version": model_version,
        "comparison": dg.MetadataValue.md(table_md),
        "plot": dg.MetadataValue.md(png_markdown(plot)),
        "target_stage": outcome.split.target_stage,
        "split_note": outcome.split.note,
        **{f"hir_{s}_{recall}": value.get(("hir", s, recall), float("nan")) for s in (WARM, COLD)},
        **{f"{s}_{name}": v for (m, s, name), v in value.items() if m == "hir" and "_vs_" in name},
        "data": dg.MetadataValue.json(outcome.data_summary),
        "details": dg.MetadataValue.json({k: v for k, v in details.items() if k != "data"}),
        "mlflow_run_id": run.info.run_id,
        "mlflow_metrics_logged": n_logged,
        "evaluation_seconds": round(total_s, 1),
        "delta_version": latest_version(session, path),
        "path": dg.MetadataValue.path(path),
    })
    yield _gate(client, mlflow.registered_model, model_version,
                {s: value.get(("hir", s, recall), float("nan")) for s in (WARM, COLD)}, recall, config.gate_tolerance)


def _gate(client, registered_model: str, version: str, candidate: dict[str, float], metric: str,
          tolerance: float) -> dg.AssetCheckResult:
    """Run the promotion gate and move the ``champion`` alias when it passes."""
    if version == NO_MODEL_VERSION:
        return dg.AssetCheckResult(check_name=GATE_CHECK, passed=True, metadata={
            "promoted": False, "reason": "no registered model version for this run date: nothing to promote"})
    current = champion(client, registered_model, metric, (WARM, COLD))
    decision = promotion_gate(candidate, current[1] if current else None, tolerance)
    if decision.passed:
        promote(client, registered_model, version)
    return dg.AssetCheckResult(
        check_name=GATE_CHECK, passed=decision.passed, severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "promoted": decision.passed,
            "candidate_version": version,
            "champion_version": current[0] if current else "none",
            "metric": metric,
            "tolerance": tolerance,
            "reasons": dg.MetadataValue.md("\n".join(f"- {r}" for r in decision.reasons)),
            "candidate": dg.MetadataValue.json(decision.candidate),
            "champion": dg.MetadataValue.json(decision.champion or {}),
        })
