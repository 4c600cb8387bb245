"""Train on one graph and embed every node: the torch-only core of the training asset.

:func:`fit_and_embed` = :class:`~hir_pipeline.training.trainer.Trainer` (self-distillation + engagement, epoch
checkpoints, resume) followed by :func:`~hir_pipeline.training.inference.infer` with the published encoder
(``TrainConfig.published_encoder``: the student by default, or the EMA teacher) over *every* node: nodes without a
view (no history, no neighbours) get a one-node view and are embedded from their content, type and degree alone.
:attr:`FitResult.model` is that same encoder, so the logged model reproduces the published outputs.

Checkpoints of a run live in one folder together with a ``fingerprint.json`` naming the inputs and settings
they were trained on (:func:`run_fingerprint`). A later call on the same folder resumes only when the
fingerprint matches; otherwise the stale checkpoints are deleted and training starts over, so a re-run with
other data or other hyper-parameters never silently continues someone else's model.

Data parallel (``TrainConfig.processes > 1``) outside a ``torch.distributed`` process group: ``launch`` (for the
pipeline, Spark's ``TorchDistributor``: :func:`spark_jobs.model.distributor.torch_distributor_launch`) runs
:func:`hir_pipeline.training.distributed.train_rank` on ``processes`` ranks over the inputs saved to
``<checkpoint_dir>/inputs.pkl``; then this process loads rank 0's final checkpoint and embeds every node exactly
as after one-process training. ``checkpoint_dir`` must therefore be a folder the ranks and this process share.

Device: ``TrainConfig.device`` (``auto`` = CUDA when present, else CPU), bf16 autocast on CUDA devices that
support it. On CPU a fixed seed gives bit-identical results, also across a crash and resume, for a given
intra-op thread count (``torch.set_num_threads``: float reductions are split by thread).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.model.hir_model import HIRModel
from hir_pipeline.timing import Stages
from hir_pipeline.training.inference import InferenceResult
from hir_pipeline.training.inputs import ModelInputs, save_inputs
from hir_pipeline.training.trainer import EpochCallback, Trainer, TrainingStopped, latest_checkpoint

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "fingerprint.json"
#: ``launch(inputs_path, model_cfg, train_cfg, checkpoint_dir, time_budget_s)`` runs ``train_rank`` on
#: ``train_cfg.processes`` ranks and returns rank 0's summary (:func:`hir_pipeline.training.distributed.train_rank`).
RankLauncher = Callable[[str, ModelConfig, TrainConfig, str, float | None], dict[str, Any]]
INPUTS_FILE = "inputs.pkl"
#: TrainConfig fields that do not change what is computed (where and how verbosely it runs).
_OPERATIONAL_FIELDS = frozenset({"device", "checkpoint_dir", "resume", "keep_checkpoints", "log_every",
                                 "infer_batch_size", "prefetch_batches"})


@dataclass
class FitResult:
    """Outcome of :func:`fit_and_embed`.

    Args:
        model: the published encoder (``train_cfg.published_encoder``: the student or the EMA teacher) that
            produced ``inference``, in eval mode, on the training device.
        model_cfg: the model configuration actually used (``content_dim``, ``structure_dim`` and ``num_edge_types``
            fitted to the inputs, see :func:`resolve_model_config`).
        train_cfg: the training configuration actually used (``checkpoint_dir`` filled in).
        inference: embeddings and per-level cluster probabilities of every node (row = ``node_idx``).
        views: ``"narrow"`` or ``"broad"``: the views ``inference`` embedded (those ``model`` was trained on, see
            :meth:`~hir_pipeline.training.trainer.Trainer.training_views`).
        history: per-epoch metrics of every epoch (including epochs done before a resume).
        centers: per-level centers ``[K_l]`` subtracted from ``model``'s logits before the cluster softmax (the
            DINO teacher centers), or ``None`` when none are (the student, or a Sinkhorn-trained teacher).
        temperature: softmax temperature of the cluster probabilities (``student_temp`` for the student,
            ``teacher_temp`` for the teacher).
        prototypes: per-level L2-normalised prototypes ``[K_l, out_dim]`` of ``model`` (in the projection head's
            space).
        device: the torch device trained on.
        bf16: whether bf16 autocast was used.
        resumed_epochs: epochs loaded from a checkpoint instead of trained by this call.
        fingerprint: :func:`run_fingerprint` of this run.
        train_time_s: wall time of the training loop in this call.
        infer_time_s: wall time of inference.
    """

    model: HIRModel
    model_cfg: ModelConfig
    train_cfg: TrainConfig
    inference: InferenceResult
    views: str
    history: list[dict[str, Any]]
    centers: list[np.ndarray] | None
    temperature: float
    prototypes: list[np.ndarray]
    device: str
    bf16: bool
    resumed_epochs: int
    fingerprint: str
    train_time_s: float
    infer_time_s: float

    @property
    def final_metrics(self) -> dict[str, float]:
        """The last epoch's numeric metrics."""
        last = self.history[-1] if self.history else {}
        return {k: float(v) for k, v in last.items() if isinstance(v, int | float)}


