"""Model and training configuration as plain frozen dataclasses.

Every knob of the graph transformer (``hir_pipeline.model.encoder``), the prototype hierarchy
(``hir_pipeline.model.hierarchy``), the self-distillation objective (``hir_pipeline.model.distillation``)
and the training loop (``hir_pipeline.training.trainer``) lives here: its type, default, validation and
description (the ``Args:`` sections below). The orchestration layer derives its Dagster config from these
classes, so a field added here is a setting of the pipeline with no other edit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from hir_pipeline.contracts import DEFAULT_MAX_DIST, DEGREE_BUCKETS, ENTITY_TYPES

TeacherTarget = Literal["centering", "sinkhorn"]
AttentionBackend = Literal["auto", "flex", "bucketed", "chunked", "dense"]
PublishedEncoder = Literal["student", "teacher"]
EngagementSampling = Literal["weighted", "uniform"]
TemperatureMode = Literal["fixed", "learned"]
#: Values of ``ModelConfig.teacher_target``, ``ModelConfig.attention_backend``, ``TrainConfig.published_encoder``,
#: ``ModelConfig.engagement_sampling`` and ``ModelConfig.engagement_temp_mode``.
TEACHER_TARGETS: tuple[str, ...] = get_args(TeacherTarget)
ATTENTION_BACKENDS: tuple[str, ...] = get_args(AttentionBackend)
PUBLISHED_ENCODERS: tuple[str, ...] = get_args(PublishedEncoder)
ENGAGEMENT_SAMPLING: tuple[str, ...] = get_args(EngagementSampling)
TEMPERATURE_MODES: tuple[str, ...] = get_args(TemperatureMode)


@dataclass(frozen=True)
class ModelConfig:
    """Hierarchical graph transformer (Graphormer-style structural biases, Ying et al. 2021) trained by
    DINO self-distillation (Caron et al. 2021).

    Args:
        hidden_dim: token width of the transformer.
        num_layers: number of pre-LN transformer layers.
        num_heads: attention heads (``hidden_dim`` must be divisible by it).
        mlp_ratio: feed-forward width as a multiple of ``hidden_dim``.
        out_dim: width of the published, L2-normalised node embedding (one space for all entity types).
        content_dim: width ``Dc`` of the pretrained content embedding rows fed in (zero rows where absent).
        num_node_types: size of the node-type vocabulary (``len(ENTITY_TYPES)``).
        degree_buckets: number of degree buckets (``contracts.DEGREE_BUCKETS``).
        id_buckets: rows of the ID embedding table (and of the history table), used only for nodes with
            interaction history. While those nodes number at most ``id_buckets`` (and ``exact_ids``), each gets a
            row of its own and the table is shrunk to their number (``training.fit.resolve_model_config``);
            beyond it their IDs are hashed into ``id_buckets`` rows (collisions share a row).
        exact_ids: give each node with history its own ID row while they fit in ``id_buckets`` (``False``: always
            hash, an ablation).
        use_history: add to each token a funnel-weighted mean of its engagement neighbours (SVD++ / FISM): a learned
            table indexed by the neighbours' IDs, projected to ``hidden_dim``. During training the engagement pair
            being scored is left out of both its ends' pools; inference pools the whole training history.
        history_content: also pool the neighbours' content embeddings (projected on their own), so a user's token
            carries what the items it engaged with are, which reaches items never engaged with.
        history_max_neighbours: pool at most this many neighbours per node, those of largest funnel weight (ties:
            lowest ``node_idx``); 0 pools them all. Bounds the per-step cost of hub nodes.
        max_dist: largest shortest-path distance stored in views; ``max_dist + 1`` means unreachable. It must be
            the ``max_dist`` the views were built with (the pipeline takes it from the graph settings).
        num_edge_types: edge-type vocabulary size excluding 0 ("no direct edge"); ids are 1..num_edge_types
            (raised to the graph's when it has more edge types).
        level_sizes: prototypes per hierarchy level, **coarsest first** so that model level ``i`` is
            ``cluster_assignments.level == i`` (0 = coarsest). Each level must be at least as large as the
            one before it.
        student_temp: DINO student softmax temperature (and that of the published cluster probabilities when
            the student is published).
        teacher_temp: DINO teacher softmax temperature (sharpening; lower = sharper; and that of the published
            cluster probabilities when the teacher is published).
        center_momentum: EMA momentum of the teacher center (DINO centering).
        teacher_target: ``"centering"`` (DINO center + sharpen) or ``"sinkhorn"`` (Sinkhorn-Knopp
            balanced targets, SwAV / DINOv2 style).
        sinkhorn_iters: Sinkhorn-Knopp iterations when ``teacher_target == "sinkhorn"``.
        engagement_temp: temperature of the engagement InfoNCE loss (the starting value when it is learned).
        engagement_temp_mode: ``"fixed"`` keeps ``engagement_temp``; ``"learned"`` trains its logarithm with the
            model (CLIP, Radford et al. 2021), never below ``engagement_temp_min``.
        engagement_temp_min: lower bound of a learned engagement temperature.
        engagement_weight: weight of the engagement loss relative to the summed DINO losses.
        engagement_sampling: how the engagement pairs of a step are drawn. ``"weighted"``: with probability
            proportional to the pair's funnel weight (the engagement weight of the deepest stage reached), each
            drawn pair counting once in the loss, so the loss is the funnel-weighted loss over all pairs and deep
            pairs are seen more often; ``"uniform"``: every pair alike, the loss weighted by the funnel weight.
        engagement_logq: subtract ``log`` of each node's in-batch sampling probability from the engagement
            logits (sampling-bias correction, Yi et al. 2019): in-batch negatives are drawn in proportion to
            popularity, so without it the loss pushes popular items down; with it, it estimates the full softmax.
            The probability is the one of ``engagement_sampling``: a node's share of the sampling weight.
        mask_known_positives: an in-batch candidate the row's user (item) engaged with in training is not used as
            a negative of that row (it is a positive of another pair, not a disliked item).
        hide_target_edge: during training, the user's view of an engagement pair loses the pair's item and the
            item's view loses the user (the direct edge to the target would otherwise give the answer away).
        cross_entity_weight: weight of the cross-entity distillation loss (0 = off), relative to the DINO
            losses: each anchor's student cluster distribution (narrow view) also fits the mean teacher
            distribution of the nodes it interacted with (a user: its items; an item: its users), weighted by the
            pair's funnel weight. The partners' teacher distributions are those of their latest step as anchors
            (at most one epoch old).
        cross_entity_impression_weight: weight of a pair that was seen but not engaged (funnel weight 0, e.g.
            an impression) in the cross-entity targets, on the scale of the funnel weights; 0 leaves such pairs
            out.
        anchor_feature_mask: probability of hiding an anchor's own ID and content features in its student
            distillation view (the anchor keeps its type and degree and must be recognised from its
            neighbourhood, so nodes with similar neighbourhoods share clusters).
        multi_crop_share: share of a step's anchors whose broad view the student also embeds (augmented like the
            narrow views) and fits to the teacher's broad-view targets (DINO multi-crop: the student sees local
            and global crops, the teacher only global ones); 0 = narrow views only.
        distillation_weight: weight of the summed DINO losses (0 = no self-distillation, an ablation).
        use_content: feed the pretrained content embeddings (``False`` = structure and IDs only, an ablation).
        structure_dim: width ``Ds`` of the graph-wide structure embedding rows fed in (``graph_nodes.
            structure_embedding``, zero rows where absent; 0 = none); fitted to the inputs like ``content_dim``.
        use_structure_embedding: feed the structure embedding, through a linear projection added to the token
            (``False`` = an ablation).
        structure_score_weight: ``kappa`` of the published score ``h_u . h_i + kappa s_u . s_i``: the published
            rows carry the transformer embedding ``h`` and the graph-wide structure embedding ``s``, whose longer
            rows (popular items) keep their weight, made unit-norm by the user-side / item-side transform of
            :func:`~hir_pipeline.model.publication.published_rows`. The clusters are ``h``'s alone. 0 publishes
            ``h`` alone; no effect without the structure embedding (``use_structure_embedding``,
            ``structure_dim > 0``).
        structural_bias: learned distance / type-pair / edge-type attention biases (``False`` = plain attention
            restricted to each view, an ablation).
        dropout: dropout on attention output and feed-forward.
        node_dropout: probability of removing a non-anchor node from the student view.
        edge_dropout: probability of hiding a direct edge (its type) in the student view.
        attn_block_size: query block of the chunked CPU attention and of the FlexAttention block mask.
        attention_backend: ``"auto"``, ``"flex"``, ``"bucketed"`` (view-sized), ``"chunked"`` or ``"dense"`` (see
            ``hir_pipeline.model.attention.dispatch.structural_attention``).
        compile_flex_cpu: compile FlexAttention on CPU too (slow first call, fused afterwards).
    """

    hidden_dim: int = 128
    num_layers: int = 4
    num_heads: int = 4
    mlp_ratio: int = 4
    out_dim: int = 128
    content_dim: int = 384
    num_node_types: int = len(ENTITY_TYPES)
    degree_buckets: int = DEGREE_BUCKETS
    id_buckets: int = 1 << 16
    exact_ids: bool = True
    use_history: bool = True
    history_content: bool = True
    history_max_neighbours: int = 256
    max_dist: int = DEFAULT_MAX_DIST
    num_edge_types: int = 32
    level_sizes: tuple[int, ...] = (8, 64, 512)
    student_temp: float = 0.1
    teacher_temp: float = 0.04
    center_momentum: float = 0.9
    teacher_target: TeacherTarget = "centering"
    sinkhorn_iters: int = 3
    engagement_temp: float = 0.1
    engagement_temp_mode: TemperatureMode = "learned"
    engagement_temp_min: float = 0.01
    engagement_weight: float = 1.0
    engagement_sampling: EngagementSampling = "weighted"
    engagement_logq: bool = True
    mask_known_positives: bool = True
    hide_target_edge: bool = True
    cross_entity_weight: float = 0.5
    cross_entity_impression_weight: float = 0.1
    anchor_feature_mask: float = 0.1
    multi_crop_share: float = 0.25
    distillation_weight: float = 1.0
    use_content: bool = True
    structure_dim: int = 0
    use_structure_embedding: bool = True
    structure_score_weight: float = 1.0
    structural_bias: bool = True
    dropout: float = 0.1
    node_dropout: float = 0.1
    edge_dropout: float = 0.1
    attn_block_size: int = 128
    attention_backend: AttentionBackend = "auto"
    compile_flex_cpu: bool = False

    def __post_init__(self) -> None:
        if self.hidden_dim % self.num_heads:
            raise ValueError("hidden_dim must be divisible by num_heads")
        if not (math.isfinite(self.structure_score_weight) and self.structure_score_weight >= 0):
            raise ValueError("structure_score_weight must be finite and >= 0")
        if list(self.level_sizes) != sorted(self.level_sizes):
            raise ValueError("level_sizes are coarsest first and must not shrink")
        if self.teacher_target not in TEACHER_TARGETS:
            raise ValueError(f"unknown teacher_target {self.teacher_target!r}; one of {TEACHER_TARGETS}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"unknown attention_backend {self.attention_backend!r}; one of {ATTENTION_BACKENDS}")
        if self.id_buckets < 1 or self.history_max_neighbours < 0:
            raise ValueError("id_buckets must be >= 1 and history_max_neighbours >= 0")
        if self.engagement_sampling not in ENGAGEMENT_SAMPLING:
            raise ValueError(f"unknown engagement_sampling {self.engagement_sampling!r}; one of {ENGAGEMENT_SAMPLING}")
        if self.engagement_temp_mode not in TEMPERATURE_MODES:
            raise ValueError(f"unknown engagement_temp_mode {self.engagement_temp_mode!r}; one of {TEMPERATURE_MODES}")
        if not 0 < self.engagement_temp_min <= self.engagement_temp:
            raise ValueError("engagement_temp_min must be in (0, engagement_temp]")
        for name in ("anchor_feature_mask", "multi_crop_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.cross_entity_weight < 0 or self.cross_entity_impression_weight < 0:
            raise ValueError("cross_entity_weight and cross_entity_impression_weight must be >= 0")

    @property
    def num_levels(self) -> int:
        return len(self.level_sizes)

    @property
    def publishes_structure(self) -> bool:
        """Whether the published rows carry the structure embedding (``structure_score_weight``)."""
        return self.structure_score_weight > 0 and self.use_structure_embedding and self.structure_dim > 0


@dataclass(frozen=True)
class TrainConfig:
    """Training loop settings.

    Args:
        epochs: passes over all anchors.
        batch_size: anchors (view pairs) per step.
        engagement_batch_size: (user, item) engagement pairs per step; 0 disables the engagement loss.
        lr: peak AdamW learning rate (linear warm-up, cosine decay).
        min_lr: final learning rate of the cosine decay.
        warmup_steps: linear warm-up steps.
        weight_decay: AdamW weight decay (not applied to biases, norms and the ID / history tables).
        id_lr: peak learning rate of the ID and history embedding tables (their own AdamW group, no weight decay,
            same warm-up and cosine shape); ``None``: ``lr``. A row is updated only when its node is in a batch, so
            it sees far fewer steps than the shared weights.
        grad_clip: max gradient norm (0 disables clipping).
        ema_momentum: teacher EMA momentum at the start; it follows a cosine to ``ema_momentum_end``.
        ema_momentum_end: teacher EMA momentum at the end of training.
        seed: seed of every random choice (batching, augmentation, dropout, init): same seed, same inputs, same
            machine and thread count give an identical model on CPU.
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda[:i]"``.
        bf16: bf16 autocast on CUDA devices that support it (ignored on CPU).
        checkpoint_dir: directory of per-epoch checkpoints; ``None`` disables checkpointing/resume.
        resume: resume from the latest checkpoint in ``checkpoint_dir`` when there is one.
        keep_checkpoints: how many most recent checkpoints to keep.
        log_every: log progress every this many steps (0: once per epoch only).
        pad_to: packed sequence lengths are padded to a multiple of this (FlexAttention block size).
        infer_batch_size: views per batch in ``infer``.
        prefetch_batches: step batches prepared ahead of the step in a background thread (views augmented and
            packed while the previous step computes; ``hir_pipeline.training.prefetch``); 0 prepares each one inside
            its step; ``None``: 2 when training on CUDA, 0 on CPU, where that thread takes cores from the step's own
            threads (``benchmarks/train_throughput.py --prefetch``). The batches, and so the model, are the same
            either way.
        published_encoder: which of the two trained networks is published (embeddings, cluster probabilities,
            the logged model): ``"student"`` or ``"teacher"`` (the EMA model). DINO publishes the teacher, whose
            weight average wins after a long schedule; after a short CPU schedule the EMA teacher lags the student
            instead (measured in ``docs/results.md``), hence the default ``"student"``. Each network embeds the
            views it was trained on (student: narrow, teacher: broad; ``Trainer.training_views``). The student's
            cluster probabilities are ``softmax(logits / student_temp)`` without centering: exactly the
            distribution the DINO loss fits to the teacher's targets (the centers are a running mean of *teacher*
            logits and belong to the teacher, whose probabilities stay ``softmax((logits - center) /
            teacher_temp)``).
        schedule_budget_s: fit the schedule into this many seconds of training (``None``: no limit, the schedule
            is exactly ``epochs``): after each epoch, the epochs that no longer fit at the mean epoch time so far are
            dropped and the learning-rate and EMA schedules end at the new last epoch, so a slow machine trains
            fewer, complete-schedule epochs instead of stopping mid-schedule. The number of epochs then depends on
            the machine's speed.
        engagement_weights: weight of an engaged (user, item) pair in the engagement loss per funnel stage,
            aligned with the graph's funnel (0 = not engagement); ``None``: the stage's depth above the first
            (``0, 1, 2, 3`` for the default funnel).
        recency_half_life: a user's engaged pairs are also weighted by how recent they are among its own actions:
            ``2 ** (-rank / recency_half_life)``, ``rank`` = how many of its engaged items it acted on later
            (``ModelInputs.with_recency``); the weight drives the engagement loss's sampling and every history pool,
            so a user is mostly its last few dozen items. ``None``: no recency weighting (calendar decay only,
            ``GraphConfig.half_life_days``, which cannot tell apart the items of one busy day).
        prototype_refinement_iters: after training, spherical k-means iterations over every node's head
            projection, started from the published network's learned prototypes, that move each prototype to the
            nodes it wins (``hir_pipeline.model.refine``; an emptied prototype is re-seeded at the worst-served node):
            the published clusters are then the groups the embedding space holds even where a short schedule left
            the distillation targets soft. 0 publishes the learned prototypes as they are. The embeddings are
            unchanged.
        processes: data-parallel training processes (the world size); 1 = one process, today's loop. With more,
            each rank trains on its shard of every global batch of ``batch_size`` anchors (and
            ``engagement_batch_size`` pairs) and the gradients are averaged across ranks
            (``hir_pipeline.training.parallel``); the launcher (``torchrun``, ``TorchDistributor``) starts the
            processes and ``hir_pipeline.training.distributed.train_rank`` joins them.
    """

    epochs: int = 10
    batch_size: int = 64
    engagement_batch_size: int = 64
    lr: float = 5e-4
    min_lr: float = 1e-5
    warmup_steps: int = 100
    weight_decay: float = 0.04
    id_lr: float | None = None
    grad_clip: float = 3.0
    ema_momentum: float = 0.996
    ema_momentum_end: float = 1.0
    seed: int = 0
    device: str = "auto"
    bf16: bool = True
    checkpoint_dir: str | None = None
    resume: bool = True
    keep_checkpoints: int = 2
    log_every: int = 50
    pad_to: int = 128
    infer_batch_size: int = 256
    prefetch_batches: int | None = None
    published_encoder: PublishedEncoder = "student"
    schedule_budget_s: float | None = None
    engagement_weights: tuple[float, ...] | None = None
    recency_half_life: float | None = 10.0
    prototype_refinement_iters: int = 20
    processes: int = 1

    def __post_init__(self) -> None:
        if self.recency_half_life is not None and not self.recency_half_life > 0:
            raise ValueError(f"recency_half_life must be > 0 or None, got {self.recency_half_life}")
        if self.prototype_refinement_iters < 0:
            raise ValueError("prototype_refinement_iters must be >= 0")
        if self.processes < 1:
            raise ValueError("processes must be >= 1")
        if self.prefetch_batches is not None and self.prefetch_batches < 0:
            raise ValueError("prefetch_batches must be >= 0 (or None: by device)")
        if self.schedule_budget_s is not None and self.schedule_budget_s <= 0:
            raise ValueError("schedule_budget_s must be > 0 (or None: no limit)")
        if self.id_lr is not None and self.id_lr < 0:
            raise ValueError("id_lr must be >= 0 (or None: lr)")
        if self.published_encoder not in PUBLISHED_ENCODERS:
            raise ValueError(f"unknown published_encoder {self.published_encoder!r}; one of {PUBLISHED_ENCODERS}")
