"""Model: train the hierarchical interest model on the run date's graph, track it in MLflow, write its outputs.

``interest_model`` reads the run date's ``graph_nodes`` / ``graph_edges`` / ``graph_views`` snapshot and the
current ``content_embeddings`` snapshot (each at an explicit Delta version, logged to MLflow; the content table
holds one current snapshot, so an old date re-run reads today's vectors), collects them to the driver
(:mod:`spark_jobs.model_inputs`), trains with :func:`hir_pipeline.training.fit.fit_and_embed` (CUDA + bf16 when
present, else CPU), logs and registers the published encoder (``published_encoder``: the student by default, or
the EMA teacher; the same network embeds the nodes) and writes

* ``model_outputs`` - one row per node: L2-normalised embedding, top-1 cluster and its probability per level;
* ``model_hierarchy`` - one row per prototype, with its parent cluster;

replacing the run date's rows (Delta ``replaceWhere``). Publishing turns these into the contract tables.

Crash safety: every epoch ends with a checkpoint in ``<HIR state dir>/checkpoints/<run_date>/``; materializing
the date again resumes from it (same fingerprint of inputs and settings only) and continues the same MLflow run.
``time_budget_s`` uses the same path on purpose: a run that must give its machine back stops after an epoch
and the next materialization finishes the training. The checkpoints are deleted once the model is registered
and the tables are written (unless ``keep_checkpoints``).
"""

import contextlib
import datetime as dt
import logging
import shutil
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from assets.model_tracking import (
    TAG_RUN_DATE,
    epoch_metrics,
    flat_params,
    log_and_register_model,
    log_input_tables,
    output_cluster_stats,
    remember_run,
    resumable_run_id,
)
from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from hir_pipeline.contracts import DEFAULT_FUNNEL
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.settings import state_dir
from resources import LakeResource, MLflowResource, SparkResource
from spark_jobs.delta_io import MissingInput
from spark_jobs.graph import GraphSnapshot
from spark_jobs.model_inputs import CONTENT_TABLE, GRAPH_TABLES, load_model_inputs, read_model_tables
from spark_jobs.model_outputs import model_hierarchy_frame, model_outputs_frame, write_model_outputs

GROUP = "model"

_M, _T = ModelConfig(), TrainConfig()
#: TrainingConfig fields passed to ModelConfig / TrainConfig unchanged.
MODEL_FIELDS = ("hidden_dim", "num_layers", "num_heads", "mlp_ratio", "out_dim", "id_buckets", "max_dist",
                "num_edge_types", "student_temp", "teacher_temp", "center_momentum", "teacher_target",
                "sinkhorn_iters", "engagement_temp", "engagement_weight", "engagement_logq",
                "distillation_weight", "use_content", "structural_bias", "dropout", "node_dropout", "edge_dropout",
                "attn_block_size", "attention_backend")
TRAIN_FIELDS = ("epochs", "batch_size", "engagement_batch_size", "lr", "min_lr", "warmup_steps", "weight_decay",
                "grad_clip", "ema_momentum", "ema_momentum_end", "seed", "device", "bf16", "log_every", "pad_to",
                "infer_batch_size", "published_encoder")


