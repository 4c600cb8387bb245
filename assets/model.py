"""Model: train the hierarchical interest model on the run date's graph, track it in MLflow, write its outputs.

``interest_model`` reads the run date's ``graph_nodes`` / ``graph_edges`` / ``graph_views`` snapshot and the
current ``content_embeddings`` snapshot (each at an explicit Delta version, logged to MLflow; the content table
holds one current snapshot, so an old date re-run reads today's vectors), collects them to the driver
(:mod:`spark_jobs.model.inputs`), trains with :func:`hir_pipeline.training.fit.fit_and_embed` (CUDA + bf16 when
present, else CPU), logs the published encoder to MLflow (``published_encoder``: the student by default, or the EMA
teacher; the same network embeds the nodes), checks its outputs in memory (blocking asset checks of
:mod:`hir_pipeline.training.output_checks`: finite unit-norm embeddings, several clusters per level, no collapsed
space) and only when they pass writes

* ``model_outputs`` - one row per node: L2-normalised embedding, top-1 cluster and its probability per level;
* ``model_hierarchy`` - one row per prototype, with its parent cluster;

replacing the run date's rows (Delta ``replaceWhere``), and then registers the model: a registered version always
has checked outputs in the lake. A model that fails a check is neither written nor registered (its MLflow run is
tagged ``hir.rejected``) and the failed blocking check keeps evaluation and publishing from running on it.
Publishing turns these tables into the contract tables.

Crash safety: every epoch ends with a checkpoint in ``<HIR state dir>/checkpoints/<run_date>/``; materializing
the date again resumes from it (same fingerprint of inputs and settings only) and continues the same MLflow run.
``time_budget_s`` uses the same path on purpose: a run that must give its machine back stops after an epoch
and the next materialization finishes the training. The checkpoints are deleted once the model is registered
and the tables are written (unless ``keep_checkpoints``).

Data parallel: with ``processes > 1`` in the training settings the ranks train through Spark's ``TorchDistributor``
(:mod:`spark_jobs.model.distributor`; where they run: ``distributor_mode``), then the asset embeds with rank 0's
final checkpoint as above. Their epochs reach MLflow once all ranks have finished; ``time_budget_s`` stops every
rank after the same epoch (the slowest rank's time decides) and the asset fails as in one process.
"""

import datetime as dt
import shutil
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from assets.model_tracking import (
    TAG_RUN_DATE,
    epoch_metrics,
    flat_params,
    log_input_tables,
    log_model,
    next_model_version,
    output_cluster_stats,
    register_model,
    remember_run,
    resumable_run_id,
)
from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from hir_pipeline.settings import state_dir
from hir_pipeline.training.output_checks import CHECK_NAMES, CheckOutcome, OutputCheckConfig, check_outputs
from resources import GraphSettingsResource, LakeResource, MLflowResource, ModelSettingsResource, SparkResource
from resources.config_schema import config_class, section
from resources.model_settings import TrainSection
from spark_jobs.delta_io import MissingInput
from spark_jobs.graph import GraphSnapshot
from spark_jobs.model.distributor import torch_distributor_launch
from spark_jobs.model.inputs import CONTENT_TABLE, GRAPH_TABLES, load_model_inputs, read_model_tables
from spark_jobs.model.outputs import (
    model_hierarchy_frame,
    model_outputs_frame,
    relabel_model_version,
    write_model_outputs,
)

GROUP = "model"
OutputChecksSection = config_class(OutputCheckConfig)
CHECK_DESCRIPTIONS = {
    CHECK_NAMES[0]: "Every published embedding is finite and L2-normalised.",
    CHECK_NAMES[1]: "Every level's top-1 cluster assignments use more than one cluster.",
    CHECK_NAMES[2]: "The embedding space is not collapsed (mean cosine between nodes and effective rank).",
}

