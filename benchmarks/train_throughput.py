"""Training throughput: steps and samples per second of ``Trainer.train_step`` per attention backend.

Runs a fixed number of training steps (the first ``--warmup`` excluded from the timing) with each attention
backend on the same batches, and reports steps/s, samples/s (anchors + engagement pairs per second), the share
of a step spent packing views on the host, and the process' peak RSS. Inputs: a prepared evaluation split
(``--cache``, the pickle ``benchmarks/hir_ablations.py --cache`` writes; model settings from
``config/cpu_sample.yaml`` as there, ``--set`` on top) or, without ``--cache``, the toy graph of
``hir_pipeline.training.toy``.

Usage: ``python benchmarks/train_throughput.py [--cache PATH] [--backends bucketed,chunked] [--steps 30]
[--threads 2] [--set key=value ...] [--json PATH]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from hir_pipeline.model.batch import pack_views  # noqa: E402
from hir_pipeline.model.config import ModelConfig, TrainConfig  # noqa: E402
from hir_pipeline.training.trainer import Trainer  # noqa: E402


def _inputs(args) -> tuple[dict, object, list, list, tuple]:
    """``(settings, features, broad_views, narrow_views, engagement)`` of the cached split or the toy graph."""
    if args.cache:
        from hir_ablations import sample_settings  # the CPU profile's settings, read as the ablations read them

        from hir_pipeline.training.fit import resolve_model_config

        inputs = args.prepared_inputs
        settings = sample_settings()
        model_names = {f.name for f in dataclasses.fields(ModelConfig)}
        model_kw = {k: (tuple(v) if k == "level_sizes" else v) for k, v in settings.items() if k in model_names}
        features = inputs.features(resolve_model_config(ModelConfig(**model_kw), inputs))
        return settings, features, inputs.broad_views, inputs.narrow_views or inputs.broad_views, inputs.engagement
    from hir_pipeline.training.toy import ToyGraphSettings, make_toy_graph

    graph = make_toy_graph(ToyGraphSettings(num_communities=16, users_per=40, items_per=20, content_dim=32,
                                            broad_cap=48, narrow_cap=24, id_buckets=4096, seed=0))
    settings = {"hidden_dim": 64, "num_layers": 2, "num_heads": 4, "out_dim": 64, "content_dim": 32,
                "id_buckets": 4096, "level_sizes": [8, 32, 128], "max_dist": 3, "batch_size": 128,
                "engagement_batch_size": 256}
    return settings, graph.features, graph.broad_views, graph.narrow_views, graph.engagement


def run_backend(backend: str, settings: dict, data, args) -> dict:
    """Time ``args.steps`` training steps with ``backend``; the same seeded batches for every backend."""
    features, broad, narrow, engagement = data
    model_names = {f.name for f in dataclasses.fields(ModelConfig)}
    train_names = {f.name for f in dataclasses.fields(TrainConfig)}
    model_kw = {k: (tuple(v) if k == "level_sizes" else v) for k, v in settings.items() if k in model_names}
    model_kw["attention_backend"] = backend
    if args.cache:
        from hir_pipeline.training.fit import resolve_model_config

        model_cfg = resolve_model_config(ModelConfig(**model_kw), args.prepared_inputs)
    else:
        model_cfg = ModelConfig(**model_kw)
    train_cfg = TrainConfig(**{k: v for k, v in settings.items() if k in train_names},
                            device="cpu", log_every=0, seed=0)
    trainer = Trainer(model_cfg, train_cfg, features, broad, narrow, engagement)
    rng = np.random.default_rng(0)
    n_pairs = len(trainer.pairs[0]) if trainer.pairs is not None else 0
    times, pack_times = [], []
    for step in range(args.steps):
        anchors = rng.choice(trainer.anchors, size=min(train_cfg.batch_size, len(trainer.anchors)), replace=False)
        pair_idx = (rng.integers(0, n_pairs, size=min(train_cfg.engagement_batch_size, n_pairs))
                    if n_pairs else None)
        t0 = time.perf_counter()
        trainer.train_step(step, anchors, rng, pair_idx)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()  # host-side packing alone, for the share of a step it takes
        pack_views([trainer.narrow[int(a)] for a in anchors], pad_to=train_cfg.pad_to, max_dist=model_cfg.max_dist)
        pack_views([trainer.broad[int(a)] for a in anchors], pad_to=train_cfg.pad_to, max_dist=model_cfg.max_dist)
        pack_times.append(time.perf_counter() - t0)
    timed = times[args.warmup:]
    step_s = statistics.median(timed)
    samples = train_cfg.batch_size + (min(train_cfg.engagement_batch_size, n_pairs) if n_pairs else 0)
    return {"backend": backend, "steps": len(timed), "step_ms": round(1e3 * step_s, 1),
            "steps_per_s": round(1 / step_s, 3), "samples_per_s": round(samples / step_s, 1),
            "anchor_pack_share": round(statistics.median(pack_times[args.warmup:]) / step_s, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, help="prepared split pickle (benchmarks/hir_ablations.py --cache)")
    p.add_argument("--backends", default="bucketed,chunked", help="comma-separated attention backends")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3, help="first steps excluded from the timing")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="setting override (JSON value)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.prepared_inputs = pickle.loads(args.cache.read_bytes())["inputs"] if args.cache else None
    settings, *data = _inputs(args)
    settings.update({k: _value(v) for k, v in (s.split("=", 1) for s in args.set)})
    rows = [run_backend(b, settings, data, args) for b in args.backends.split(",")]
    cols = list(rows[0])
    print(" | ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>17}" for c in cols))
    result = {"source": str(args.cache) if args.cache else "toy", "threads": torch.get_num_threads(),
              "settings": settings, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