class TrainingConfig(dg.Config):
    """Run config of ``interest_model``: the useful fields of ``ModelConfig`` / ``TrainConfig`` (same defaults, see
    :mod:`hir_pipeline.model.config` for the full meaning) plus how the asset runs."""

    # -- model
    level_sizes: list[int] = Field(list(_M.level_sizes), description="Prototypes per hierarchy level, coarsest "
                                   "first (level 0 = coarsest); each level at least as large as the previous.")
    hidden_dim: int = Field(_M.hidden_dim, description="Token width of the graph transformer.")
    num_layers: int = Field(_M.num_layers, description="Transformer layers.")
    num_heads: int = Field(_M.num_heads, description="Attention heads (hidden_dim must be divisible by it).")
    mlp_ratio: int = Field(_M.mlp_ratio, description="Feed-forward width as a multiple of hidden_dim.")
    out_dim: int = Field(_M.out_dim, description="Width of the published, L2-normalised embedding.")
    id_buckets: int = Field(_M.id_buckets, description="Hashed-ID embedding buckets (nodes with history only).")
    max_dist: int = Field(_M.max_dist, description="Largest shortest-path distance with its own attention bias; "
                          "keep equal to the graph's max_dist.")
    num_edge_types: int = Field(_M.num_edge_types, description="Edge-type vocabulary size; raised automatically "
                                "when the graph has more edge types.")
    student_temp: float = Field(_M.student_temp, description="DINO student softmax temperature (and that of the "
                                "published cluster probabilities when published_encoder is 'student').")
    teacher_temp: float = Field(_M.teacher_temp, description="DINO teacher temperature (sharpening; and that of "
                                "the published cluster probabilities when published_encoder is 'teacher').")
    center_momentum: float = Field(_M.center_momentum, description="EMA momentum of the teacher center.")
    teacher_target: str = Field(_M.teacher_target, description="'centering' (DINO) or 'sinkhorn' (balanced).")
    sinkhorn_iters: int = Field(_M.sinkhorn_iters, description="Sinkhorn-Knopp iterations.")
    engagement_temp: float = Field(_M.engagement_temp, description="Temperature of the engagement InfoNCE.")
    engagement_weight: float = Field(_M.engagement_weight, description="Weight of the engagement loss.")
    engagement_logq: bool = Field(_M.engagement_logq, description="Correct the engagement InfoNCE for in-batch "
                                  "sampling (logQ): popular items are not pushed down for being frequent negatives.")
    distillation_weight: float = Field(_M.distillation_weight, description="Weight of the DINO losses (0: no "
                                       "self-distillation, an ablation).")
    use_content: bool = Field(_M.use_content, description="Feed the content embeddings (False: an ablation).")
    structural_bias: bool = Field(_M.structural_bias, description="Learned distance / type-pair / edge-type "
                                  "attention biases (False: plain attention within each view, an ablation).")
    dropout: float = Field(_M.dropout, description="Dropout on attention output and feed-forward.")
    node_dropout: float = Field(_M.node_dropout, description="Student view: probability of dropping a node.")
    edge_dropout: float = Field(_M.edge_dropout, description="Student view: probability of hiding an edge.")
    attn_block_size: int = Field(_M.attn_block_size, description="Query block of the attention kernels.")
    attention_backend: str = Field(_M.attention_backend, description="'auto', 'flex', 'chunked' or 'dense'.")
    # -- training
    epochs: int = Field(_T.epochs, description="Passes over all anchors.")
    batch_size: int = Field(_T.batch_size, description="Anchors (view pairs) per step.")
    engagement_batch_size: int = Field(_T.engagement_batch_size, description="Engaged (user, item) pairs per "
                                       "step; 0 disables the engagement loss.")
    lr: float = Field(_T.lr, description="Peak AdamW learning rate (linear warm-up, cosine decay).")
    min_lr: float = Field(_T.min_lr, description="Final learning rate.")
    warmup_steps: int = Field(_T.warmup_steps, description="Linear warm-up steps.")
    weight_decay: float = Field(_T.weight_decay, description="AdamW weight decay.")
    grad_clip: float = Field(_T.grad_clip, description="Max gradient norm (0 disables clipping).")
    ema_momentum: float = Field(_T.ema_momentum, description="Teacher EMA momentum at the start.")
    ema_momentum_end: float = Field(_T.ema_momentum_end, description="Teacher EMA momentum at the end.")
    seed: int = Field(_T.seed, description="Seed of every random choice: same seed, same inputs, same machine "
                      "and thread count = identical model on CPU.")
    device: str = Field(_T.device, description="'auto' (CUDA when present, else CPU), 'cpu' or 'cuda[:i]'.")
    bf16: bool = Field(_T.bf16, description="bf16 autocast on CUDA devices that support it.")
    log_every: int = Field(_T.log_every, description="Log progress every this many steps (0: per epoch only).")
    pad_to: int = Field(_T.pad_to, description="Packed sequence lengths are padded to a multiple of this.")
    infer_batch_size: int = Field(_T.infer_batch_size, description="Views per inference batch.")
    published_encoder: Literal["student", "teacher"] = Field(
        _T.published_encoder, description="Which trained network is published (embeddings, cluster probabilities, "
        "the MLflow model): 'student' or the EMA 'teacher'. DINO publishes the teacher, which wins after a long "
        "schedule; after a short CPU one it lags the student (MovieLens, config/cpu_sample.yaml, 184 steps: "
        "Recall@20 warm/cold 0.156/0.167 teacher vs 0.210/0.224 student). Each embeds the views it was trained on "
        "(student: narrow, teacher: broad). The student's cluster probabilities are softmax(logits / "
        "student_temp), uncentred; the teacher's softmax((logits - center) / teacher_temp).")
    # -- inputs
    funnel: list[str] = Field(list(DEFAULT_FUNNEL), description="Event types, shallow to deep (as in the graph).")
    engagement_weights: list[float] | None = Field(None, description="Weight of an engaged pair per funnel stage "
                                                   "(aligned with funnel; 0 = not engagement). Default: depth "
                                                   "above the first stage (0, 1, 2, 3).")
    require_content: bool = Field(True, description="Fail when content_embeddings has no rows; False trains on "
                                  "structure alone.")
    # -- run behaviour
    torch_threads: int = Field(0, description="torch intra-op threads (0: torch's default).")
    time_budget_s: float | None = Field(None, description="Stop after the epoch during which this many seconds "
                                        "of training have passed; the asset fails and the next run resumes.")
    keep_checkpoints: bool = Field(False, description="Keep the epoch checkpoints after a successful run.")
    progress_every_s: float = Field(10.0, description="Interval of the Spark progress lines in the run log while "
                                    "the graph is collected to the driver.")

    def to_model_config(self) -> ModelConfig:
        return ModelConfig(level_sizes=tuple(self.level_sizes), **{f: getattr(self, f) for f in MODEL_FIELDS})

    def to_train_config(self) -> TrainConfig:
        return TrainConfig(**{f: getattr(self, f) for f in TRAIN_FIELDS})


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