class TrainingConfig(dg.Config):
    """Run config of ``interest_model``: how the asset runs. The model and training settings are the
    ``model_settings`` resource (shared with the evaluation), the funnel and ``max_dist`` the ``graph_settings``
    resource (shared with the graph the model reads)."""

    require_content: bool = Field(True, description="Fail when content_embeddings has no rows; False trains on "
                                  "structure alone.")
    torch_threads: int = Field(0, description="torch intra-op threads (0: torch's default).")
    time_budget_s: float | None = Field(None, description="Stop after the epoch during which this many seconds "
                                        "of training have passed; the asset fails and the next run resumes. "
                                        "With processes > 1 every rank stops after the same epoch.")
    distributor_mode: Literal["auto", "local", "cluster"] = Field(
        "auto", description="With processes > 1: where TorchDistributor runs the ranks. auto: torchrun processes on "
        "the driver machine under a local Spark master (local, local[N]), one barrier task per rank on the "
        "executors under any other master; local / cluster force one. On a cluster the checkpoint folder (HIR "
        "state dir) must be storage the driver and the executors share.")
    keep_checkpoints: bool = Field(False, description="Keep the epoch checkpoints after a successful run.")
    progress_every_s: float = Field(10.0, description="Interval of the Spark progress lines in the run log while "
                                    "the graph is collected to the driver.")
    output_checks: OutputChecksSection = section(
        OutputChecksSection, "Thresholds of the blocking checks run on the trained model's outputs before they are "
        "written and the model is registered.")


def checkpoint_dir(day: dt.date) -> Path:
    """``<HIR state dir>/checkpoints/<run_date>``."""
    return state_dir() / "checkpoints" / str(day)


def require_rows(inputs, versions: dict[str, int], day: dt.date, require_content: bool) -> None:
    """Fail clearly when the run date's graph (or content) is missing, instead of training on nothing."""
    missing = []
    if inputs.num_nodes == 0:
        missing.append("graph_nodes")
    if not inputs.broad_views:
        missing.append("graph_views")
    if require_content and not inputs.has_content.any():
        missing.append(CONTENT_TABLE)
    if missing:
        raise dg.Failure(f"no rows for run date {day} in {', '.join(missing)} (Delta versions {versions}): "
                         f"materialize {', '.join(missing)} for {day} first")


def _mlflow_link(mlflow_res: MLflowResource, experiment_id: str, run_id: str) -> dg.MetadataValue:
    uri = mlflow_res.tracking_uri
    if uri.startswith(("http://", "https://")):
        return dg.MetadataValue.url(f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}")
    return dg.MetadataValue.text(f"runs:/{run_id} in {uri}")


