"""Document ("view") masking for packed variable-length views, FlexAttention style.

A token may only attend to tokens of its own view. ``view_mask_mod`` is the elementwise rule;
``create_view_block_mask`` builds the block-sparse :class:`BlockMask` directly from the contiguous view
ranges (``O((S / block)^2)`` small ints, no ``S x S`` boolean), and ``create_block_mask`` is the generic
torch helper kept for cross-checking.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask
from torch.nn.attention.flex_attention import create_block_mask as _torch_create_block_mask

from hir_pipeline.model.attention.layout import PackedLayout


def view_mask_mod(view_id: Tensor) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """``mask_mod`` allowing attention only within the same view.

    Args:
        view_id: int ``[S]`` view of each packed token.
    """

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return view_id[q_idx] == view_id[kv_idx]

    return mask_mod


def create_block_mask(view_id: Tensor, block_size: int = 128) -> BlockMask:
    """Generic ``torch`` block-mask construction from :func:`view_mask_mod` (evaluates the mask densely).

    Args:
        view_id: int ``[S]`` view of each packed token (``S`` a multiple of ``block_size``).
        block_size: FlexAttention tile size.
    """
    s = view_id.numel()
    return _torch_create_block_mask(view_mask_mod(view_id), None, None, s, s, device=view_id.device,
                                    BLOCK_SIZE=block_size)


def create_view_block_mask(layout: PackedLayout, block_size: int = 128) -> BlockMask:
    """Block mask of :func:`view_mask_mod` built from the view ranges of ``layout``.

    A key block is "full" (mask evaluation skipped by the kernel) when it and the query block lie inside one
    single view; it is "partial" when it merely intersects the query block's key span.

    Args:
        layout: the packed batch (``seq_len`` a multiple of ``block_size``).
        block_size: FlexAttention tile size.
    """
    s = layout.seq_len
    if s % block_size:
        raise ValueError(f"packed length {s} is not a multiple of block size {block_size}")
    nb = s // block_size
    view_id = layout.view_id.tolist()
    spans = layout.query_block_spans(block_size)
    partial = torch.zeros(nb, nb, dtype=torch.bool)
    full = torch.zeros(nb, nb, dtype=torch.bool)
    for qb, (qs, qe, ks, ke) in enumerate(spans):
        kb0, kb1 = ks // block_size, -(-ke // block_size)
        single_view = view_id[qs] == view_id[qe - 1]
        for kb in range(kb0, kb1):
            a, z = kb * block_size, (kb + 1) * block_size - 1
            if single_view and view_id[a] == view_id[z] == view_id[qs]:
                full[qb, kb] = True
            else:
                partial[qb, kb] = True

    def ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
        num = dense.sum(-1).to(torch.int32)
        # stable sort puts the selected blocks first, in ascending block order
        idx = torch.argsort((~dense).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num[None, None], idx[None, None]

    kv_num, kv_idx = ordered(partial)
    full_num, full_idx = ordered(full)
    device = layout.device
    return BlockMask.from_kv_blocks(
        kv_num.to(device), kv_idx.to(device), full_num.to(device), full_idx.to(device),
        BLOCK_SIZE=block_size, mask_mod=view_mask_mod(layout.view_id), seq_lengths=(s, s),
    )