class _ToDagsterLog(logging.Handler):
    def __init__(self, context: dg.AssetExecutionContext) -> None:
        super().__init__(logging.INFO)
        self.context = context

    def emit(self, record: logging.LogRecord) -> None:
        self.context.log.info(record.getMessage())


@contextlib.contextmanager
def forward_training_logs(context: dg.AssetExecutionContext, logger_name: str = "hir_pipeline.training"):
    """Show the trainer's progress lines (steps, epochs, resume) in the Dagster run log while it trains."""
    logger = logging.getLogger(logger_name)
    handler, level = _ToDagsterLog(context), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


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
    description="Trains the hierarchical graph transformer on the run date's graph, logs and registers it in "
                "MLflow, and writes model_outputs (one row per node) and model_hierarchy (one row per prototype).",
)
def interest_model(
    context: dg.AssetExecutionContext,
    config: TrainingConfig,
    spark: SparkResource,
    lake: LakeResource,
    mlflow: MLflowResource,
) -> dg.MaterializeResult:
    import mlflow as mlf
    import torch

    from hir_pipeline.training.fit import fit_and_embed, resolve_model_config, run_fingerprint

    day = run_date(context)
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
            graph, content, funnel=config.funnel, engagement_weights=config.engagement_weights,
            provenance={"delta_versions": versions}, progress=context.log.info,
        )
    collect_s = stages.seconds["collect inputs"]
    require_rows(inputs, versions, day, config.require_content)
    summary = inputs.summary()
    context.log.info(f"Collected the graph in {collect_s:.1f}s: {summary}")

    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    model_cfg = resolve_model_config(config.to_model_config(), inputs)
    train_cfg = config.to_train_config()
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
                        **flat_params("train", {f: getattr(train_cfg, f) for f in TRAIN_FIELDS if f != "device"}),
                        **flat_params("inputs", summary),
                        "inputs.engagement_weights": str(config.engagement_weights),
                        "inputs.funnel": str(config.funnel)})
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
            left = config.epochs - epoch - 1
            context.log.info(f"epoch {epoch + 1}/{config.epochs} done: loss {metrics['loss']:.4f}"
                             + (f", ~{elapsed / len(trained) * left:.0f}s to go" if left else ""))
            if left and config.time_budget_s is not None and elapsed >= config.time_budget_s:
                raise dg.Failure(
                    f"time budget of {config.time_budget_s}s spent after epoch {epoch + 1}/{config.epochs}; "
                    f"checkpoint kept in {ckpt}: materialize {day} again to resume",
                    metadata={"epochs_done": epoch + 1, "checkpoint_dir": str(ckpt)},
                )

        with stages("train"), forward_training_logs(context):
            result = fit_and_embed(inputs, model_cfg, train_cfg, ckpt, on_epoch_end=on_epoch_end,
                                   fingerprint=fingerprint)
        mlf.set_tags({"hir.device": result.device, "hir.bf16": str(result.bf16)})
        if resume_id is None and result.resumed_epochs:  # checkpoints of a run this store does not know
            for metrics in result.history[:result.resumed_epochs]:
                mlf.log_metrics(epoch_metrics(metrics), step=int(metrics["epoch"]))
        stats = output_cluster_stats(result)
        train_time = float(sum(h["epoch_time_s"] for h in result.history))
        mlf.log_metrics({**stats, "train_time_s": train_time, "infer_time_s": result.infer_time_s,
                         "collect_inputs_s": collect_s})
        context.log.info(f"Trained on {result.device} (bf16={result.bf16}); logging and registering the "
                         f"{result.train_cfg.published_encoder} (the published encoder)")
        model_version = log_and_register_model(result, mlflow.registered_model, day)

        res = result.inference
        outputs = model_outputs_frame(session, inputs.entity_ids, inputs.entity_types, res.embeddings, res.probs,
                                      res.has_view, model_version, day)
        hierarchy = model_hierarchy_frame(session, result.prototypes, res.parent_maps, model_version, day)
        out_versions = write_model_outputs(session, lake.path, day, outputs, hierarchy)
        mlf.set_tags({f"hir.output.{t}.delta_version": str(v) for t, v in out_versions.items()})
        context.log.info(f"Wrote {inputs.num_nodes:,} model_outputs and {sum(result.model_cfg.level_sizes):,} "
                         f"model_hierarchy rows for run date {day} (model version {model_version}) at Delta "
                         f"versions {out_versions}")

    if not config.keep_checkpoints:
        shutil.rmtree(ckpt, ignore_errors=True)
    final = result.final_metrics
    levels = range(len(result.model_cfg.level_sizes))
    return dg.MaterializeResult(metadata={
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
