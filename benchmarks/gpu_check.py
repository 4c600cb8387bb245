"""GPU check: train the hierarchical graph transformer for a few hundred steps on synthetic views with compiled
FlexAttention, and compare with the same training on the dense materialised-bias path.

Reports, per attention backend: median step time (compile/warm-up steps excluded), peak memory and the losses,
then the speed-up of FlexAttention over the dense bias. Needs only torch (and this repository's torch-only
``hir_pipeline`` core). Runs on CPU too, as a smoke test: ``python benchmarks/gpu_check.py --device cpu --steps 3``
(on CPU the "flex" run uses the dispatcher's training path, the chunked attention).

Peak memory: CUDA ``torch.cuda.max_memory_allocated`` of the run; CPU: the process' peak RSS (``resource``),
which only grows across runs, so read it as an upper bound.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hir_pipeline.model import ModelConfig, TrainConfig  # noqa: E402
from hir_pipeline.training import Trainer  # noqa: E402
from hir_pipeline.training.toy import ToyGraphSettings, make_toy_graph  # noqa: E402


def run_backend(backend: str, graph, args, device: torch.device, steps: int) -> dict:
    mcfg = ModelConfig(hidden_dim=args.hidden, num_layers=args.layers, num_heads=args.heads, out_dim=args.hidden,
                       content_dim=32, id_buckets=4096, level_sizes=(8, 32, 128), max_dist=3,
                       attention_backend=backend, attn_block_size=128)
    tcfg = TrainConfig(epochs=1, batch_size=args.batch_size, engagement_batch_size=args.batch_size,
                       device=str(device), seed=0, warmup_steps=10, log_every=0, pad_to=args.pad_to)
    trainer = Trainer(mcfg, tcfg, graph.features, graph.broad_views, graph.narrow_views, graph.engagement)
    trainer.total_steps = steps
    rng = np.random.default_rng(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    n_pairs = len(trainer.pairs[0]) if trainer.pairs is not None else 0
    for step in range(steps):
        anchors = rng.choice(trainer.anchors, size=min(args.batch_size, len(trainer.anchors)), replace=False)
        pair_idx = rng.integers(0, n_pairs, size=min(args.batch_size, n_pairs)) if n_pairs else None
        t0 = time.perf_counter()
        out = trainer.train_step(step, anchors, rng, pair_idx)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(out["loss"])
        if args.log_every and (step + 1) % args.log_every == 0:
            logging.info("%s step %d/%d loss %.4f step %.1f ms", backend, step + 1, steps, out["loss"],
                         1e3 * times[-1])
    warm = min(args.warmup, max(0, steps - 1))
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "backend": backend,
        "resolved": "compiled_flex" if (backend == "auto" and device.type == "cuda") else
        ("chunked" if backend == "auto" else backend),
        "steps": steps,
        "step_ms_median": 1e3 * statistics.median(times[warm:]),
        "first_steps_s": sum(times[:warm]),
        "peak_mb": peak_mb,
        "loss_first": losses[0],
        "loss_last": losses[-1],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--dense-steps", type=int, default=None, help="steps of the dense baseline (default steps/5)")
    p.add_argument("--warmup", type=int, default=5, help="first steps excluded from the median (compilation)")
    p.add_argument("--communities", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--pad-to", type=int, default=1024, help="packed lengths are padded to this multiple")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":  # smoke-test size: the CPU run only checks that the script works end to end
        args.communities, args.batch_size, args.hidden, args.layers, args.pad_to = 2, 8, 32, 1, 128
    graph = make_toy_graph(ToyGraphSettings(num_communities=args.communities, users_per=40, items_per=20,
                                            content_dim=32, broad_cap=48, narrow_cap=24, id_buckets=4096, seed=0))
    logging.info("device %s (%s), torch %s, %d nodes", device,
                 torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", torch.__version__,
                 graph.features.num_nodes)
    dense_steps = args.dense_steps or max(min(args.steps, 3), args.steps // 5)
    rows = [run_backend("auto", graph, args, device, args.steps),
            run_backend("dense", graph, args, device, dense_steps)]
    print(f"\n{'backend':>14} {'steps':>6} {'step_ms':>9} {'warmup_s':>9} {'peak_mb':>9} {'loss first->last':>18}")
    for r in rows:
        print(f"{r['resolved']:>14} {r['steps']:>6} {r['step_ms_median']:>9.1f} {r['first_steps_s']:>9.1f} "
              f"{r['peak_mb']:>9.0f} {r['loss_first']:>8.3f} -> {r['loss_last']:.3f}")
    speedup = rows[1]["step_ms_median"] / rows[0]["step_ms_median"]
    print(f"speed-up of {rows[0]['resolved']} over the dense bias path: {speedup:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "rows": rows, "speedup": speedup}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
