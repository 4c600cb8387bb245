"""Graph transformer encoder over packed views (Graphormer-style structural attention, Ying et al. 2021).

Node input (per token) = node-type embedding + projected content embedding (where present) + ID embedding
(only for nodes with interaction history, so cold-start nodes are embedded from content and structure alone)
+ degree-bucket embedding + the projected funnel-weighted pool of the node's engagement neighbours
(``hir_pipeline.model.history``; nodes with history only) + the projected graph-wide structure embedding
(spectral or FastRP, of the whole training graph, where present). ``num_layers`` pre-LN transformer layers with
:func:`~hir_pipeline.model.attention.structural_attention`; the anchor token (first token of each view)
is projected and L2-normalised: one embedding space for every entity type.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hir_pipeline.model.attention import (
    AttentionOptions,
    BiasTables,
    create_view_block_mask,
    resolve_backend,
    structural_attention,
    view_buckets,
)
from hir_pipeline.model.batch import PackedBatch
from hir_pipeline.model.config import ModelConfig
from hir_pipeline.model.features import NodeFeatures
from hir_pipeline.model.history import pooled_history


class NodeInputEmbedding(nn.Module):
    """Token input embedding (see module docstring).

    Args:
        cfg: model configuration (``hidden_dim``, ``num_node_types``, ``content_dim``, ``id_buckets``,
            ``degree_buckets``, ``use_history``, ``history_content``, ``structure_dim``).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.type_emb = nn.Embedding(cfg.num_node_types, cfg.hidden_dim)
        self.degree_emb = nn.Embedding(cfg.degree_buckets, cfg.hidden_dim)
        self.id_emb = nn.Embedding(cfg.id_buckets, cfg.hidden_dim)
        use = cfg.use_content and cfg.content_dim > 0
        self.content_proj = nn.Linear(cfg.content_dim, cfg.hidden_dim) if use else None
        # Small embeddings (BERT's std 0.02), not nn.Embedding's N(0, 1): a unit-norm content vector projects to a
        # small vector, which N(0, 1) type/degree embeddings (norm ~sqrt(hidden_dim)) drowned, so self-distillation
        # clustered nodes by type and degree instead of by what they are (docs/results.md).
        for table in (self.type_emb, self.degree_emb, self.id_emb):
            nn.init.normal_(table.weight, std=0.02)
        # History (SVD++'s implicit-feedback factors): a table of its own, read through the neighbours' ID rows.
        self.hist_emb = self.hist_proj = self.hist_content_proj = None
        if cfg.use_history:
            self.hist_emb = nn.Embedding(cfg.id_buckets, cfg.hidden_dim)
            nn.init.normal_(self.hist_emb.weight, std=0.02)
            self.hist_proj = nn.Linear(cfg.hidden_dim, cfg.hidden_dim)
            if cfg.history_content and use:
                self.hist_content_proj = nn.Linear(cfg.content_dim, cfg.hidden_dim)
        # No bias: a node without a structure embedding (zero row) gets no term. Same small std 0.02: a unit-norm
        # structure vector starts at the size of the type embedding, below the projected content.
        use_structure = cfg.use_structure_embedding and cfg.structure_dim > 0
        self.structure_proj = nn.Linear(cfg.structure_dim, cfg.hidden_dim, bias=False) if use_structure else None
        if self.structure_proj is not None:
            nn.init.normal_(self.structure_proj.weight, std=0.02)

    def id_tables(self) -> list[nn.Parameter]:
        """The per-node lookup tables (ID and history): trained with their own learning rate, without weight decay."""
        return [t.weight for t in (self.id_emb, self.hist_emb) if t is not None]

    def forward(self, node_idx: Tensor, feats: NodeFeatures, history_exclude: Tensor | None = None,
                hide: Tensor | None = None) -> Tensor:
        """Embeddings ``[S, hidden_dim]`` of the global nodes ``node_idx``.

        Args:
            node_idx: long ``[S]`` node of each token.
            feats: per-node features.
            history_exclude: long ``[S]`` neighbour left out of each token's history pool (-1: none; see
                ``PackedBatch.history_exclude``).
            hide: bool ``[S]``: tokens that lose their own ID and content terms (anchor-feature masking), or
                ``None``.
        """
        x = self.type_emb(feats.node_type[node_idx]) + self.degree_emb(feats.degree_bucket[node_idx])
        hist = feats.has_history[node_idx]
        has = feats.has_content[node_idx]
        if hide is not None:
            hist, has = hist & ~hide, has & ~hide
        x = x + self.id_emb(feats.id_bucket[node_idx]) * hist.unsqueeze(-1).to(x.dtype)
        if self.content_proj is not None:
            x = x + self.content_proj(feats.content[node_idx]) * has.unsqueeze(-1).to(x.dtype)
        if self.hist_emb is not None and feats.history is not None:
            x = x + self._history_term(node_idx, feats, history_exclude).to(x.dtype)
        if self.structure_proj is not None:
            x = x + self.structure_proj(feats.structure[node_idx])
        return x

    def _history_term(self, node_idx: Tensor, feats: NodeFeatures, exclude: Tensor | None) -> Tensor:
        tables = [(self.hist_emb.weight, feats.id_bucket)]
        if self.hist_content_proj is not None:
            tables.append((feats.content, None))
        pools, has_pool = pooled_history(feats.history, node_idx, tables, exclude)
        out = self.hist_proj(pools[0])
        if self.hist_content_proj is not None:
            out = out + self.hist_content_proj(pools[1])
        return out * has_pool.unsqueeze(-1).to(out.dtype)


