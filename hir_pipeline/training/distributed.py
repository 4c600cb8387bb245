"""Data-parallel training entry: one call of :func:`train_rank` per process, launched by ``torchrun`` (and later by
Spark's ``TorchDistributor``, which calls the same function).

Everything a rank needs comes from its arguments and files: the pickled :class:`ModelInputs` (every rank loads
the whole file for now), the two configurations, and the launcher's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). Backend: NCCL when the rank trains on CUDA, gloo on CPU.

Command line (``processes`` defaults to the launcher's world size)::

    torchrun --standalone --nproc_per_node 2 -m hir_pipeline.training.distributed \\
        --inputs inputs.pkl --checkpoint-dir ckpt [--model-config model.json] [--train-config train.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.training.fit import prepare_checkpoint_dir, resolve_model_config, run_fingerprint
from hir_pipeline.training.inputs import load_inputs
from hir_pipeline.training.inputs import save_inputs as save_inputs  # re-exported: the hand-off file
from hir_pipeline.training.trainer import EpochCallback, Trainer, TrainingStopped, latest_checkpoint

log = logging.getLogger(__name__)


def parameter_digest(*modules: torch.nn.Module) -> str:
    """SHA-256 of the exact bytes of every parameter and buffer of ``modules`` (equal digests = equal models).

    Args:
        modules: the networks to hash, in a fixed order.
    """
    h = hashlib.sha256()
    for module in modules:
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _rank_device(train_cfg: TrainConfig, local_rank: int) -> str:
    """The rank's device: its own GPU (``cuda:LOCAL_RANK``) when training on CUDA, else the configured one."""
    wants_cuda = train_cfg.device.startswith("cuda") or (train_cfg.device == "auto" and torch.cuda.is_available())
    return f"cuda:{local_rank}" if wants_cuda else train_cfg.device


def train_rank(
    inputs_path: str | os.PathLike,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    checkpoint_dir: str | os.PathLike,
    on_epoch_end: EpochCallback | None = None,
    time_budget_s: float | None = None,
) -> dict[str, Any]:
    """Train this process's rank of a ``train_cfg.processes``-way data-parallel run; returns its summary.

    Joins the default process group (``env://``: the launcher's variables) unless one is initialised, prepares
    ``checkpoint_dir`` on rank 0 (stale checkpoints of other inputs or settings deleted, see
    :func:`~hir_pipeline.training.fit.prepare_checkpoint_dir`), resumes from its latest checkpoint on every rank,
    trains, and checks that every rank ended with the same student and teacher.

    Args:
        inputs_path: pickled :class:`ModelInputs` (:func:`save_inputs`), read by every rank.
        model_cfg: model configuration (fitted to the inputs by
            :func:`~hir_pipeline.training.fit.resolve_model_config`).
        train_cfg: training configuration; ``processes`` must equal the launcher's world size, ``batch_size`` and
            ``engagement_batch_size`` are global (split over the ranks); ``device`` ``auto`` / ``cuda`` picks
            ``cuda:LOCAL_RANK``.
        checkpoint_dir: folder of the run's checkpoints (shared by the ranks; written by rank 0 only).
        on_epoch_end: ``callback(epoch, metrics)`` on every rank after each epoch's checkpoint; an exception raised
            there stops training (a relaunch resumes after that epoch).
        time_budget_s: stop every rank after the epoch during which this many seconds of training have passed on
            the slowest rank (``Trainer.fit(stop_after_s=...)``); the summary then says so (``stopped``) and a
            relaunch resumes after that epoch. ``None``: train to the end.

    Returns:
        ``rank``, ``world_size``, ``fingerprint``, ``history`` (per-epoch metrics, the same on every rank),
        ``digest`` (:func:`parameter_digest` of student and teacher), ``checkpoint`` (the latest checkpoint) and
        ``stopped`` (``None``, or ``{"epochs_done", "planned", "elapsed_s"}`` when the time budget stopped it).
    """
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _rank_device(train_cfg, local_rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    try:
        rank = dist.get_rank()
        inputs = load_inputs(inputs_path)
        model_cfg = resolve_model_config(model_cfg, inputs)
        train_cfg = dataclasses.replace(train_cfg, device=device, checkpoint_dir=str(checkpoint_dir), resume=True)
        fingerprint = run_fingerprint(inputs, model_cfg, train_cfg)
        if rank == 0:
            prepare_checkpoint_dir(checkpoint_dir, fingerprint)
        dist.barrier()  # no rank looks for checkpoints before rank 0 removed stale ones
        weighted = inputs.with_recency(train_cfg.recency_half_life)
        trainer = Trainer(model_cfg, train_cfg, weighted.features(model_cfg), inputs.broad_views,
                          inputs.narrow_views or None, weighted.engagement, on_epoch_end=on_epoch_end,
                          seen=inputs.seen_pairs)
        try:
            history, stopped = trainer.fit(stop_after_s=time_budget_s), None
        except TrainingStopped as stop:  # every rank stops after the same epoch (the slowest rank's time decides)
            history, stopped = trainer.history, {"epochs_done": stop.epochs_done, "planned": stop.planned,
                                                 "elapsed_s": stop.elapsed_s}
        digest = parameter_digest(trainer.student, trainer.teacher)
        digests = [None] * dist.get_world_size()
        dist.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"ranks diverged: parameter digests {digests}")
        checkpoint = latest_checkpoint(checkpoint_dir)
        return {"rank": rank, "world_size": dist.get_world_size(), "fingerprint": fingerprint,
                "history": history, "digest": digest, "checkpoint": None if checkpoint is None else str(checkpoint),
                "stopped": stopped}
    finally:
        if created:
            dist.destroy_process_group()


def _config(cls: type, path: str | None, **defaults: Any) -> Any:
    """``cls`` from a JSON object of field values (``defaults`` first; lists become tuples)."""
    values = dict(defaults)
    if path:
        values.update(json.loads(Path(path).read_text()))
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line of :func:`train_rank` for ``torchrun`` (see the module docstring).

    Args:
        argv: arguments (default: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(prog="python -m hir_pipeline.training.distributed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, help="pickled ModelInputs (training.distributed.save_inputs)")
    parser.add_argument("--checkpoint-dir", required=True, help="checkpoint folder shared by the ranks")
    parser.add_argument("--model-config", help="JSON object of ModelConfig fields")
    parser.add_argument("--train-config", help="JSON object of TrainConfig fields (processes: the world size)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads per rank (0: torch's)")
    parser.add_argument("--summary", help="rank 0 writes the run's summary (JSON) here")
    parser.add_argument("--time-budget-s", type=float, default=None,
                        help="stop after the epoch during which this many seconds of training have passed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank" + os.environ.get("RANK", "0")
                        + " %(name)s %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    model_cfg = _config(ModelConfig, args.model_config)
    train_cfg = _config(TrainConfig, args.train_config, processes=int(os.environ.get("WORLD_SIZE", "1")))
    result = train_rank(args.inputs, model_cfg, train_cfg, args.checkpoint_dir, time_budget_s=args.time_budget_s)
    if args.summary and result["rank"] == 0:
        Path(args.summary).write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
