"""Structural attention: FlexAttention, chunked and dense paths compute the same masked, biased function."""

from __future__ import annotations

import pytest
import torch

from hir_pipeline.model.attention import (
    AttentionOptions,
    BiasTables,
    bucketed_structural_attention,
    build_layout,
    chunked_structural_attention,
    create_block_mask,
    create_view_block_mask,
    dense_structural_attention,
    resolve_backend,
    structural_attention,
    view_buckets,
)

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

T = 6  # node types
H = 3
D = 8


def _random_layout(lengths, seed=0, pad_to=128, max_dist=4, edge_types=12):
    g = torch.Generator().manual_seed(seed)
    types = [torch.randint(0, T, (n,), generator=g) for n in lengths]
    dists = [torch.randint(0, max_dist + 2, (n * n,), generator=g).to(torch.int8) for n in lengths]
    edges = [torch.randint(0, edge_types + 1, (n * n,), generator=g).to(torch.uint8) for n in lengths]
    return build_layout(lengths, types, dists, edges, pad_to=pad_to)


def _tables(seed=1, max_dist=4, edge_types=12, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return BiasTables(*(torch.randn(H, c, generator=g).requires_grad_(requires_grad)
                        for c in (max_dist + 2, T * T, edge_types + 1)))


def _qkv(s, seed=2, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, H, s, D, generator=g).requires_grad_(requires_grad) for _ in range(3)]


LENGTHS = [5, 17, 1, 40, 9, 100, 3, 60]


def test_layout_is_compact():
    layout = _random_layout(LENGTHS)
    assert layout.seq_len % 128 == 0 and layout.seq_len >= sum(LENGTHS)
    pad = layout.seq_len - sum(LENGTHS)
    # pair buffers hold sum n_v^2 (+ the pad view), never S^2
    assert layout.dist.numel() == sum(n * n for n in LENGTHS) + pad * pad
    assert layout.dist.dtype == torch.int8 and layout.edge_type.dtype == torch.uint8
    assert layout.anchor_positions().tolist()[:3] == [0, 5, 22]


def test_view_block_mask_matches_torch_create_block_mask():
    layout = _random_layout(LENGTHS)
    ours = create_view_block_mask(layout, 128)
    ref = create_block_mask(layout.view_id, 128)
    assert torch.equal(ours.to_dense(), ref.to_dense())


@pytest.mark.parametrize("block_size", [16, 128])
def test_chunked_and_dispatch_equal_flex_forward(block_size):
    layout = _random_layout(LENGTHS)
    tables = _tables()
    q, k, v = _qkv(layout.seq_len)
    flex = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="flex"))
    chunked = chunked_structural_attention(q, k, v, layout, tables, T, AttentionOptions(block_size=block_size))
    dense = dense_structural_attention(q, k, v, layout, tables, T)
    auto = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="auto", block_size=block_size))
    assert flex.shape == (1, H, layout.seq_len, D)
    torch.testing.assert_close(chunked, flex, atol=1e-5, rtol=0)
    torch.testing.assert_close(dense, flex, atol=1e-5, rtol=0)
    torch.testing.assert_close(auto, flex, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pad_to", [16, 128])
def test_bucketed_equals_flex_forward(pad_to):
    layout = _random_layout(LENGTHS, pad_to=pad_to)
    tables = _tables()
    q, k, v = _qkv(layout.seq_len)
    flex = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="flex", block_size=pad_to))
    bucketed = bucketed_structural_attention(q, k, v, layout, tables, T)
    auto = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="auto"))  # CPU -> view-sized path
    torch.testing.assert_close(bucketed, flex, atol=1e-5, rtol=0)
    torch.testing.assert_close(auto, flex, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", ["flex", "bucketed"])
def test_precomputed_plan_gives_the_same_output(backend):
    """A plan of the backend that runs is used as is; a plan of another kind is ignored (built from the layout)."""
    layout = _random_layout(LENGTHS)
    tables = _tables()
    q, k, v = _qkv(layout.seq_len)
    options = AttentionOptions(backend=backend)
    built = structural_attention(q, k, v, layout, tables, T, options)
    plans = {"flex": create_view_block_mask(layout, options.block_size), "bucketed": view_buckets(layout)}
    for plan in plans.values():
        assert torch.equal(structural_attention(q, k, v, layout, tables, T, options, plan), built)


def test_view_buckets_cover_every_token_once_with_view_sized_blocks():
    layout = _random_layout(LENGTHS)
    plan = view_buckets(layout, min_bucket=8)
    assert sorted(plan.order.tolist()) == list(range(layout.seq_len))
    assert torch.equal(plan.order[plan.inverse], torch.arange(layout.seq_len))
    pad = layout.seq_len - sum(LENGTHS)
    # each view lands in the smallest power-of-two bucket >= max(8, n): 5,1,3 -> 8; 9 -> 16; 17 -> 32; ...
    got = {b.tokens.shape[1]: b.tokens.shape[0] for b in plan.buckets}
    want: dict[int, int] = {}
    for n in [*LENGTHS, pad]:
        length = max(8, 1 << (n - 1).bit_length())
        want[length] = want.get(length, 0) + 1
    assert got == want
    # the work is sum over views of L^2, far below the chunked path's 128-token blocks
    assert sum(b.tokens.shape[0] * b.tokens.shape[1] ** 2 for b in plan.buckets) < layout.seq_len * 128


def test_bucketed_gradients_match_dense_reference():
    layout = _random_layout([7, 3, 20, 11, 33], pad_to=16)
    tables = _tables(requires_grad=True)
    q, k, v = _qkv(layout.seq_len, requires_grad=True)
    weight = torch.randn(1, H, layout.seq_len, D, generator=torch.Generator().manual_seed(5))
    inputs = [q, k, v, *tables]
    out = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="auto"))  # -> bucketed (grad, CPU)
    grads = torch.autograd.grad((out * weight).sum(), inputs)
    ref = dense_structural_attention(q, k, v, layout, tables, T)
    ref_grads = torch.autograd.grad((ref * weight).sum(), inputs)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
        assert g.abs().sum() > 0


