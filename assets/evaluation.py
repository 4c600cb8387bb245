"""Evaluation: does tonight's model recommend better than simple baselines, on held-out deep-funnel activity?

``evaluation_report`` draws the evaluation split from the bronze events (:mod:`spark_jobs.evaluation.split`:
per-user temporal hold-out, deep-funnel targets, a seeded share of cold items whose events never train),
rebuilds the graph and its views from the training events only (with the graph assets' settings: the shared
``graph_settings`` resource), trains HIR on it with the production settings (the ``model_meta.json`` of the
run date's training run when there is one, else the ``model_settings`` resource ``interest_model`` trains with),
and scores HIR (by the encoder those settings publish, ``published_encoder``: a training run that predates the
choice published the teacher) and the baselines (popularity, ALS, LightGCN, content-only, random) on the same
targets (:func:`spark_jobs.evaluation.run.evaluate_run`), with a mean-user diagnostic row (``hir_mean_user``) and
HIR's ratio to the best baseline with a paired bootstrap interval over users (the number of HIR seeds averaged is
``hir_seeds``, one by default). Results go to

* the Delta table ``evaluation_metrics`` (the run date's rows replaced on a re-run),
* MLflow metrics ``eval.<method>.<split>.<metric>`` plus the comparison table and plot, on the training run of
  the date (the published model the evaluation vouches for),
* the asset's metadata: comparison table, plot, target ratios, split facts.

The blocking ``promotion_gate`` check compares HIR's warm and cold Recall@K with the current champion's (the
published model, MLflow alias ``champion``) and tags the date's model version with its verdict (``hir.gate``). A
model that fails it is not published (publishing depends on this asset and checks the verdict), unless
``publish_despite_gate`` overrides it; publishing moves ``champion``.
"""

import datetime as dt
import shutil
from dataclasses import fields, replace

import dagster as dg
from pydantic import Field

from assets.evaluation_tracking import (
    GATE_FAILED,
    GATE_OVERRIDDEN,
    GATE_PASSED,
    NO_MODEL_VERSION,
    champion,
    evaluation_run,
    log_evaluation,
    production_configs,
    record_gate,
    training_run,
)
from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from hir_pipeline.evaluation.gate import promotion_gate
from hir_pipeline.evaluation.report import comparison_plot, comparison_table, png_markdown
from hir_pipeline.evaluation.runner import EvaluationSettings
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.settings import state_dir
from resources import (
    GraphSettingsResource,
    LakeResource,
    MLflowResource,
    ModelSettingsResource,
    SourceResource,
    SparkResource,
)
from resources.config_schema import config_class, section
from spark_jobs.delta_io import MissingInput, latest_version
from spark_jobs.evaluation.run import (
    EvaluationJobConfig,
    evaluate_run,
    read_evaluation_inputs,
    write_evaluation_metrics,
)
from spark_jobs.evaluation.split import COLD, WARM, SplitConfig
from spark_jobs.graph import GraphConfig

GROUP = "evaluation"
GATE_CHECK = "promotion_gate"
#: EvaluationSettings fields that follow others: the ALS grid maximises Recall@k at the evaluation's k, and one seed
#: seeds every baseline (``make_baselines``).
EVALUATION_SET_ELSEWHERE = ("als.k", "als.seed", "lightgcn.seed")

#: The split's settings; its funnel is the graph's (``graph_settings``), so it is checked once the asset has it.
SplitSection = config_class(SplitConfig, exclude=("funnel",), validate=False)


class EvaluationConfig(config_class(EvaluationSettings, exclude=EVALUATION_SET_ELSEWHERE, name="EvaluationFields")):
    """Run config of ``evaluation_report``: what is evaluated (the fields of ``EvaluationSettings``), how the split
    is drawn (``split``) and how the asset runs. The HIR settings are the ``model_settings`` resource's (or the
    run date's training run's), the funnel and stage weights the ``graph_settings`` resource's."""

    split: SplitSection = section(SplitSection)
    use_production_config: bool = Field(True, description="Train with the model/train config logged by the run "
                                        "date's interest_model run (model_meta.json) when there is one; else (or "
                                        "when off) with the model_settings resource.")
    epochs: int | None = Field(None, description="Override of the training epochs (None: as configured).")
    require_content: bool = Field(False, description="Fail when content_embeddings is missing (else HIR trains "
                                  "on structure alone and content-only is skipped).")
    keep_checkpoints: bool = Field(False, description="Keep the evaluation model's epoch checkpoints.")
    torch_threads: int = Field(0, description="torch intra-op threads while the evaluation trains and scores "
                               "(0: torch's default).")
    # -- promotion
    gate_tolerance: float = Field(0.05, description="The model passes the promotion gate (and may be published) "
                                  "when its warm and cold Recall@k are >= (1 - tolerance) x the champion's (1.0 always "
                                  "passes).")
    publish_despite_gate: bool = Field(False, description="Operator override: a model that fails the promotion gate "
                                       "is still published (its gate verdict is recorded as 'overridden').")


def evaluation_checkpoint_dir(day: dt.date) -> str:
    """``<HIR state dir>/checkpoints/evaluation/<run_date>`` (a re-run after a crash resumes from it)."""
    return str(state_dir() / "checkpoints" / "evaluation" / str(day))