class StructuralSelfAttention(nn.Module):
    """Multi-head self-attention with per-head learned distance / type-pair / edge-type biases.

    Args:
        cfg: model configuration.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_dim, 3 * cfg.hidden_dim)
        self.out = nn.Linear(cfg.hidden_dim, cfg.hidden_dim)
        self.dist_bias = nn.Parameter(torch.zeros(h, cfg.max_dist + 2), requires_grad=cfg.structural_bias)
        self.type_pair_bias = nn.Parameter(torch.zeros(h, cfg.num_node_types ** 2), requires_grad=cfg.structural_bias)
        self.edge_bias = nn.Parameter(torch.zeros(h, cfg.num_edge_types + 1), requires_grad=cfg.structural_bias)
        if cfg.structural_bias:  # start with "closer is more relevant" so structure matters from step one
            with torch.no_grad():
                self.dist_bias.copy_(-0.5 * torch.arange(cfg.max_dist + 2, dtype=torch.float32).expand(h, -1))

    def tables(self) -> BiasTables:
        return BiasTables(self.dist_bias, self.type_pair_bias, self.edge_bias)

    def forward(self, x: Tensor, batch: PackedBatch, backend: str, plan) -> Tensor:
        s, d = x.shape
        h = self.cfg.num_heads
        qkv = self.qkv(x).view(s, 3, h, d // h).permute(1, 2, 0, 3).unsqueeze(1)  # [3, 1, H, S, Dh]
        tables = self.tables()
        if qkv.dtype != tables.dist.dtype:
            tables = BiasTables(*(t.to(qkv.dtype) for t in tables))
        options = AttentionOptions(
            backend=backend, block_size=self.cfg.attn_block_size,
            compile_flex=True if batch.layout.view_id.is_cuda else self.cfg.compile_flex_cpu,
        )
        out = structural_attention(qkv[0], qkv[1], qkv[2], batch.layout, tables, self.cfg.num_node_types, options,
                                   plan)
        return self.out(out[0].transpose(0, 1).reshape(s, d))


class TransformerLayer(nn.Module):
    """Pre-LN transformer layer (Xiong et al. 2020) with structural self-attention.

    Args:
        cfg: model configuration.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_dim)
        self.attn = StructuralSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.hidden_dim)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.hidden_dim, cfg.mlp_ratio * cfg.hidden_dim),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.hidden_dim, cfg.hidden_dim),
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, batch: PackedBatch, backend: str, plan) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x), batch, backend, plan))
        return x + self.drop(self.mlp(self.norm2(x)))


@dataclass
class EncoderOutput:
    """Encoder result.

    Args:
        embedding: float ``[V, out_dim]`` L2-normalised anchor embeddings.
        hidden: float ``[S, hidden_dim]`` final token states (after the last LayerNorm).
    """

    embedding: Tensor
    hidden: Tensor


class GraphTransformerEncoder(nn.Module):
    """Packed-view graph transformer producing one L2-normalised embedding per view anchor.

    Args:
        cfg: model configuration.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = NodeInputEmbedding(cfg)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.hidden_dim)
        self.proj = nn.Linear(cfg.hidden_dim, cfg.out_dim)

    def forward(self, batch: PackedBatch, feats: NodeFeatures) -> EncoderOutput:
        x = self.embed(batch.node_idx, feats, batch.history_exclude, batch.hide_features)
        needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        backend = resolve_backend(self.cfg.attention_backend, x, needs_grad, self.cfg.compile_flex_cpu)
        # One attention plan for all layers: FlexAttention's block mask or the view-sized path's length buckets.
        plan = None
        if backend == "flex":
            plan = create_view_block_mask(batch.layout, self.cfg.attn_block_size)
        elif backend == "bucketed":
            plan = view_buckets(batch.layout)
        for layer in self.layers:
            x = layer(x, batch, backend, plan)
        x = self.norm(x)
        anchors = x[batch.layout.anchor_positions()]
        return EncoderOutput(embedding=F.normalize(self.proj(anchors).float(), dim=-1), hidden=x)