@dg.asset(
    name="interest_model",
    group_name=GROUP,
    deps=[dg.AssetKey(t) for t in (*GRAPH_TABLES, CONTENT_TABLE)],
    partitions_def=daily_partitions,
    compute_kind="pytorch",
    check_specs=[dg.AssetCheckSpec(name, asset="interest_model", blocking=True, description=text)
                 for name, text in CHECK_DESCRIPTIONS.items()],
    description="Trains the hierarchical graph transformer on the run date's graph, checks its outputs, writes "
                "model_outputs (one row per node) and model_hierarchy (one row per prototype) and registers it in "
                "MLflow; a model whose outputs fail a check is neither written nor registered.",
)
def interest_model(
    context: dg.AssetExecutionContext,
    config: TrainingConfig,
    spark: SparkResource,
    lake: LakeResource,
    mlflow: MLflowResource,
    graph_settings: GraphSettingsResource,
    model_settings: ModelSettingsResource,
):
    import mlflow as mlf
    import torch

    from hir_pipeline.training.fit import fit_and_embed, resolve_model_config, run_fingerprint
    from hir_pipeline.training.trainer import TrainingStopped

    day = run_date(context)
    graph_cfg, train_cfg = graph_settings.graph_config(), model_settings.train_config()
    session = spark.get_session()
    stages = spark_stages(context, session, "interest_model", config.progress_every_s)
    with stages("collect inputs"):
        try:
            frames = read_model_tables(session, lake.path, day, config.require_content)
        except MissingInput as exc:
            raise dg.Failure(str(exc)) from exc
        versions = {table: version for table, (_, _, version) in frames.items()}
        context.log.info(f"Reading inputs of {day} at Delta versions {versions}")
        content = frames.get(CONTENT_TABLE, (None,))[0]
        graph = GraphSnapshot(day, frames["graph_nodes"][0], frames["graph_edges"][0], frames["graph_views"][0])
        inputs = load_model_inputs(
            graph, content, funnel=graph_cfg.funnel, engagement_weights=train_cfg.engagement_weights,
            provenance={"delta_versions": versions}, progress=context.log.info,
        )
    collect_s = stages.seconds["collect inputs"]
    require_rows(inputs, versions, day, config.require_content)
    summary = inputs.summary()
    context.log.info(f"Collected the graph in {collect_s:.1f}s: {summary}")

    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    model_cfg = resolve_model_config(model_settings.model_config_for(graph_cfg), inputs)
    fingerprint = run_fingerprint(inputs, model_cfg, train_cfg)
    ckpt = checkpoint_dir(day)
    experiment_id = mlflow.activate()
    resume_id = resumable_run_id(ckpt, fingerprint)
    context.log.info(f"{'Resuming MLflow run ' + resume_id if resume_id else 'New MLflow run'}; checkpoints in "
                     f"{ckpt}")

    with mlf.start_run(run_id=resume_id, experiment_id=experiment_id, run_name=f"interest_model {day}") as run:
        run_id = run.info.run_id
        remember_run(ckpt, fingerprint, run_id)
        mlf.set_tags({TAG_RUN_DATE: str(day), "hir.fingerprint": fingerprint, "hir.dagster_run_id": context.run.run_id,
                      **{f"hir.input.{t}.delta_version": str(v) for t, v in versions.items()}})
        mlf.log_params({**flat_params("model", vars(model_cfg)),
                        **flat_params("train", {f: getattr(train_cfg, f) for f in TrainSection.core_fields
                                                if f != "device"}),
                        **flat_params("inputs", summary),
                        "inputs.funnel": str(list(graph_cfg.funnel))})
        if resume_id is None:
            log_input_tables(frames, day, {
                "graph_nodes": inputs.num_nodes, "graph_views": summary["num_broad_views"] + summary[
                    "num_narrow_views"], "graph_edges": summary["num_engagement_pairs"],
                CONTENT_TABLE: summary["nodes_with_content"]})

        trained = []  # epochs trained by this materialization (the others came from a checkpoint)

        def on_epoch_end(epoch: int, metrics: dict) -> None:
            mlf.log_metrics(epoch_metrics(metrics), step=epoch)
            trained.append(epoch)
            elapsed = stages.elapsed("train")
            planned = int(metrics.get("planned_epochs", train_cfg.epochs))  # fewer under a schedule budget
            left = planned - epoch - 1
            context.log.info(f"epoch {epoch + 1}/{planned} done: loss {metrics['loss']:.4f}"
                             + (f", ~{elapsed / len(trained) * left:.0f}s to go" if left else ""))

        with stages("train"):
            try:
                result = fit_and_embed(inputs, model_cfg, train_cfg, ckpt, on_epoch_end=on_epoch_end,
                                       fingerprint=fingerprint, time_budget_s=config.time_budget_s,
                                       launch=torch_distributor_launch(session, config.distributor_mode))
            except TrainingStopped as stop:
                raise dg.Failure(
                    f"time budget of {config.time_budget_s}s spent after epoch {stop.epochs_done}/{stop.planned}; "
                    f"checkpoint kept in {ckpt}: materialize {day} again to resume",
                    metadata={"epochs_done": stop.epochs_done, "checkpoint_dir": str(ckpt)},
                ) from stop
        mlf.set_tags({"hir.device": result.device, "hir.bf16": str(result.bf16)})
        if resume_id is None and result.resumed_epochs:  # checkpoints of a run this store does not know
            for metrics in result.history[:result.resumed_epochs]:
                mlf.log_metrics(epoch_metrics(metrics), step=int(metrics["epoch"]))
        stats = output_cluster_stats(result)
        train_time = float(sum(h["epoch_time_s"] for h in result.history))
        mlf.log_metrics({**stats, "train_time_s": train_time, "infer_time_s": result.infer_time_s,
                         "collect_inputs_s": collect_s})
        res = result.inference
        checks = check_outputs(res.embeddings, res.probs, config.output_checks.to_dataclass(), res.encoder_embeddings)
        mlf.log_metrics(check_metrics(checks))
        passed = all(c.passed for c in checks)
        model_uri = log_model(result, day)
        if passed:
            # write, then register: a registered version always has checked outputs in the lake
            model_version = next_model_version(mlflow.registered_model)
            outputs = model_outputs_frame(session, inputs.entity_ids, inputs.entity_types, res.embeddings, res.probs,
                                          res.has_view, model_version, day)
            hierarchy = model_hierarchy_frame(session, result.prototypes, res.parent_maps, model_version, day)
            out_versions = write_model_outputs(session, lake.path, day, outputs, hierarchy)
            registered = register_model(model_uri, mlflow.registered_model, day, fingerprint,
                                        result.train_cfg.published_encoder)
            if registered != model_version:  # another registration took the number meanwhile
                out_versions = relabel_model_version(session, lake.path, day, model_version, registered)
                model_version = registered
            mlf.set_tags({f"hir.output.{t}.delta_version": str(v) for t, v in out_versions.items()})
            context.log.info(f"Registered the {result.train_cfg.published_encoder} as model version {model_version} "
                             f"after writing {inputs.num_nodes:,} model_outputs and "
                             f"{sum(result.model_cfg.level_sizes):,} model_hierarchy rows for run date {day} at Delta "
                             f"versions {out_versions}")
        else:
            model_version, out_versions = "none", {}
            failed = "; ".join(f"{c.name}: {c.details}" for c in checks if not c.passed)
            mlf.set_tag("hir.rejected", failed[:5000])
            context.log.error(f"The trained model failed its output checks ({failed}): nothing written, nothing "
                              f"registered; the lake keeps what it held for {day}")

    if not config.keep_checkpoints:
        shutil.rmtree(ckpt, ignore_errors=True)
    final = result.final_metrics
    levels = range(len(result.model_cfg.level_sizes))
    yield dg.MaterializeResult(metadata={
        "outputs_written": passed,
        "dagster/row_count": inputs.num_nodes,
        "run_date": str(day),
        "model_version": model_version,
        "registered_model": mlflow.registered_model,
        "mlflow_run_id": run_id,
        "mlflow_run": _mlflow_link(mlflow, experiment_id, run_id),
        "epochs": len(result.history),
        "resumed_epochs": result.resumed_epochs,
        "final_loss": final.get("loss", float("nan")),
        "final_dino": final.get("dino", float("nan")),
        "final_engagement": final.get("engagement", float("nan")),
        **{f"perplexity_level_{lvl}": final.get(f"perplexity_level_{lvl}", float("nan")) for lvl in levels},
        **{k: float(v) for k, v in stats.items()},
        "level_sizes": dg.MetadataValue.json(list(result.model_cfg.level_sizes)),
        "input_delta_versions": dg.MetadataValue.json(versions),
        "output_delta_versions": dg.MetadataValue.json(out_versions),
        "inputs": dg.MetadataValue.json(summary),
        "device": result.device,
        "bf16": result.bf16,
        "train_time_s": train_time,
        "infer_time_s": result.infer_time_s,
        "collect_inputs_s": collect_s,
        "fingerprint": fingerprint,
        "published_encoder": result.train_cfg.published_encoder,
        "model_outputs_path": dg.MetadataValue.path(lake.path("model_outputs")),
        "model_hierarchy_path": dg.MetadataValue.path(lake.path("model_hierarchy")),
    })
    for check in checks:
        yield check_result(check)


def check_metrics(checks: list[CheckOutcome]) -> dict[str, float]:
    """The numbers the output checks measured, as MLflow metrics (``check.<name>.<measure>``)."""
    return {f"check.{c.name}.{k}": float(v) for c in checks for k, v in c.details.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def check_result(check: CheckOutcome) -> dg.AssetCheckResult:
    """One output check as a blocking asset check result (ERROR severity: downstream assets do not run)."""
    return dg.AssetCheckResult(
        check_name=check.name, passed=check.passed, severity=dg.AssetCheckSeverity.ERROR,
        description=check.description,
        metadata={k: dg.MetadataValue.json(v) if isinstance(v, list) else v for k, v in check.details.items()})
