"""Data-parallel training primitives over a ``torch.distributed`` process group (gloo on CPU, NCCL on GPU).

Every rank holds the whole model and the same global batch order (the batch generator is seeded by
``(seed, epoch)`` alike on all ranks); :func:`shard_rows` gives each rank a disjoint slice of each global batch.
After the backward pass :meth:`Ranks.average_gradients` all-reduces the gradients (the averaging DDP does), so
every rank takes the same optimizer step from the same parameters and the EMA teacher, updated locally from them,
stays identical without communication. What each rank computes alone is listed in
:class:`~hir_pipeline.training.trainer.Trainer`'s ``processes`` notes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor


def shard_rows(rows: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s disjoint share of one global batch: contiguous, sizes differing by at most one.

    The batch is already shuffled by the shared, seeded batch generator, so a contiguous slice is a random one;
    concatenated in rank order, the shards give back ``rows``.

    Args:
        rows: the global batch (anchor ids or engagement-pair rows), identical on every rank.
        rank: this process's rank, ``0 <= rank < world_size``.
        world_size: number of processes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
    bounds = np.linspace(0, len(rows), world_size + 1).round().astype(np.int64)
    return rows[bounds[rank]:bounds[rank + 1]]


def pad_cyclic(rows: np.ndarray, source: np.ndarray, size: int) -> np.ndarray:
    """``rows`` topped up to ``size`` with the first rows of ``source`` (repeated when needed), so that every rank's
    shard of a short last batch holds at least one row.

    Args:
        rows: the (short) global batch.
        source: rows to top up from (the epoch's permutation).
        size: the least number of rows.
    """
    missing = size - len(rows)
    if missing <= 0:
        return rows
    return np.concatenate([rows, np.resize(source, missing)])


@dataclass(frozen=True)
class Ranks:
    """This process's place in the default process group and the collectives the trainer needs.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        device: device of the tensors sent through the group (CUDA for NCCL, CPU for gloo).
    """

    rank: int
    world_size: int
    device: torch.device

    @classmethod
    def joined(cls, processes: int, device: torch.device) -> Ranks:
        """The initialised default group, checked against the configured world size.

        Args:
            processes: ``TrainConfig.processes``.
            device: the training device.
        """
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(f"processes={processes} needs an initialised torch.distributed process group: launch "
                               "with torchrun (python -m hir_pipeline.training.distributed) or TorchDistributor")
        if dist.get_world_size() != processes:
            raise ValueError(f"processes={processes} but the process group has {dist.get_world_size()} ranks")
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def is_main(self) -> bool:
        """Rank 0: writes checkpoints and outputs."""
        return self.rank == 0

    def shard(self, rows: np.ndarray) -> np.ndarray:
        """This rank's :func:`shard_rows` of a global batch."""
        return shard_rows(rows, self.rank, self.world_size)

    @torch.no_grad()
    def broadcast_parameters(self, modules: Iterable[torch.nn.Module]) -> None:
        """Copy rank 0's parameters and buffers to every rank (as DDP does at wrap time)."""
        for module in modules:
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src=0)

    @torch.no_grad()
    def average_gradients(self, params: Sequence[Tensor]) -> None:
        """Replace every gradient by its mean over ranks, in one flat all-reduce.

        A parameter that got no gradient on some rank (its input absent from that rank's shard) counts as a zero
        gradient there; one that got none on any rank keeps ``grad None``, so the optimizer skips it as it would in
        one process.

        Args:
            params: the optimizer's parameters, in the same order on every rank.
        """
        params = [p for p in params if p.requires_grad]
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=self.device)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
        used = [p for p, h in zip(params, has.tolist(), strict=True) if h]
        for p in used:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if not used:
            return
        flat = torch.cat([p.grad.reshape(-1).float() for p in used])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p in used:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

    @torch.no_grad()
    def mean(self, values: Tensor) -> Tensor:
        """Mean over ranks of ``values`` (a new tensor; every rank gets the same result).

        Args:
            values: a float tensor of the same shape on every rank.
        """
        out = values.detach().clone().to(self.device)
        out = out if out.is_floating_point() else out.float()
        dist.all_reduce(out)
        return (out / self.world_size).to(values.device)

    @torch.no_grad()
    def global_mean(self, row_sum: Tensor, rows: int) -> Tensor:
        """Mean over every rank's rows, from this rank's sum over its ``rows`` rows (shards may differ in size).

        Args:
            row_sum: ``[1, K]`` float sum of this rank's rows.
            rows: how many rows ``row_sum`` sums.
        """
        flat = torch.cat([row_sum.detach().float().reshape(-1), row_sum.new_tensor([rows], dtype=torch.float32)])
        total = self.sum(flat.to(self.device))
        return (total[:-1] / total[-1]).reshape(row_sum.shape).to(row_sum.device)

    @torch.no_grad()
    def sum(self, values: Tensor) -> Tensor:
        """Sum over ranks of ``values`` (a new tensor)."""
        out = values.detach().clone().to(self.device)
        dist.all_reduce(out)
        return out.to(values.device)

    def max_float(self, value: float) -> float:
        """Largest ``value`` over ranks (wall times: every rank must take the same schedule decision)."""
        out = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return float(out.item())

    @torch.no_grad()
    def gather_rows(self, index: Tensor, rows: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """Every rank's ``(index, rows)`` concatenated in rank order (shards may differ in length by one).

        Args:
            index: long ``[B_r]`` this rank's row ids (anchors).
            rows: tensors ``[B_r, ...]`` aligned with ``index`` (per-level teacher targets).
        """
        n = torch.tensor([len(index)], device=self.device)
        sizes = [torch.zeros_like(n) for _ in range(self.world_size)]
        dist.all_gather(sizes, n)
        sizes = [int(s.item()) for s in sizes]
        width = max(sizes)

        def gather(t: Tensor) -> Tensor:
            padded = torch.zeros((width, *t.shape[1:]), dtype=t.dtype, device=self.device)
            padded[:len(t)] = t.to(self.device)
            parts = [torch.empty_like(padded) for _ in range(self.world_size)]
            dist.all_gather(parts, padded)
            return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)]).to(t.device)

        return gather(index), [gather(r) for r in rows]

    def gather_with_grad(self, rows: Tensor) -> Tensor:
        """Every rank's ``rows`` (equally many on each) concatenated in rank order, differentiable: the gradient of
        this rank's slice is the sum over ranks of their gradients of it (an all-reduce), so a loss computed
        identically on every rank from the gathered rows, then averaged by :meth:`average_gradients`, trains as
        that loss in one process.

        Args:
            rows: ``[R, ...]`` this rank's rows (the same ``R`` on every rank).
        """
        return _GatherRows.apply(rows, self.rank, self.world_size)

    def barrier(self) -> None:
        """Wait for every rank (after rank 0 wrote a file the others read)."""
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index or 0])
        else:
            dist.barrier()


class _GatherRows(torch.autograd.Function):
    """All-gather forward, all-reduce-then-slice backward (gloo has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, rows: Tensor, rank: int, world_size: int) -> Tensor:
        ctx.rank, ctx.rows = rank, len(rows)
        parts = [torch.empty_like(rows) for _ in range(world_size)]
        dist.all_gather(parts, rows.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows], None, None