def resolve_model_config(model_cfg: ModelConfig, inputs: ModelInputs) -> ModelConfig:
    """``model_cfg`` fitted to the data: ``content_dim`` / ``structure_dim`` = the content / structure embedding
    widths of ``inputs``; ``num_edge_types`` raised to the highest edge type id when the graph has more types than
    configured; ``id_buckets`` shrunk to the number of nodes with history when they get exact IDs (one row each, no
    unused rows)."""
    with_history = int(np.count_nonzero(inputs.has_history))
    id_buckets = model_cfg.id_buckets
    if model_cfg.exact_ids and with_history <= id_buckets:
        id_buckets = max(1, with_history)
    return dataclasses.replace(model_cfg, content_dim=inputs.content_dim, structure_dim=inputs.structure_dim,
                               id_buckets=id_buckets,
                               num_edge_types=max(model_cfg.num_edge_types, int(inputs.max_edge_type)))


def run_fingerprint(inputs: ModelInputs, model_cfg: ModelConfig, train_cfg: TrainConfig,
                    inputs_fingerprint: str | None = None) -> str:
    """Hash of the inputs and every setting that changes the trained model (not device, logging, paths).

    ``processes`` counts when above 1 (per-rank shards and in-batch negatives change the trained model).
    ``published_encoder`` counts although both encoders are trained either way: the fingerprint names the
    published model (and its MLflow run, whose params must not change on a resume).

    Args:
        inputs: the training inputs.
        model_cfg: the resolved model configuration.
        train_cfg: the training configuration.
        inputs_fingerprint: ``inputs.fingerprint()`` when already computed.
    """
    train = {k: v for k, v in dataclasses.asdict(train_cfg).items() if k not in _OPERATIONAL_FIELDS}
    if train["processes"] == 1:  # one process hashes as before the setting existed: its checkpoints stay resumable
        del train["processes"]
    payload = json.dumps({"inputs": inputs_fingerprint or inputs.fingerprint(),
                          "model": dataclasses.asdict(model_cfg), "train": train}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def prepare_checkpoint_dir(checkpoint_dir: str | os.PathLike, fingerprint: str) -> int:
    """Make ``checkpoint_dir`` hold only checkpoints of ``fingerprint``; returns how many epochs it holds.

    Checkpoints written for another fingerprint are deleted (logged as a warning), since resuming them would
    mix two different trainings.
    """
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    meta = directory / FINGERPRINT_FILE
    previous = json.loads(meta.read_text()).get("fingerprint") if meta.exists() else None
    stale = sorted(directory.glob("epoch_*.pt"))
    if stale and previous != fingerprint:
        log.warning("discarding %d checkpoint(s) in %s trained on other inputs or settings", len(stale), directory)
        for path in stale:
            path.unlink(missing_ok=True)
    meta.write_text(json.dumps({"fingerprint": fingerprint}))
    latest = latest_checkpoint(directory)
    return 0 if latest is None else int(latest.stem.split("_")[1]) + 1


def fit_and_embed(
    inputs: ModelInputs,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    checkpoint_dir: str | os.PathLike,
    on_epoch_end: EpochCallback | None = None,
    fingerprint: str | None = None,
    launch: RankLauncher | None = None,
    time_budget_s: float | None = None,
) -> FitResult:
    """Train (resuming from ``checkpoint_dir`` when it holds checkpoints of this run) and embed every node.

    Args:
        inputs: features, views and engagement pairs of the graph.
        model_cfg: model configuration; ``content_dim``, ``structure_dim`` and ``num_edge_types`` are fitted to
            ``inputs``.
        train_cfg: training configuration (its ``checkpoint_dir`` is replaced by ``checkpoint_dir``).
        checkpoint_dir: folder of this run's per-epoch checkpoints (created).
        on_epoch_end: ``callback(epoch, metrics)`` after each trained epoch, after its checkpoint is written; an
            exception raised there stops training, and the next call resumes after that epoch.
        fingerprint: precomputed :func:`run_fingerprint` (computed here when ``None``).
        launch: with ``train_cfg.processes > 1`` and no ``torch.distributed`` process group in this process, trains
            the ranks (see the module notes); ``on_epoch_end`` is then called here for each epoch the ranks trained,
            in order, once they have all finished. Unused with ``processes`` 1.
        time_budget_s: stop after the epoch during which this many seconds of training have passed, when epochs
            are left: :class:`~hir_pipeline.training.trainer.TrainingStopped` is raised after that epoch's
            checkpoint and ``on_epoch_end`` (data parallel: after the ranks' epochs are replayed), nothing is
            embedded, and the next call resumes there. ``None``: train to the end.
    """
    model_cfg = resolve_model_config(model_cfg, inputs)
    train_cfg = dataclasses.replace(train_cfg, checkpoint_dir=str(checkpoint_dir), resume=True)
    fingerprint = fingerprint or run_fingerprint(inputs, model_cfg, train_cfg)
    done = prepare_checkpoint_dir(checkpoint_dir, fingerprint)
    weighted = inputs.with_recency(train_cfg.recency_half_life)  # the ranks weigh the inputs they load themselves
    features = weighted.features(model_cfg)
    narrow = inputs.narrow_views or None
    launched = launch is not None and train_cfg.processes > 1 and not _in_process_group()
    # launched: this process only embeds, with the ranks' final model (one process: no process group to join)
    trainer = Trainer(model_cfg, dataclasses.replace(train_cfg, processes=1) if launched else train_cfg, features,
                      inputs.broad_views, narrow, weighted.engagement, on_epoch_end=on_epoch_end,
                      seen=inputs.seen_pairs)
    log.info("fit %s: %s, %d epoch(s) already in %s", fingerprint[:12], inputs.summary(), done, checkpoint_dir)
    stages = Stages()
    with stages("train"):
        if launched:
            history, stopped = _train_launched(launch, inputs, model_cfg, train_cfg, Path(checkpoint_dir),
                                               fingerprint, trainer, time_budget_s)
            for metrics in history[done:]:
                if on_epoch_end is not None:
                    on_epoch_end(int(metrics["epoch"]), metrics)
            if stopped is not None:
                raise TrainingStopped(stopped["epochs_done"], stopped["planned"], stopped["elapsed_s"])
        else:
            history = trainer.fit(stop_after_s=time_budget_s)
    with stages("infer"):
        inference = trainer.infer()  # the published network on the views it was trained on
    model = trainer.encoder()
    model.train(False)
    temperature, centers = trainer.output_calibration()
    protos = [p.detach().float() for p in model.hierarchy.prototypes]
    return FitResult(
        model=model, model_cfg=model_cfg, train_cfg=train_cfg, inference=inference, views=trainer.views_name(),
        history=list(history),
        centers=None if centers is None else [c.float().reshape(-1).cpu().numpy() for c in centers],
        temperature=float(temperature),
        prototypes=[(p / p.norm(dim=-1, keepdim=True).clamp_min(1e-12)).cpu().numpy() for p in protos],
        device=str(trainer.device), bf16=trainer.use_bf16, resumed_epochs=done, fingerprint=fingerprint,
        train_time_s=stages.seconds["train"], infer_time_s=stages.seconds["infer"],
    )


def _in_process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _train_launched(launch: RankLauncher, inputs: ModelInputs, model_cfg: ModelConfig, train_cfg: TrainConfig,
                    checkpoint_dir: Path, fingerprint: str, trainer: Trainer, time_budget_s: float | None
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Train the ranks through ``launch`` and load rank 0's final checkpoint into ``trainer``; its history, and the
    ranks' ``stopped`` (not ``None`` when the time budget stopped them)."""
    inputs_path = save_inputs(inputs, checkpoint_dir / INPUTS_FILE)
    try:
        summary = launch(str(inputs_path), model_cfg, train_cfg, str(checkpoint_dir), time_budget_s)
    finally:
        inputs_path.unlink(missing_ok=True)
    trained = None if summary is None else summary.get("fingerprint")
    if trained != fingerprint:
        raise RuntimeError(f"the ranks trained another run (fingerprint {trained}, expected {fingerprint})")
    if not trainer.maybe_resume():
        raise RuntimeError(f"the ranks left no checkpoint in {checkpoint_dir}")
    return trainer.history, summary.get("stopped")
