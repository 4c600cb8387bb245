"""Model and training configuration as plain frozen dataclasses.

Every knob of the graph transformer (``hir_pipeline.model.encoder``), the prototype hierarchy
(``hir_pipeline.model.hierarchy``), the self-distillation objective (``hir_pipeline.model.distillation``)
and the training loop (``hir_pipeline.training.trainer``) lives here, with its default documented, so
the orchestration layer can expose them unchanged as run config.
"""

from __future__ import annotations

from dataclasses import dataclass

from hir_pipeline.contracts import DEGREE_BUCKETS, ENTITY_TYPES

#: Values of ``TrainConfig.published_encoder``.
PUBLISHED_ENCODERS = ("student", "teacher")
#: Values of ``ModelConfig.engagement_sampling``.
ENGAGEMENT_SAMPLING = ("weighted", "uniform")
#: Values of ``ModelConfig.engagement_temp_mode``.
TEMPERATURE_MODES = ("fixed", "learned")


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
        id_buckets: hashed-ID embedding buckets, used only for nodes with interaction history.
        max_dist: largest shortest-path distance stored in views; ``max_dist + 1`` means unreachable.
        num_edge_types: edge-type vocabulary size excluding 0 ("no direct edge"); ids are 1..num_edge_types.
        level_sizes: prototypes per hierarchy level, **coarsest first** so that model level ``i`` is
            ``cluster_assignments.level == i`` (0 = coarsest). Each level must be at least as large as the
            one before it.
        student_temp: DINO student softmax temperature.
        teacher_temp: DINO teacher softmax temperature (sharpening; lower = sharper).
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
        structural_bias: learned distance / type-pair / edge-type attention biases (``False`` = plain attention
            restricted to each view, an ablation).
        dropout: dropout on attention output and feed-forward.
        node_dropout: probability of removing a non-anchor node from the student view.
        edge_dropout: probability of hiding a direct edge (its type) in the student view.
        attn_block_size: query block of the chunked CPU attention and of the FlexAttention block mask.
        attention_backend: ``"auto"``, ``"flex"``, ``"chunked"`` or ``"dense"`` (see
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
    max_dist: int = 4
    num_edge_types: int = 32
    level_sizes: tuple[int, ...] = (8, 64, 512)
    student_temp: float = 0.1
    teacher_temp: float = 0.04
    center_momentum: float = 0.9
    teacher_target: str = "centering"
    sinkhorn_iters: int = 3
    engagement_temp: float = 0.1
    engagement_temp_mode: str = "learned"
    engagement_temp_min: float = 0.01
    engagement_weight: float = 1.0
    engagement_sampling: str = "weighted"
    engagement_logq: bool = True
    mask_known_positives: bool = True
    hide_target_edge: bool = True
    cross_entity_weight: float = 0.5
    cross_entity_impression_weight: float = 0.1
    anchor_feature_mask: float = 0.1
    multi_crop_share: float = 0.25
    distillation_weight: float = 1.0
    use_content: bool = True
    structural_bias: bool = True
    dropout: float = 0.1
    node_dropout: float = 0.1
    edge_dropout: float = 0.1
    attn_block_size: int = 128
    attention_backend: str = "auto"
    compile_flex_cpu: bool = False

    def __post_init__(self) -> None:
        if self.hidden_dim % self.num_heads:
            raise ValueError("hidden_dim must be divisible by num_heads")
        if list(self.level_sizes) != sorted(self.level_sizes):
            raise ValueError("level_sizes are coarsest first and must not shrink")
        if self.teacher_target not in ("centering", "sinkhorn"):
            raise ValueError(f"unknown teacher_target {self.teacher_target!r}")
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
        weight_decay: AdamW weight decay.
        grad_clip: max gradient norm (0 disables clipping).
        ema_momentum: teacher EMA momentum at the start; it follows a cosine to ``ema_momentum_end``.
        ema_momentum_end: teacher EMA momentum at the end of training.
        seed: seed of every random choice (batching, augmentation, dropout, init).
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda[:i]"``.
        bf16: bf16 autocast on CUDA devices that support it (ignored on CPU).
        checkpoint_dir: directory of per-epoch checkpoints; ``None`` disables checkpointing/resume.
        resume: resume from the latest checkpoint in ``checkpoint_dir`` when there is one.
        keep_checkpoints: how many most recent checkpoints to keep.
        log_every: log progress every this many steps.
        pad_to: packed sequence lengths are padded to a multiple of this (FlexAttention block size).
        infer_batch_size: views per batch in ``infer``.
        published_encoder: which of the two trained networks is published (embeddings, cluster probabilities,
            the logged model): ``"student"`` or ``"teacher"`` (the EMA model). DINO publishes the teacher, whose
            weight average beats the student after a long schedule; with a short CPU schedule the EMA teacher
            lags the student instead. On the MovieLens evaluation split with ``config/cpu_sample.yaml`` (8
            epochs, 184 steps) Recall@20 warm / cold was 0.156 / 0.167 for the teacher and 0.210 / 0.224 for the
            student (content-only cold 0.145), hence the default ``"student"``. Each network embeds the views it
            was trained on (student: narrow, teacher: broad; ``Trainer.training_views``). The student's cluster
            probabilities are ``softmax(logits / student_temp)`` without centering: exactly the distribution the
            DINO loss fits to the teacher's targets (the centers are a running mean of *teacher* logits and
            belong to the teacher, whose probabilities stay ``softmax((logits - center) / teacher_temp)``).
    """

    epochs: int = 10
    batch_size: int = 64
    engagement_batch_size: int = 64
    lr: float = 5e-4
    min_lr: float = 1e-5
    warmup_steps: int = 100
    weight_decay: float = 0.04
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
    published_encoder: str = "student"

    def __post_init__(self) -> None:
        if self.published_encoder not in PUBLISHED_ENCODERS:
            raise ValueError(f"unknown published_encoder {self.published_encoder!r}; one of {PUBLISHED_ENCODERS}")
