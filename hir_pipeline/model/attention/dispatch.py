"""``structural_attention``: one entry point, the right implementation per device and autograd state.

* CUDA: compiled FlexAttention (fused Triton kernel, forward and backward, block-sparse view mask).
* CPU, gradients needed: the view-sized path (``bucketed.py``): views grouped by length, one batched dense
  attention per group, differentiable, work proportional to ``sum_v n_v^2``.
* CPU, no gradients: compiled FlexAttention when ``compile_cpu`` is set, otherwise the view-sized path.

The chunked path (``chunked.py``, 128-token query blocks with checkpointing) stays available as
``backend="chunked"``: its memory is bounded by one block whatever the view sizes.

Why not eager FlexAttention on CPU: without ``torch.compile`` it materialises the full ``[B, H, S, S]`` score
matrix plus int64 index grids of the same size, and it re-traces for every new shape; measured on this
project's benchmark (``benchmarks/attention_bias.py``) it is several times slower than both the chunked path
and the dense baseline. It stays available as ``backend="flex"`` (and is what tests compare against).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from hir_pipeline.model.attention.bucketed import ViewBuckets, bucketed_structural_attention
from hir_pipeline.model.attention.chunked import chunked_structural_attention
from hir_pipeline.model.attention.dense import dense_structural_attention
from hir_pipeline.model.attention.layout import PackedLayout
from hir_pipeline.model.attention.masks import create_view_block_mask
from hir_pipeline.model.attention.options import AttentionOptions
from hir_pipeline.model.attention.score_mods import BiasTables, layout_score_mod
from hir_pipeline.model.config import ATTENTION_BACKENDS

BACKENDS = ATTENTION_BACKENDS
_COMPILED_FLEX = None


def compiled_flex_attention():
    """``torch.compile(flex_attention)``, compiled once per process.

    Default (automatic) dynamic shapes: the first change of the packed length recompiles once with a dynamic
    length, so variable-size batches do not trigger a compile per length.
    """
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(flex_attention)
    return _COMPILED_FLEX


def resolve_backend(backend: str, q: Tensor, needs_grad: bool, compile_cpu: bool = False) -> str:
    """The implementation ``structural_attention`` runs for ``backend`` (``"auto"`` resolved).

    Args:
        backend: requested backend (one of ``BACKENDS``).
        q: the query tensor (its device decides).
        needs_grad: whether autograd has to differentiate through the attention.
        compile_cpu: whether compiled FlexAttention may be used on CPU.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; expected one of {BACKENDS}")
    if backend != "auto":
        return backend
    if q.is_cuda or (compile_cpu and not needs_grad):
        return "flex"
    return "bucketed"


def structural_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: PackedLayout,
    tables: BiasTables,
    num_node_types: int,
    options: AttentionOptions | None = None,
    plan: BlockMask | ViewBuckets | None = None,
) -> Tensor:
    """Multi-head attention with Graphormer structural biases over a packed batch of views.

    Args:
        q, k, v: ``[1, H, S, D]``.
        layout: packed layout of the batch (``S == layout.seq_len``).
        tables: per-head :class:`BiasTables`.
        num_node_types: node-type vocabulary size.
        options: backend, scale, block size and compilation (:class:`~.options.AttentionOptions`); default:
            ``AttentionOptions()``.
        plan: the per-batch plan of the backend that runs, shared across layers: the view block mask of
            FlexAttention (:func:`~.masks.create_view_block_mask`) or the :func:`~.bucketed.view_buckets` of the
            view-sized path; a plan of another kind, or ``None``, is built here from ``layout``.

    Returns:
        ``[1, H, S, D]``.
    """
    options = AttentionOptions() if options is None else options
    scale = options.scale
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *tables))
    chosen = resolve_backend(options.backend, q, needs_grad, compile_cpu=bool(options.compile_flex))
    if chosen == "bucketed":
        buckets = plan if isinstance(plan, ViewBuckets) else None
        return bucketed_structural_attention(q, k, v, layout, tables, num_node_types, scale=scale, buckets=buckets)
    if chosen == "chunked":
        return chunked_structural_attention(q, k, v, layout, tables, num_node_types, options)
    if chosen == "dense":
        return dense_structural_attention(q, k, v, layout, tables, num_node_types, scale=scale)
    block_mask = plan if isinstance(plan, BlockMask) else create_view_block_mask(layout, options.block_size)
    if not needs_grad:
        # CPU FlexAttention rejects inputs that require grad even under no_grad
        q, k, v = q.detach(), k.detach(), v.detach()
        tables = BiasTables(*(t.detach() for t in tables))
    score_mod = layout_score_mod(tables, layout, num_node_types)
    compile_flex = q.is_cuda if options.compile_flex is None else options.compile_flex
    fn = compiled_flex_attention() if compile_flex else flex_attention
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
