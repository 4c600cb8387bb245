"""Benchmark: structural-bias attention without a dense bias vs a materialised bias + SDPA.

Packed batches of graph views (total length 256 .. --max-len) with Graphormer structural biases
(distance, node-type pair, edge type). Paths compared:

* ``flex``   -- FlexAttention with the structural ``score_mod`` and the view block mask, compiled with
  ``torch.compile`` (CPU: inductor's C++ flex template; CUDA: Triton). Forward on CPU, fwd+bwd on CUDA.
  With ``--no-compile`` this column is the dispatcher's CPU inference path instead (chunked, no grad).
* ``chunked`` -- the differentiable CPU path (``hir_pipeline.model.attention.chunked``), forward and fwd+bwd.
* ``dense``  -- builds the full ``[1, H, S, S]`` additive bias (the structural bias of every pair, ``-inf``
  across views) and calls ``scaled_dot_product_attention``; forward and fwd+bwd.

Peak extra memory (``*_peak_mb``) is the peak of bytes allocated and not yet freed *during* the call, over
what existed before it (q/k/v, bias tables and the packed int8 structure are allocated beforehand; the
output and, for fwd+bwd, the input gradients are included). CPU: read from the PyTorch profiler's allocator
trace (``profile_memory=True``: every CPU allocation/free with its size, in order; cumulative sum, max).
This counts every tensor torch allocates, including inductor temporaries and the work buffers of the compiled
C++ flex kernel (they come from the same allocator): per-thread scratch, O(block), and -- in torch 2.15's CPU
flex template -- K and V "reorder" buffers of the full K/V size, O(S * D), allocated even in float32 where
nothing is packed into them. ``output_mb`` is the output's share of every peak. CUDA:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the memory allocated before. Times
are medians of ``--repeats`` runs after one warm-up (compilation excluded), measured outside the profiler.

Usage: ``python benchmarks/attention_bias.py [--max-len 4096] [--json out.json] [--no-compile]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo
from torch.nn.attention.flex_attention import flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hir_pipeline.model.attention import (  # noqa: E402
    BiasTables,
    build_layout,
    chunked_structural_attention,
    create_view_block_mask,
    dense_structural_attention,
    layout_score_mod,
)

NUM_TYPES = 6


def make_case(seq_len: int, view_size: int, heads: int, head_dim: int, device: torch.device, seed: int = 0):
    """Random packed batch of exactly ``seq_len`` tokens (views of ``view_size / 2 .. 1.5 view_size`` nodes)."""
    g = torch.Generator().manual_seed(seed)
    lengths, total = [], 0
    while True:
        n = int(torch.randint(view_size // 2, view_size * 3 // 2 + 1, (1,), generator=g))
        if total + n > seq_len:
            break
        lengths.append(n)
        total += n
    if not lengths:
        lengths = [seq_len]
    types = [torch.randint(0, NUM_TYPES, (n,), generator=g) for n in lengths]
    dists = [torch.randint(0, 6, (n * n,), generator=g).to(torch.int8) for n in lengths]
    edges = [torch.randint(0, 33, (n * n,), generator=g).to(torch.uint8) for n in lengths]
    layout = build_layout(lengths, types, dists, edges, pad_to=128).to(device)
    tables = BiasTables(*(torch.randn(heads, c, generator=g).to(device).requires_grad_()
                          for c in (6, NUM_TYPES * NUM_TYPES, 33)))
    qkv = [torch.randn(1, heads, layout.seq_len, head_dim, generator=g).to(device).requires_grad_()
           for _ in range(3)]
    return layout, tables, qkv


def peak_extra_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated during ``fn()`` over the allocation level before it (see module docstring)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        return peak
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    level = peak = 0
    for e in events:
        level += e.nbytes()
        peak = max(peak, level)
    return peak


def median_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()  # warm-up (and compilation)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_one(s: int, args: argparse.Namespace, device: torch.device, compiled, compile_flex: bool) -> dict:
    """Measure every path at packed length ``s`` (one row of the table)."""
    layout, tables, (q, k, v) = make_case(s, args.view_size, args.heads, args.head_dim, device)
    block_mask = create_view_block_mask(layout, 128)
    score_mod = layout_score_mod(tables, layout, NUM_TYPES)
    # CPU FlexAttention refuses inputs that require grad, even under no_grad
    qd, kd, vd = (x.detach() for x in (q, k, v))
    score_mod_nograd = layout_score_mod(BiasTables(*(t.detach() for t in tables)), layout, NUM_TYPES)
    grad_out = torch.randn_like(q)

    def flex_fwd():
        with torch.no_grad():
            if compile_flex:
                return compiled(qd, kd, vd, score_mod=score_mod_nograd, block_mask=block_mask)
            return chunked_structural_attention(q, k, v, layout, tables, NUM_TYPES)

    def chunked_fwd():
        with torch.no_grad():
            return chunked_structural_attention(q, k, v, layout, tables, NUM_TYPES)

    def chunked_fwd_bwd():
        out = chunked_structural_attention(q, k, v, layout, tables, NUM_TYPES)
        return torch.autograd.grad(out, (q, k, v, *tables), grad_out)

    def dense_fwd():
        with torch.no_grad():
            return dense_structural_attention(q, k, v, layout, tables, NUM_TYPES)

    def dense_fwd_bwd():
        out = dense_structural_attention(q, k, v, layout, tables, NUM_TYPES)
        return torch.autograd.grad(out, (q, k, v, *tables), grad_out)

    def flex_fwd_bwd():
        out = compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)
        return torch.autograd.grad(out, (q, k, v, *tables), grad_out)

    t_flex = median_ms(flex_fwd, device, args.repeats)  # compiles first, before the memory probe
    row = {
        "seq_len": layout.seq_len,
        "num_views": layout.num_views,
        "device": device.type,
        "flex_backend": ("compiled_flex" if compile_flex else "chunked") + "_fwd",
        "flex_peak_mb": peak_extra_bytes(flex_fwd, device) / 2**20,
        "dense_peak_mb": peak_extra_bytes(dense_fwd, device) / 2**20,
        "flex_ms": t_flex,
        "dense_ms": median_ms(dense_fwd, device, args.repeats),
        "chunked_peak_mb": peak_extra_bytes(chunked_fwd, device) / 2**20,
        "chunked_ms": median_ms(chunked_fwd, device, args.repeats),
        "dense_bias_mb": args.heads * layout.seq_len ** 2 * 4 / 2**20,
        "structure_mb": (layout.dist.numel() + layout.edge_type.numel()) / 2**20,
        # the attention output, part of every path's peak: O(S * D), D / S of the dense bias
        "output_mb": q.numel() * q.element_size() / 2**20,
    }
    if not args.no_backward:
        row["dense_fwd_bwd_peak_mb"] = peak_extra_bytes(dense_fwd_bwd, device) / 2**20
        row["dense_fwd_bwd_ms"] = median_ms(dense_fwd_bwd, device, args.repeats)
        if device.type == "cuda" and compile_flex:
            row["train_backend"] = "compiled_flex"
            row["train_fwd_bwd_peak_mb"] = peak_extra_bytes(flex_fwd_bwd, device) / 2**20
            row["train_fwd_bwd_ms"] = median_ms(flex_fwd_bwd, device, args.repeats)
        else:
            row["train_backend"] = "chunked"
            row["train_fwd_bwd_peak_mb"] = peak_extra_bytes(chunked_fwd_bwd, device) / 2**20
            row["train_fwd_bwd_ms"] = median_ms(chunked_fwd_bwd, device, args.repeats)
    return row


def run(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    compile_flex = not args.no_compile
    if compile_flex:
        torch._dynamo.config.cache_size_limit = 64
    # static shapes: one specialised kernel per length, as a training job padded to fixed lengths would use
    compiled = torch.compile(flex_attention, dynamic=False)
    rows = []
    s = args.min_len
    while s <= args.max_len:
        row = bench_one(s, args, device, compiled, compile_flex)
        rows.append(row)
        print_row(row, header=len(rows) == 1)
        s *= 2
    return rows


COLUMNS = ["seq_len", "num_views", "flex_peak_mb", "dense_peak_mb", "flex_ms", "dense_ms", "chunked_peak_mb",
           "chunked_ms", "train_fwd_bwd_peak_mb", "train_fwd_bwd_ms", "dense_fwd_bwd_peak_mb", "dense_fwd_bwd_ms"]


def print_row(row: dict, header: bool) -> None:
    cols = [k for k in COLUMNS if k in row]
    if header:
        print(" ".join(f"{k:>{max(len(k), 8)}}" for k in cols))
    cells = []
    for k in cols:
        value = row[k]
        text = f"{value:.2f}" if isinstance(value, float) else str(value)
        cells.append(f"{text:>{max(len(k), 8)}}")
    print(" ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--view-size", type=int, default=48, help="mean nodes per view")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (flex column = chunked path)")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--json", type=Path, default=None, help="write the rows as a JSON list")
    args = p.parse_args(argv)
    rows = run(args)
    last = rows[-1]
    bias = last["dense_bias_mb"]
    print(f"\nat S={last['seq_len']}, extra memory as a share of the dense bias ({bias:.0f} MB), output "
          f"({100 * last['output_mb'] / bias:.2f}%) included:")
    print(f"  {last['flex_backend']}: {100 * last['flex_peak_mb'] / bias:.2f}%, forward speed-up over dense "
          f"{last['dense_ms'] / last['flex_ms']:.2f}x")
    print(f"  chunked_fwd (the default CPU path): {100 * last['chunked_peak_mb'] / bias:.2f}%, forward speed-up "
          f"over dense {last['dense_ms'] / last['chunked_ms']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
