"""Self-distillation training loop (DINO, Caron et al. 2021) with an engagement objective.

Per step: a batch of anchors; the EMA teacher embeds their *broad* views, the student their *narrow* views
(and, for ``multi_crop_share`` of them, their broad views too) with node/edge dropout and, at random, the
anchor's own ID/content hidden; the hierarchical DINO loss matches the student's per-level cluster distributions
to the teacher's centred + sharpened (or Sinkhorn-balanced) ones. Cross-entity distillation also matches each
anchor's student distribution to the mean teacher distribution of the nodes it interacted with (kept in a
per-node bank of the teacher's latest targets). A batch of engaged (user, item) pairs, drawn in proportion to
their funnel weight (``hir_pipeline.training.sampling``), is embedded by the student in the same packed forward,
each view without the pair's other node, and scored by an InfoNCE with known positives masked; in the views of a
pair, its user leaves the item out of its pooled history and the item the user (``PackedBatch.history_exclude``).

Reproducibility and crash safety: all randomness of epoch ``e`` is drawn from generators seeded by
``(seed, e)``, and every epoch ends with an atomic checkpoint (model, teacher, optimizer, centers, RNG
states, epoch). ``fit`` resumes from the latest checkpoint, so "train 2 epochs" equals "train 1, crash,
resume 1" exactly on CPU.

Data parallel (``TrainConfig.processes > 1``, inside a ``torch.distributed`` group; see
``hir_pipeline.training.parallel``): every rank draws the same global batch of ``batch_size`` anchors and
``engagement_batch_size`` pairs from the shared ``(seed, epoch)`` generator and trains on its disjoint shard; the
gradients are averaged over ranks before clipping and the optimizer step, so all ranks keep identical students and,
by the same EMA update, identical teachers; the DINO centers follow the global batch's mean teacher logits (the
ranks' sums all-reduced), the DINO and cross-entity losses are means over the global batch however its shards split,
and the cross-entity bank receives every rank's teacher targets. In-batch negatives: each rank embeds its shard
of the pairs, the pair embeddings are all-gathered (differentiably, as CLIP does), and every rank scores the
engagement InfoNCE over the *global* batch, so each pair's negatives are the other ``engagement_batch_size - 1``
pairs of all ranks, as in one process. Per rank, not global: the student-view augmentation and dropout (generators
seeded by ``(seed, epoch, rank)``), the multi-crop share (of the rank's anchors) and two top-ups (a last anchor
batch smaller than ``processes``, a pair batch to a multiple of it); so the loss curve follows the one-process
curve closely, and exactly up to float rounding without augmentation, dropout and multi-crop. Only rank 0 writes
checkpoints.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hir_pipeline.contracts import ENTITY_TYPES
from hir_pipeline.model.batch import PackedBatch, pack_views
from hir_pipeline.model.config import PUBLISHED_ENCODERS, ModelConfig, TrainConfig
from hir_pipeline.model.distillation import (
    EngagementTemperature,
    HierarchicalDINOLoss,
    InBatchNegatives,
    cross_entity_targets,
    ema_update,
    engagement_infonce,
    soft_cross_entropy,
)
from hir_pipeline.model.features import NodeFeatures
from hir_pipeline.model.hierarchy import cluster_perplexity, hierarchy_consistency
from hir_pipeline.model.hir_model import HIRModel
from hir_pipeline.model.history import pair_exclusions
from hir_pipeline.model.publication import published_rows
from hir_pipeline.model.refine import spherical_kmeans
from hir_pipeline.training.collate import augment_view, drop_node
from hir_pipeline.training.parallel import Ranks, pad_cyclic
from hir_pipeline.training.prefetch import prefetched
from hir_pipeline.training.sampling import EngagementSampler, partner_lists

log = logging.getLogger(__name__)

EpochCallback = Callable[[int, dict[str, Any]], None]


class TrainingStopped(RuntimeError):
    """Training stopped after an epoch because its time budget was spent (``Trainer.fit(stop_after_s=...)``);
    the epoch's checkpoint is written, so the next call on the same checkpoint folder resumes after it.

    Args:
        epochs_done: epochs trained so far (checkpointed), this call's and earlier ones.
        planned: epochs of the full schedule.
        elapsed_s: training seconds of the call that stopped.
    """

    def __init__(self, epochs_done: int, planned: int, elapsed_s: float):
        super().__init__(f"time budget spent after epoch {epochs_done}/{planned} ({elapsed_s:.0f}s of training)")
        self.epochs_done, self.planned, self.elapsed_s = epochs_done, planned, elapsed_s


@dataclass
class StepBatch:
    """The host-side inputs of one training step (:meth:`Trainer.prepare_step`), on the CPU.

    Args:
        anchors: this rank's anchor node ids.
        pair_idx: the engagement sampler's rows of the (global) pair batch, or ``None``.
        local_idx: the rows of ``pair_idx`` this rank embeds (all of them in one process).
        n_distill: student views of the distillation part (anchors, then their multi-crops).
        student: packed student views: distillation views, then the pairs' users, then their items.
        teacher: packed broad views of the anchors.
        teacher_index: for each distillation view, the row of its anchor's teacher output.
    """

    anchors: np.ndarray
    pair_idx: np.ndarray | None
    local_idx: np.ndarray | None
    n_distill: int
    student: PackedBatch
    teacher: PackedBatch
    teacher_index: torch.Tensor


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _by_anchor(views: Sequence[Mapping[str, Any]] | None) -> dict[int, Mapping[str, Any]]:
    return {} if views is None else {int(v["anchor_idx"]): v for v in views}


def latest_checkpoint(directory: str | os.PathLike | None) -> Path | None:
    """The newest ``epoch_XXXX.pt`` in ``directory``, or ``None``."""
    if directory is None or not Path(directory).is_dir():
        return None
    found = sorted(Path(directory).glob("epoch_*.pt"))
    return found[-1] if found else None


class Trainer:
    """Trains an :class:`HIRModel` student and its EMA teacher; :meth:`infer` embeds with the one that is published
    (``TrainConfig.published_encoder``).

    Args:
        model_cfg: model configuration.
        train_cfg: training configuration.
        features: per-node input features (global, indexed by node_idx); without a history, one is built from
            ``engagement`` (all its pairs, ``ModelConfig.history_max_neighbours``) when the model pools histories.
        broad_views: teacher views, one per anchor.
        narrow_views: student views per anchor (default: the broad views); augmented by node/edge dropout.
        engagement: ``(user_idx, item_idx, weight)`` arrays of engaged pairs (deeper funnel = larger weight);
            pairs whose user or item has no student view are never drawn for the engagement loss (they still
            count as known positives and as cross-entity partners).
        on_epoch_end: ``callback(epoch, metrics)`` after every epoch (after its checkpoint is written).
        seen: ``(user_idx, item_idx)`` pairs seen but not engaged (cross-entity partners at
            ``cross_entity_impression_weight``), or ``None``.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        features: NodeFeatures,
        broad_views: Sequence[Mapping[str, Any]],
        narrow_views: Sequence[Mapping[str, Any]] | None = None,
        engagement: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        on_epoch_end: EpochCallback | None = None,
        seen: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.model_cfg = model_cfg
        self.cfg = train_cfg
        self.device = resolve_device(train_cfg.device)
        if model_cfg.use_history and features.history is None and engagement is not None:
            features = features.with_history(engagement, model_cfg.history_max_neighbours)
        self.features = features.to(self.device)
        self.broad = _by_anchor(broad_views)
        self.narrow = _by_anchor(narrow_views) or self.broad
        self.anchors = np.array(sorted(set(self.broad) & set(self.narrow)), dtype=np.int64)
        if len(self.anchors) == 0:
            raise ValueError("no anchor has both a broad and a narrow view")
        self.on_epoch_end = on_epoch_end
        self.sampler = self._sampler(engagement)
        self.partners = self._partners(engagement, seen)
        self.use_bf16 = bool(train_cfg.bf16 and self.device.type == "cuda" and torch.cuda.is_bf16_supported())
        #: the data-parallel group, or ``None`` in one process (today's loop, unchanged)
        self.ranks = Ranks.joined(train_cfg.processes, self.device) if train_cfg.processes > 1 else None

        torch.manual_seed(train_cfg.seed)
        self.student = HIRModel(model_cfg).to(self.device)
        self.teacher = copy.deepcopy(self.student)
        self.teacher.requires_grad_(False)
        if self.ranks is not None:  # same seed, same init; the broadcast makes it certain (as DDP does)
            self.ranks.broadcast_parameters([self.student, self.teacher])
        self.optimizer = torch.optim.AdamW(self._param_groups(), lr=train_cfg.lr)
        self.loss_fn = HierarchicalDINOLoss(
            model_cfg.level_sizes, model_cfg.student_temp, model_cfg.teacher_temp, model_cfg.center_momentum,
            model_cfg.teacher_target, model_cfg.sinkhorn_iters,
            center_sync=None if self.ranks is None else self.ranks.global_mean,
        ).to(self.device)
        self.engagement_temp = EngagementTemperature(
            model_cfg.engagement_temp, model_cfg.engagement_temp_mode == "learned", model_cfg.engagement_temp_min,
        ).to(self.device)
        if self.engagement_temp.log_temp.requires_grad:  # its own group: a scalar takes no weight decay
            self.optimizer.add_param_group({"params": [self.engagement_temp.log_temp], "weight_decay": 0.0})
        # Cross-entity bank: every node's latest teacher targets (float16: N x sum(level_sizes) x 2 bytes).
        self.bank: list[torch.Tensor] = []
        self.bank_filled = torch.zeros(0, dtype=torch.bool, device=self.device)
        if self.partners is not None:
            n = self.features.num_nodes
            self.bank = [torch.zeros(n, k, dtype=torch.float16, device=self.device) for k in model_cfg.level_sizes]
            self.bank_filled = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.steps_per_epoch = math.ceil(len(self.anchors) / train_cfg.batch_size)
        self.epochs = train_cfg.epochs  # planned; fewer when they do not fit ``schedule_budget_s``
        self.total_steps = self.steps_per_epoch * self.epochs
        self.epoch = 0  # next epoch to run
        self.history: list[dict[str, Any]] = []
        self.refined: set[str] = set()  # networks whose prototypes were refined since the last training

    # -- setup helpers -----------------------------------------------------------------------------------
    def _param_groups(self) -> list[dict[str, Any]]:
        """AdamW groups: weights with decay; biases and norms without; the ID and history tables without decay at
        their own peak learning rate ``id_lr`` (``peak_lr`` of each group, followed by :meth:`lr_at`)."""
        tc = self.cfg
        tables = self.student.encoder.embed.id_tables()
        table_ids = {id(p) for p in tables}
        rest = [p for p in self.student.parameters() if id(p) not in table_ids]
        return [
            {"params": [p for p in rest if p.ndim >= 2], "weight_decay": tc.weight_decay, "peak_lr": tc.lr},
            {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0, "peak_lr": tc.lr},
            {"params": tables, "weight_decay": 0.0, "peak_lr": tc.lr if tc.id_lr is None else tc.id_lr},
        ]

    def _sampler(self, engagement) -> EngagementSampler | None:
        if engagement is None or self.cfg.engagement_batch_size <= 0:
            return None
        users, items, _ = (np.asarray(a) for a in engagement)
        usable = np.array([int(u) in self.narrow and int(i) in self.narrow for u, i in zip(users, items, strict=True)],
                          dtype=bool)
        mc = self.model_cfg
        return EngagementSampler.build(engagement, usable, self.features.num_nodes, mc.engagement_sampling,
                                       mc.engagement_logq, mc.mask_known_positives)

    def _partners(self, engagement, seen) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """CSR partner lists of cross-entity distillation on the device, or ``None`` when it is off."""
        mc = self.model_cfg
        if engagement is None or mc.cross_entity_weight <= 0 or mc.distillation_weight <= 0:
            return None
        indptr, partners, weights = partner_lists(engagement, self.features.num_nodes, seen,
                                                  mc.cross_entity_impression_weight)
        if len(partners) == 0:
            return None
        return (torch.as_tensor(indptr, device=self.device), torch.as_tensor(partners, device=self.device),
                torch.as_tensor(weights, device=self.device))

    @property
    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(user_idx, item_idx, weight)`` of the pairs the engagement loss draws from (``None``: no such loss)."""
        s = self.sampler
        return None if s is None else (s.users, s.items, s.weight)

    def pair_views(self, users: np.ndarray, items: np.ndarray) -> list[Mapping[str, Any]]:
        """Student views of the drawn pairs, users then items; without the pair's other node when
        ``hide_target_edge`` (no direct edge to the answer)."""
        if not self.model_cfg.hide_target_edge:
            return [self.narrow[int(u)] for u in users] + [self.narrow[int(i)] for i in items]
        return ([drop_node(self.narrow[int(u)], int(i)) for u, i in zip(users, items, strict=True)]
                + [drop_node(self.narrow[int(i)], int(u)) for u, i in zip(users, items, strict=True)])

    # -- schedules -----------------------------------------------------------------------------------------
    def lr_at(self, step: int, peak: float | None = None) -> float:
        """Linear warm-up then cosine decay to ``min_lr``; for another ``peak`` than ``lr`` (the ID tables' group)
        the same curve scaled by ``peak / lr``."""
        c = self.cfg
        peak = c.lr if peak is None else peak
        low = c.min_lr * peak / c.lr if c.lr > 0 else c.min_lr
        if step < c.warmup_steps:
            return peak * (step + 1) / c.warmup_steps
        t = (step - c.warmup_steps) / max(1, self.total_steps - c.warmup_steps)
        return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * min(1.0, t)))

    def momentum_at(self, step: int) -> float:
        """Teacher EMA momentum: cosine from ``ema_momentum`` to ``ema_momentum_end`` (DINO)."""
        c = self.cfg
        t = step / max(1, self.total_steps)
        return c.ema_momentum_end - (c.ema_momentum_end - c.ema_momentum) * 0.5 * (1 + math.cos(math.pi * t))

    # -- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch - 1,
            "student": self.student.state_dict(),
            "teacher": self.teacher.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "loss_fn": self.loss_fn.state_dict(),
            "engagement_temp": self.engagement_temp.state_dict(),
            "bank": [b.clone() for b in self.bank],
            "bank_filled": self.bank_filled.clone(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "history": self.history,
            "model_cfg": asdict(self.model_cfg),
            "train_cfg": asdict(self.cfg),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.student.load_state_dict(state["student"])
        self.teacher.load_state_dict(state["teacher"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.loss_fn.load_state_dict(state["loss_fn"])
        self.engagement_temp.load_state_dict(state["engagement_temp"])
        self.bank = [b.to(self.device) for b in state["bank"]]
        self.bank_filled = state["bank_filled"].to(self.device)
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.history = list(state["history"])
        self.epoch = int(state["epoch"]) + 1
        self.refined.clear()  # the loaded prototypes are the learned ones

    def save_checkpoint(self) -> Path | None:
        """Atomically write ``epoch_XXXX.pt`` (write to a temp file, then rename) and prune old ones."""
        if self.cfg.checkpoint_dir is None:
            return None
        directory = Path(self.cfg.checkpoint_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"epoch_{self.epoch - 1:04d}.pt"
        tmp = path.with_suffix(".pt.tmp")
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)
        for old in sorted(directory.glob("epoch_*.pt"))[: -max(1, self.cfg.keep_checkpoints)]:
            old.unlink(missing_ok=True)
        return path

    def maybe_resume(self) -> bool:
        """Load the latest checkpoint of ``checkpoint_dir`` if resuming is enabled; True when one was loaded."""
        path = latest_checkpoint(self.cfg.checkpoint_dir) if self.cfg.resume else None
        if path is None:
            return False
        self.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))
        log.info("resumed from %s (next epoch %d)", path, self.epoch)
        return True

    # -- training --------------------------------------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16)

    def train_step(self, step: int, anchors: np.ndarray, rng: np.random.Generator,
                   pair_idx: np.ndarray | None) -> dict[str, Any]:
        """One optimisation step on ``anchors`` (and engagement pairs ``pair_idx``), then the EMA update:
        :meth:`prepare_step` then :meth:`run_step`.

        Args:
            step: global step (drives the learning-rate and EMA schedules).
            anchors: anchor node ids of the batch.
            rng: generator of the student-view augmentation.
            pair_idx: rows of the engagement sampler to use (data parallel: the global batch, whose shard this
                rank embeds), or ``None``.

        Returns:
            ``loss``, ``dino``, ``cross_entity``, ``engagement``, ``engagement_temp``, ``per_level`` floats and the
            per-level ``teacher_probs``.
        """
        return self.run_step(step, self.prepare_step(anchors, rng, pair_idx))

    def prepare_step(self, anchors: np.ndarray, rng: np.random.Generator,
                     pair_idx: np.ndarray | None) -> StepBatch:
        """The host-side inputs of a step: augmented student views (and multi-crops), the teacher's broad views and
        the pairs' views, packed. Depends on the inputs and ``rng`` only, never on the model, so the epoch loop
        prepares the next steps ahead (``TrainConfig.prefetch_batches``). Arguments as :meth:`train_step`."""
        mc, tc = self.model_cfg, self.cfg
        n_anchor = len(anchors)
        student_views = [augment_view(self.narrow[int(a)], rng, mc.node_dropout, mc.edge_dropout) for a in anchors]
        # Multi-crop: the first share of the (already shuffled) anchors also go through the student as broad crops.
        n_crops = int(round(mc.multi_crop_share * n_anchor)) if mc.distillation_weight > 0 else 0
        student_views += [augment_view(self.broad[int(a)], rng, mc.node_dropout, mc.edge_dropout)
                          for a in anchors[:n_crops]]
        n_distill = len(student_views)
        hide = rng.random(n_distill) < mc.anchor_feature_mask if mc.anchor_feature_mask > 0 else None
        local_idx = None
        if pair_idx is not None:
            # Data parallel: ``pair_idx`` is the global batch; this rank embeds its shard of the pairs.
            local_idx = pair_idx if self.ranks is None else self.ranks.shard(pair_idx)
            users, items = self.sampler.users[local_idx], self.sampler.items[local_idx]
            student_views += self.pair_views(users, items)
        s_batch = pack_views(student_views, pad_to=tc.pad_to, max_dist=mc.max_dist)
        if pair_idx is not None and self.features.history is not None:
            s_batch.history_exclude = self._pair_exclusions(s_batch, n_distill, users, items)
        if hide is not None and hide.any():
            hidden = torch.zeros(s_batch.layout.seq_len, dtype=torch.bool)
            hidden[s_batch.layout.anchor_positions()[:n_distill][torch.as_tensor(hide)]] = True
            s_batch.hide_features = hidden
        return StepBatch(
            anchors=anchors, pair_idx=pair_idx, local_idx=local_idx, n_distill=n_distill, student=s_batch,
            teacher=pack_views([self.broad[int(a)] for a in anchors], pad_to=tc.pad_to, max_dist=mc.max_dist),
            teacher_index=torch.as_tensor(np.r_[np.arange(n_anchor), np.arange(n_crops)]),
        )

    def run_step(self, step: int, batch: StepBatch) -> dict[str, Any]:
        """The device side of a step on a :meth:`prepare_step` batch: forward, losses, backward, optimizer and EMA
        update. Returns what :meth:`train_step` returns."""
        mc, tc = self.model_cfg, self.cfg
        anchors, pair_idx, local_idx, n_distill = batch.anchors, batch.pair_idx, batch.local_idx, batch.n_distill
        n_anchor = len(anchors)
        s_batch, t_batch = batch.student.to(self.device), batch.teacher.to(self.device)
        teacher_index = batch.teacher_index.to(self.device)
        if pair_idx is not None:
            sampler = self.sampler
            users, items = sampler.users[local_idx], sampler.items[local_idx]
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step, group.get("peak_lr"))

        with self._autocast():
            with torch.no_grad():
                t_out = self.teacher(t_batch, self.features)
            s_out = self.student(s_batch, self.features)
        s_logits = [lg[:n_distill] for lg in s_out.logits]
        dino, per_level = self.loss_fn(s_logits, t_out.logits, teacher_index)
        if self.ranks is not None:  # a mean over the global batch's student rows when the shards differ in size
            share = n_distill * self.ranks.world_size / float(self.ranks.sum(torch.tensor([n_distill])).item())
            dino, per_level = dino * share, [x * share for x in per_level]
        with torch.no_grad():
            t_probs = self.loss_fn.teacher_probs(t_out.logits)
        cross = self._cross_entity_loss(anchors, [lg[:n_anchor] for lg in s_logits])
        loss = mc.distillation_weight * (dino + mc.cross_entity_weight * cross)
        eng = torch.zeros((), device=self.device)
        temperature = self.engagement_temp()
        if pair_idx is not None:
            p = len(local_idx)
            emb = s_out.embedding
            user_emb, item_emb = emb[n_distill:n_distill + p], emb[n_distill + p:]
            if self.ranks is not None:  # in-batch negatives of the global batch: every rank scores all its pairs
                user_emb, item_emb = self.ranks.gather_with_grad(user_emb), self.ranks.gather_with_grad(item_emb)
                users, items = sampler.users[pair_idx], sampler.items[pair_idx]
            u_ids, i_ids = torch.as_tensor(users, device=self.device), torch.as_tensor(items, device=self.device)
            known = sampler.positive_mask(pair_idx)
            negatives = InBatchNegatives(
                user_ids=u_ids, item_ids=i_ids,
                user_log_q=None if sampler.user_log_q is None else torch.as_tensor(sampler.user_log_q[users],
                                                                                   device=self.device),
                item_log_q=None if sampler.item_log_q is None else torch.as_tensor(sampler.item_log_q[items],
                                                                                   device=self.device),
                positive_mask=None if known is None else torch.as_tensor(known, device=self.device),
            )
            eng = engagement_infonce(
                user_emb, item_emb,
                torch.as_tensor(sampler.loss_weight[pair_idx], device=self.device), temperature, negatives,
            )
            loss = loss + mc.engagement_weight * eng
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.ranks is not None:  # before clipping: every rank clips and steps on the same global gradient
            self.ranks.average_gradients([p for group in self.optimizer.param_groups for p in group["params"]])
        if tc.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.student.parameters(), tc.grad_clip)
        self.optimizer.step()
        ema_update(self.teacher, self.student, self.momentum_at(step))
        self._remember_targets(anchors, t_probs)
        return {"loss": loss.item(), "dino": dino.item(), "cross_entity": cross.item(), "engagement": eng.item(),
                "engagement_temp": float(temperature.detach()), "per_level": [x.item() for x in per_level],
                "teacher_probs": t_probs}

    def _cross_entity_loss(self, anchors: np.ndarray, student_logits: list[torch.Tensor]) -> torch.Tensor:
        """Summed over levels: mean over the anchors with a target of the cross-entropy between their partners'
        mean teacher distribution (:func:`cross_entity_targets`) and their student distribution."""
        if self.partners is None:
            return torch.zeros((), device=self.device)
        a = torch.as_tensor(anchors, device=self.device)
        targets, has = cross_entity_targets(a, *self.partners, self.bank, self.bank_filled)
        st = self.model_cfg.student_temp
        if self.ranks is not None:  # the mean over the *global* batch's anchors with a target (shards hold unequal
            # numbers): this rank's sum scaled so that the average over ranks is that mean
            count = int(self.ranks.sum(has.sum()).item())
            if count == 0:
                return torch.zeros((), device=self.device)
            scale = self.ranks.world_size / count
            return torch.stack([soft_cross_entropy(s[has], t[has], st).sum() * scale
                                for s, t in zip(student_logits, targets, strict=True)]).sum()
        if not bool(has.any()):
            return torch.zeros((), device=self.device)
        return torch.stack([soft_cross_entropy(s[has], t[has], st).mean()
                            for s, t in zip(student_logits, targets, strict=True)]).sum()

    @torch.no_grad()
    def _remember_targets(self, anchors: np.ndarray, t_probs: list[torch.Tensor]) -> None:
        """Store the anchors' teacher targets in the cross-entity bank."""
        if self.partners is None:
            return
        a = torch.as_tensor(anchors, device=self.device)
        if self.ranks is not None:  # every rank's bank holds every anchor's latest targets, as in one process
            a, t_probs = self.ranks.gather_rows(a, t_probs)
        for bank, probs in zip(self.bank, t_probs, strict=True):
            bank[a] = probs.to(bank.dtype)
        self.bank_filled[a] = True

    @staticmethod
    def _pair_exclusions(batch, n_distill: int, users: np.ndarray, items: np.ndarray) -> torch.Tensor:
        """``history_exclude`` of a student batch laid out as ``n_distill`` distillation views (anchors and their
        crops), then the views of the pairs' users, then those of their items: no pool of a pair's end holds the
        pair's other end."""
        pairs_u = torch.as_tensor(np.concatenate([users, users]), dtype=torch.long)
        pairs_i = torch.as_tensor(np.concatenate([items, items]), dtype=torch.long)
        none = torch.full((n_distill,), -1, dtype=torch.long)
        return pair_exclusions(batch.node_idx, batch.layout.view_id, torch.cat([none, pairs_u]),
                               torch.cat([none, pairs_i]))

    @property
    def prefetch_depth(self) -> int:
        """Step batches prepared ahead (``TrainConfig.prefetch_batches``; by default 2 on CUDA, 0 on CPU)."""
        depth = self.cfg.prefetch_batches
        return depth if depth is not None else (2 if self.device.type == "cuda" else 0)

    def _epoch_batches(self, perm: np.ndarray, rng: np.random.Generator,
                       aug_rng: np.random.Generator) -> Iterator[StepBatch]:
        """The epoch's step batches in order: anchors from ``perm``, pairs drawn from ``rng``, views augmented
        with ``aug_rng`` (in one process the same generator, consumed in the same order as an inline loop)."""
        tc = self.cfg
        for i in range(self.steps_per_epoch):
            anchors = perm[i * tc.batch_size:(i + 1) * tc.batch_size]
            pair_idx = None if self.sampler is None else self.sampler.draw(rng, tc.engagement_batch_size)
            if self.ranks is not None:  # a short last batch is topped up so that no rank's shard is empty
                world = self.ranks.world_size
                anchors = self.ranks.shard(pad_cyclic(anchors, perm, world))
                if pair_idx is not None:  # equal shards (gathered for the negatives), none empty
                    pair_idx = pad_cyclic(pair_idx, pair_idx, -(-len(pair_idx) // world) * world)
            yield self.prepare_step(anchors, aug_rng, pair_idx)

    def _run_epoch(self, epoch: int) -> dict[str, Any]:
        tc = self.cfg
        rng = np.random.default_rng([tc.seed, epoch])  # batch order and pair draws: shared by every rank
        aug_rng, dropout_seed = rng, tc.seed * 1_000_003 + epoch + 1
        if self.ranks is not None:  # augmentation and dropout differ per rank (their own shards' views)
            aug_rng = np.random.default_rng([tc.seed, epoch, 1 + self.ranks.rank])
            dropout_seed += 7_919 * self.ranks.rank
        torch.manual_seed(dropout_seed)  # dropout masks of this epoch
        self.student.train()
        self.teacher.train(False)
        perm = rng.permutation(self.anchors)
        n_levels = self.model_cfg.num_levels
        sums = {"loss": 0.0, "dino": 0.0, "cross_entity": 0.0, "engagement": 0.0, "engagement_temp": 0.0}
        level_sums = [0.0] * n_levels
        prob_sums = [torch.zeros(k, device=self.device) for k in self.model_cfg.level_sizes]
        n_rows = 0
        t0 = time.perf_counter()
        batches = prefetched(self._epoch_batches(perm, rng, aug_rng), self.prefetch_depth)
        with contextlib.closing(batches):  # a failing step stops the producer thread now, not at garbage collection
            for i, batch in enumerate(batches):
                out = self.run_step(epoch * self.steps_per_epoch + i, batch)
                for key in sums:
                    sums[key] += out[key]
                for lvl in range(n_levels):
                    level_sums[lvl] += out["per_level"][lvl]
                    prob_sums[lvl] += out["teacher_probs"][lvl].sum(0)
                n_rows += len(batch.anchors)
                if tc.log_every and (i + 1) % tc.log_every == 0:
                    log.info("epoch %d step %d/%d loss %.4f (%.1f steps/s)", epoch, i + 1, self.steps_per_epoch,
                             sums["loss"] / (i + 1), (i + 1) / (time.perf_counter() - t0))
        if self.ranks is not None:  # metrics of the global batches: every rank reports the same numbers
            keys = list(sums)
            means = self.ranks.mean(torch.tensor([sums[k] for k in keys] + level_sums, dtype=torch.float64))
            sums = dict(zip(keys, means[:len(keys)].tolist(), strict=True))
            level_sums = means[len(keys):].tolist()
            prob_sums = list(self.ranks.sum(torch.cat(prob_sums)).split(list(self.model_cfg.level_sizes)))
            n_rows = int(self.ranks.sum(torch.tensor([n_rows])).item())
        steps = self.steps_per_epoch
        elapsed = time.perf_counter() - t0
        metrics: dict[str, Any] = {key: value / steps for key, value in sums.items()}
        for lvl in range(n_levels):
            metrics[f"dino_level_{lvl}"] = level_sums[lvl] / steps
            metrics[f"perplexity_level_{lvl}"] = cluster_perplexity((prob_sums[lvl] / n_rows)[None])
        metrics.update(epoch=epoch, steps=steps, epoch_time_s=elapsed, steps_per_s=steps / max(elapsed, 1e-9),
                       lr=self.lr_at((epoch + 1) * steps - 1), ema_momentum=self.momentum_at((epoch + 1) * steps - 1))
        return metrics

    def fit(self, stop_after_s: float | None = None) -> list[dict[str, Any]]:
        """Train to ``epochs`` (resuming first when a checkpoint exists; fewer when ``schedule_budget_s`` says so);
        returns the per-epoch metrics.

        Args:
            stop_after_s: stop after the epoch during which this many seconds of this call's training have passed,
                when epochs are left: :class:`TrainingStopped` is raised after that epoch's checkpoint and
                ``on_epoch_end``, and a later call resumes there. Data parallel: the slowest rank's time decides,
                so every rank stops after the same epoch. ``None``: no limit.
        """
        self.maybe_resume()
        self.refined.clear()  # training moves the prototypes again
        log.info("training on %s: %d anchors, %d steps/epoch, epochs %d..%d, bf16=%s", self.device,
                 len(self.anchors), self.steps_per_epoch, self.epoch, self.cfg.epochs - 1, self.use_bf16)
        start, trained = time.perf_counter(), 0
        while self.epoch < self.epochs:
            epoch = self.epoch
            metrics = self._run_epoch(epoch)
            self.epoch, trained = epoch + 1, trained + 1
            if self.cfg.schedule_budget_s is not None:
                elapsed = time.perf_counter() - start
                # every rank must plan the same epochs: the slowest rank's time decides
                self.fit_schedule_to_budget(elapsed if self.ranks is None else self.ranks.max_float(elapsed), trained)
            metrics["planned_epochs"] = self.epochs
            self.history.append(metrics)
            if self.ranks is None or self.ranks.is_main:
                self.save_checkpoint()
            if self.ranks is not None:  # no rank runs ahead of a checkpoint it might have to resume from
                self.ranks.barrier()
            log.info("epoch %d done in %.1fs: loss %.4f dino %.4f engagement %.4f perplexity %s", epoch,
                     metrics["epoch_time_s"], metrics["loss"], metrics["dino"], metrics["engagement"],
                     [round(metrics[f"perplexity_level_{lv}"], 2) for lv in range(self.model_cfg.num_levels)])
            if self.on_epoch_end is not None:
                self.on_epoch_end(epoch, metrics)
            if stop_after_s is not None and self.epoch < self.epochs:
                elapsed = time.perf_counter() - start
                elapsed = elapsed if self.ranks is None else self.ranks.max_float(elapsed)
                if elapsed >= stop_after_s:
                    raise TrainingStopped(self.epoch, self.epochs, elapsed)
        return self.history

    def fit_schedule_to_budget(self, elapsed_s: float, trained: int) -> None:
        """Drop the planned epochs that no longer fit ``schedule_budget_s`` at the mean epoch time of this call, and
        end the learning-rate and EMA schedules at the new last epoch (never before the epoch just finished).

        Args:
            elapsed_s: training seconds of this call so far.
            trained: epochs this call trained.
        """
        left = self.cfg.schedule_budget_s - elapsed_s
        fitting = self.epoch + max(0, int(left // (elapsed_s / trained)))
        if fitting < self.epochs:
            log.info("schedule budget %.0fs: %d of %d epochs fit at %.1fs each; the schedules now end at epoch %d",
                     self.cfg.schedule_budget_s, fitting, self.cfg.epochs, elapsed_s / trained, fitting)
            self.epochs = fitting
            self.total_steps = self.steps_per_epoch * self.epochs

    def centers(self) -> list[torch.Tensor]:
        """The teacher centers per level (subtracted from the teacher logits before the cluster softmax)."""
        return [self.loss_fn.center(lvl).detach().clone() for lvl in range(self.model_cfg.num_levels)]

    def encoder(self, which: str | None = None) -> HIRModel:
        """The student or the EMA teacher (default: ``TrainConfig.published_encoder``)."""
        which = which or self.cfg.published_encoder
        if which not in PUBLISHED_ENCODERS:
            raise ValueError(f"unknown encoder {which!r}; one of {PUBLISHED_ENCODERS}")
        return self.student if which == "student" else self.teacher

    def output_calibration(self, which: str | None = None) -> tuple[float, list[torch.Tensor] | None]:
        """``(temperature, centers)`` of the cluster probabilities of the student or the teacher.

        The teacher's are its DINO targets: ``softmax((logits - center) / teacher_temp)`` (no centers with
        Sinkhorn targets, whose balancing needs a whole batch). The student's are the distribution the DINO loss
        trains: ``softmax(logits / student_temp)``, uncentred (the centers track the teacher's logits, not the
        student's; the loss already pulls the student's distribution onto the teacher's centred targets).
        """
        which = which or self.cfg.published_encoder
        self.encoder(which)  # validates
        if which == "student":
            return self.model_cfg.student_temp, None
        # refined prototypes moved away from the logits the centers were a running mean of
        centering = self.model_cfg.teacher_target == "centering" and which not in self.refined
        centers = self.centers() if centering else None
        return self.model_cfg.teacher_temp, centers

    def training_views(self, which: str | None = None) -> list[Mapping[str, Any]]:
        """The views a network learned on, so the ones it embeds best: the student's narrow views (its engagement
        and distillation inputs), the teacher's broad views. ``which`` defaults to the published encoder.

        Embedding with the other kind is a shift the network never saw, and costs recall (docs/results.md).
        """
        views = self.narrow if self.views_name(which) == "narrow" else self.broad
        return [views[a] for a in sorted(views)]

    def views_name(self, which: str | None = None) -> str:
        """``"narrow"`` or ``"broad"``: the kind of :meth:`training_views` of ``which`` (default: published)."""
        which = which or self.cfg.published_encoder
        self.encoder(which)  # validates
        return "narrow" if which == "student" and self.narrow is not self.broad else "broad"

    def infer(self, views: Sequence[Mapping[str, Any]] | None = None, which: str | None = None):
        """``infer`` with the published encoder (or ``which``: ``"student"`` / ``"teacher"``), its calibration
        (:meth:`output_calibration`) and, unless ``views`` are given, its :meth:`training_views`. The clusters
        are the transformer embedding's; the returned embeddings are the published rows
        (:func:`~hir_pipeline.model.publication.published_rows`) when ``structure_score_weight`` is on."""
        from hir_pipeline.training.inference import infer

        which = which or self.cfg.published_encoder
        temperature, centers = self.output_calibration(which)
        views = self.training_views(which) if views is None else views
        res = infer(self.encoder(which), self.features, views, batch_size=self.cfg.infer_batch_size,
                    pad_to=self.cfg.pad_to, temperature=temperature, centers=centers)
        if self.cfg.prototype_refinement_iters > 0 and which not in self.refined:
            res = self._refine_prototypes(which, res)
        return self._published(res)

    def _published(self, res):
        """``res`` with the published rows as its embeddings when ``structure_score_weight`` is on."""
        mc = self.model_cfg
        if not mc.publishes_structure:
            return res
        is_user = self.features.node_type.cpu().numpy() == ENTITY_TYPES.index("user")
        rows = published_rows(res.embeddings, self.features.structure.cpu().numpy(), mc.structure_score_weight,
                              is_user)
        return dataclasses.replace(res, embeddings=rows, encoder_embeddings=res.embeddings)

    def _refine_prototypes(self, which: str, res):
        """Refine ``which``'s prototypes on the embeddings of ``res`` (``TrainConfig.prototype_refinement_iters``,
        :func:`~hir_pipeline.model.refine.spherical_kmeans`) and return ``res`` with the refined clusters."""
        from hir_pipeline.training.inference import cluster_probabilities, head_projections, published_tree

        model = self.encoder(which)
        z = head_projections(model, res.embeddings)
        with torch.no_grad():
            for proto in model.hierarchy.prototypes:
                proto.copy_(spherical_kmeans(z, proto, self.cfg.prototype_refinement_iters).to(proto.dtype))
        self.refined.add(which)
        temperature, centers = self.output_calibration(which)
        probs = cluster_probabilities(model, res.embeddings, temperature, centers)
        return dataclasses.replace(res, probs=probs, parent_maps=published_tree(model, probs))

    def consistency(self, views: Sequence[Mapping[str, Any]]) -> list[float]:
        """Hierarchy consistency (see ``hierarchy_consistency``) of the published encoder on ``views``."""
        res = self.infer(views)
        return hierarchy_consistency([torch.from_numpy(p) for p in res.probs], [torch.from_numpy(m)
                                                                             for m in res.parent_maps])