def test_chunked_gradients_match_dense_reference():
    layout = _random_layout([7, 3, 20, 11], pad_to=16)
    tables = _tables(requires_grad=True)
    q, k, v = _qkv(layout.seq_len, requires_grad=True)
    weight = torch.randn(1, H, layout.seq_len, D, generator=torch.Generator().manual_seed(5))
    inputs = [q, k, v, *tables]

    out = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend="chunked", block_size=16))
    grads = torch.autograd.grad((out * weight).sum(), inputs)
    ref = dense_structural_attention(q, k, v, layout, tables, T)
    ref_grads = torch.autograd.grad((ref * weight).sum(), inputs)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    assert all(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("backend", ["flex", "bucketed", "chunked"])
def test_views_do_not_see_each_other(backend):
    lengths = [10, 30, 20]
    layout = _random_layout(lengths)
    tables = _tables()
    q, k, v = _qkv(layout.seq_len)
    base = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend=backend))
    # perturb view 1 entirely: its tokens and its structure
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[:, :, 10:40] += torch.randn_like(x[:, :, 10:40])
    off = int(layout.pair_offset[1])
    layout.dist[off:off + 900] = (layout.dist[off:off + 900] + 1) % 6
    layout.node_type[10:40] = (layout.node_type[10:40] + 1) % T
    out = structural_attention(q2, k2, v2, layout, tables, T, AttentionOptions(backend=backend))
    keep = torch.ones(layout.seq_len, dtype=torch.bool)
    keep[10:40] = False
    torch.testing.assert_close(out[:, :, keep], base[:, :, keep], atol=1e-6, rtol=0)
    assert not torch.allclose(out[:, :, 10:40], base[:, :, 10:40])


@pytest.mark.parametrize("backend", ["flex", "bucketed", "chunked"])
def test_changing_one_distance_changes_the_output(backend):
    layout = _random_layout([12, 8])
    tables = _tables()
    q, k, v = _qkv(layout.seq_len)
    base = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend=backend))
    # view 1, pair (local 2 -> local 5): query token 12 + 2 = 14
    pos = int(layout.pair_offset[1]) + 2 * 8 + 5
    layout.dist[pos] = (layout.dist[pos] + 3) % 6
    out = structural_attention(q, k, v, layout, tables, T, AttentionOptions(backend=backend))
    changed = (out - base).abs().amax(dim=(0, 1, 3)) > 1e-6
    assert changed.nonzero().flatten().tolist() == [14]


def test_resolve_backend_rules():
    q = torch.zeros(1, 1, 128, 4)
    assert resolve_backend("auto", q, needs_grad=True) == "bucketed"
    assert resolve_backend("auto", q, needs_grad=False) == "bucketed"
    assert resolve_backend("chunked", q, needs_grad=True) == "chunked"
    assert resolve_backend("auto", q, needs_grad=False, compile_cpu=True) == "flex"
    assert resolve_backend("dense", q, needs_grad=True) == "dense"
    with pytest.raises(ValueError):
        resolve_backend("nope", q, needs_grad=False)