def _known(cls: type, values: dict) -> dict:
    """The entries of a logged config that are fields of the dataclass ``cls`` (JSON lists back to tuples)."""
    names = {f.name for f in fields(cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names}


def hir_configs(config: EvaluationConfig, settings: ModelSettingsResource, graph: GraphConfig,
                logged: tuple[dict, dict] | None) -> tuple[ModelConfig, TrainConfig, str]:
    """The model and training settings of the evaluation model, and where they came from.

    Args:
        config: the asset's config (``use_production_config``, ``epochs``).
        settings: the ``model_settings`` resource (the fallback).
        graph: the graph settings the split's graph is built with (the model's ``max_dist`` follows them).
        logged: ``(model_config, train_config)`` dicts of the run date's training run, or ``None``.
    """
    if logged is not None and config.use_production_config:
        model_d, train_d = logged
        model_cfg = ModelConfig(**_known(ModelConfig, model_d))
        train_d = {"published_encoder": "teacher", **train_d}  # logged before the choice existed: the teacher
        train_cfg = TrainConfig(**{k: v for k, v in _known(TrainConfig, train_d).items() if k != "checkpoint_dir"})
        source = "training run of the date (model_meta.json)"
    else:
        model_cfg, train_cfg = settings.model_config_for(graph), settings.train_config()
        source = "model_settings resource"
    model_cfg = replace(model_cfg, max_dist=graph.max_dist)  # the split's views are built with the graph's
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
        GATE_CHECK, asset="evaluation_report", blocking=True,
        description="HIR's warm and cold Recall@k are within the tolerance of the champion's (the published model); "
                    "a model that fails is not published unless publish_despite_gate is set.")],
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
    model_settings: ModelSettingsResource,
):
    from mlflow import MlflowClient

    day = run_date(context)
    graph_cfg = graph_settings.graph_config()  # the graph assets' settings
    split_cfg = config.split.to_dataclass(funnel=graph_cfg.funnel)  # a target_stage off the funnel fails here
    session = spark.get_session()
    experiment_id = mlflow.activate()
    client = MlflowClient()
    train_run = training_run(client, experiment_id, str(day))
    model_version = train_run.data.tags["hir.model_version"] if train_run else NO_MODEL_VERSION
    model_cfg, train_cfg, cfg_source = hir_configs(
        config, model_settings, graph_cfg, production_configs(client, train_run) if train_run else None)
    context.log.info(f"Evaluating {day} for model version {model_version} ({train_cfg.published_encoder} "
                     f"published); HIR settings from {cfg_source}")

    try:
        bronze, content = read_evaluation_inputs(session, lake.path, day, config.require_content)
    except MissingInput as exc:
        raise dg.Failure(str(exc)) from exc
    truth = source.ground_truth(session)
    vocabularies = source.interest_vocabularies(session) if truth else None

    if config.torch_threads:  # oversubscribed cores slow sparse and attention kernels down a lot
        import torch

        torch.set_num_threads(config.torch_threads)
    ckpt = evaluation_checkpoint_dir(day)
    stages = spark_stages(context, session, "evaluation_report")
    with stages("evaluate"):
        outcome = evaluate_run(
            bronze, content, day, ckpt,
            EvaluationJobConfig(split=split_cfg, graph=graph_cfg, model=model_cfg, train=train_cfg,
                                evaluation=config.to_dataclass()),
            truth=truth, vocabularies=vocabularies, progress=context.log.info)

    rows = outcome.rows
    path = lake.path("evaluation_metrics")
    write_evaluation_metrics(session, path, day, model_version, rows)
    table_md = comparison_table(rows, config.k, note=outcome.split.note, confidence=config.confidence)
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
        "evaluation_seconds": round(stages.seconds["evaluate"], 1),
        "delta_version": latest_version(session, path),
        "path": dg.MetadataValue.path(path),
    })
    yield gate_check(client, mlflow.registered_model, model_version,
                {s: value.get(("hir", s, recall), float("nan")) for s in (WARM, COLD)}, recall, config.gate_tolerance,
                config.publish_despite_gate)


def gate_check(client, registered_model: str, version: str, candidate: dict[str, float], metric: str,
          tolerance: float, override: bool) -> dg.AssetCheckResult:
    """Run the promotion gate and record its verdict on the model version (publishing reads it)."""
    if version == NO_MODEL_VERSION:
        return dg.AssetCheckResult(check_name=GATE_CHECK, passed=True, metadata={
            "verdict": "none", "reason": "no registered model version for this run date: nothing to publish"})
    current = champion(client, registered_model, metric, (WARM, COLD))
    decision = promotion_gate(candidate, current[1] if current else None, tolerance)
    verdict = GATE_PASSED if decision.passed else GATE_OVERRIDDEN if override else GATE_FAILED
    reasons = [*decision.reasons, *(["overridden by publish_despite_gate"] if verdict == GATE_OVERRIDDEN else [])]
    record_gate(client, registered_model, version, verdict, reasons)
    return dg.AssetCheckResult(
        check_name=GATE_CHECK, passed=verdict != GATE_FAILED, severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "verdict": verdict,
            "candidate_version": version,
            "champion_version": current[0] if current else "none",
            "metric": metric,
            "tolerance": tolerance,
            "reasons": dg.MetadataValue.md("\n".join(f"- {r}" for r in reasons)),
            "candidate": dg.MetadataValue.json(decision.candidate),
            "champion": dg.MetadataValue.json(decision.champion or {}),
        })
