"""Data-parallel training of the interest model through Spark's ``TorchDistributor``.

:func:`torch_distributor_launch` is the ``launch`` of :func:`hir_pipeline.training.fit.fit_and_embed` when
``TrainConfig.processes > 1``: ``TorchDistributor(num_processes=processes, local_mode=..., use_gpu=...)`` runs
:func:`hir_pipeline.training.distributed.train_rank` on every rank and returns rank 0's summary.

Where the ranks run (``mode``, the ``interest_model`` run config's ``distributor_mode``):

* ``auto`` (default): follow the Spark master: a local master (``local``, ``local[N]``) trains the ranks as
  ``torchrun`` processes on the driver machine (``local_mode=True``), any other master on the executors, one
  barrier task per rank (``local_mode=False``);
* ``local`` / ``cluster``: force one or the other.

``use_gpu`` follows the training device: ``cuda...`` or ``auto`` on a driver that sees a GPU. With GPUs, Spark must
schedule them (``spark.task.resource.gpu.amount`` on a cluster, ``spark.driver.resource.gpu.*`` in local mode).
On a cluster, the inputs file and the checkpoint folder must be on storage every executor and the driver share.
"""

from __future__ import annotations

from typing import Any, Literal

from hir_pipeline.model.config import ModelConfig, TrainConfig

DistributorMode = Literal["auto", "local", "cluster"]
DISTRIBUTOR_MODES: tuple[str, ...] = ("auto", "local", "cluster")


def is_local_master(master: str) -> bool:
    """Whether ``master`` (``spark.master``) runs everything in the driver's JVM (``local``, ``local[N]``,
    ``local[N,F]``), as ``TorchDistributor`` decides it."""
    return master == "local" or master.startswith("local[")


def distributor_choice(master: str, device: str, mode: str = "auto",
                       cuda_available: bool | None = None) -> tuple[bool, bool]:
    """``(local_mode, use_gpu)`` of the ``TorchDistributor`` for a Spark master and a training device.

    Args:
        master: ``spark.master`` of the session.
        device: ``TrainConfig.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        mode: ``auto`` (local master: ``local_mode=True``, else ``False``), ``local`` or ``cluster``.
        cuda_available: whether the driver sees a GPU (``auto`` device); ``None``: ``torch.cuda.is_available()``.
    """
    if mode not in DISTRIBUTOR_MODES:
        raise ValueError(f"unknown distributor mode {mode!r}; one of {DISTRIBUTOR_MODES}")
    local_mode = is_local_master(master) if mode == "auto" else mode == "local"
    if device == "auto":
        if cuda_available is None:
            import torch

            cuda_available = torch.cuda.is_available()
        use_gpu = cuda_available
    else:
        use_gpu = device.startswith("cuda")
    return local_mode, use_gpu


def torch_distributor_launch(spark, mode: str = "auto"):
    """A ``launch`` for :func:`~hir_pipeline.training.fit.fit_and_embed` that trains the ranks through
    ``TorchDistributor`` on ``spark``'s cluster (or its driver, see the module notes).

    Args:
        spark: the active SparkSession (``TorchDistributor`` uses the active one).
        mode: ``auto``, ``local`` or ``cluster`` (see :func:`distributor_choice`).
    """
    if mode not in DISTRIBUTOR_MODES:
        raise ValueError(f"unknown distributor mode {mode!r}; one of {DISTRIBUTOR_MODES}")

    def launch(inputs_path: str, model_cfg: ModelConfig, train_cfg: TrainConfig, checkpoint_dir: str,
               time_budget_s: float | None = None) -> dict[str, Any]:
        from pyspark.ml.torch.distributor import TorchDistributor

        from hir_pipeline.training.distributed import train_rank

        local_mode, use_gpu = distributor_choice(spark.conf.get("spark.master", "local"), train_cfg.device, mode)
        distributor = TorchDistributor(num_processes=train_cfg.processes, local_mode=local_mode, use_gpu=use_gpu)
        return distributor.run(train_rank, inputs_path, model_cfg, train_cfg, checkpoint_dir, None, time_budget_s)

    return launch
