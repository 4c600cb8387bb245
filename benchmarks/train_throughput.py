"""Training throughput: steps and samples per second of the training step per attention backend and prefetch depth.

Runs a fixed number of training steps (the first ``--warmup`` excluded from the timing) with each attention
backend on the same batches, their host-side inputs (augmented, packed views: ``Trainer.prepare_step``) prepared
inside the step (``--prefetch 0``) or ahead of it in a background thread (``TrainConfig.prefetch_batches``), and
reports steps/s, samples/s (anchors + engagement pairs per second), the median time to prepare a batch
(``prepare_ms``: what prefetching takes off the step) and the process' peak RSS. A step's time runs from the end
of the previous step, so it includes any wait for its batch. With ``--processes 1,2`` each backend also runs
data-parallel: ``N`` spawned ranks (gloo, ``--threads`` torch threads each) train on the same global batches, each
on its shard (``TrainConfig.processes = N``, as ``torchrun`` / ``TorchDistributor`` launch them); a row then
reports the slowest rank's median step, samples/s of the global batch, the largest rank's peak RSS
(``peak_rss_mb``) and the launching process' (``driver_peak_rss_mb``). Inputs: a prepared evaluation split
(``--cache``, the pickle ``benchmarks/hir_ablations.py --cache`` writes; model settings from
``config/cpu_sample.yaml`` as there, ``--set`` on top) or, without ``--cache``, the toy graph of
``hir_pipeline.training.toy``.

Usage: ``python benchmarks/train_throughput.py [--cache PATH] [--backends bucketed,chunked] [--steps 30]
[--threads 2] [--processes 1,2] [--prefetch 0,2] [--set key=value ...] [--json PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
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

from hir_pipeline.model.config import ModelConfig, TrainConfig  # noqa: E402
from hir_pipeline.training.prefetch import prefetched  # noqa: E402
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


def _load_cache(path: Path):
    """The ``inputs`` of a prepared split pickle, read from the file as ``training.inputs.load_inputs`` reads the
    ranks' hand-off file (never a second copy of its bytes in memory)."""
    with path.open("rb") as f:
        return pickle.load(f)["inputs"]  # noqa: S301 - a file this project's benchmarks wrote


def run_backend(backend: str, settings: dict, data, args, processes: int = 1, prefetch: int = 0) -> dict:
    """Time ``args.steps`` training steps with ``backend``, their batches prepared ``prefetch`` steps ahead in a
    background thread (0: inside the step); the same seeded batches for every backend.

    With ``processes > 1`` this is one rank of an initialised process group: it trains its shard of each global
    batch, and the timing covers the step's collectives.
    """
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
                            device="cpu", log_every=0, seed=0, processes=processes)
    trainer = Trainer(model_cfg, train_cfg, features, broad, narrow, engagement)
    rng = np.random.default_rng(0)
    n_pairs = len(trainer.pairs[0]) if trainer.pairs is not None else 0
    prepare_times = []

    def batches():  # the same seeded batches for every backend and prefetch depth, prepared as the epoch loop does
        for _ in range(args.steps):
            anchors = rng.choice(trainer.anchors, size=min(train_cfg.batch_size, len(trainer.anchors)), replace=False)
            pair_idx = (rng.integers(0, n_pairs, size=min(train_cfg.engagement_batch_size, n_pairs))
                        if n_pairs else None)
            t0 = time.perf_counter()
            batch = trainer.prepare_step(anchors if trainer.ranks is None else trainer.ranks.shard(anchors), rng,
                                         pair_idx)
            prepare_times.append(time.perf_counter() - t0)
            yield batch

    times = []
    with contextlib.closing(prefetched(batches(), prefetch)) as steps:
        t0 = time.perf_counter()
        for step, batch in enumerate(steps):  # a step's time includes any wait for its batch
            trainer.run_step(step, batch)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
    timed = times[args.warmup:]
    step_s = statistics.median(timed)
    samples = train_cfg.batch_size + (min(train_cfg.engagement_batch_size, n_pairs) if n_pairs else 0)
    return {"backend": backend, "processes": processes, "prefetch": prefetch, "steps": len(timed),
            "step_ms": round(1e3 * step_s, 1), "steps_per_s": round(1 / step_s, 3),
            "samples_per_s": round(samples / step_s, 1),
            "prepare_ms": round(1e3 * statistics.median(prepare_times[args.warmup:]), 1),
            "peak_rss_mb": round(peak_rss_mb())}


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` on Linux (reset at exec, so a spawned rank's own), else ``ru_maxrss``,
    which a child started by fork + exec inherits from its parent."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rank_main(rank: int, world: int, port: int, backend: str, prefetch: int, args, queue) -> None:
    """One spawned rank: join the gloo group, run :func:`run_backend`, put its row on ``queue``."""
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    if args.threads:
        torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        args.prepared_inputs = _load_cache(args.cache) if args.cache else None
        settings, *data = _inputs(args)
        settings.update({k: _value(v) for k, v in (s.split("=", 1) for s in args.set)})
        queue.put(run_backend(backend, settings, data, args, processes=world, prefetch=prefetch))
    finally:
        dist.destroy_process_group()


def run_parallel(backend: str, world: int, prefetch: int, args) -> dict:
    """:func:`run_backend` on ``world`` spawned ranks; the slowest rank's step, the largest rank's memory."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child_args = argparse.Namespace(**{**vars(args), "prepared_inputs": None})  # each rank loads its own copy
    mp.spawn(_rank_main, args=(world, port, backend, prefetch, child_args, queue), nprocs=world, join=True)
    rows = [queue.get() for _ in range(world)]
    slowest = max(rows, key=lambda r: r["step_ms"])  # samples/s: of the global batch, at the slowest rank's pace
    return {**slowest, "prepare_ms": max(r["prepare_ms"] for r in rows),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rows)}


def print_table(rows: list[dict], cols: list[str], width: int = 17) -> None:
    """``rows`` as a text table of ``cols``: a header line, then one line per row."""
    print(" | ".join(f"{c:>{width}}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>{width}}" for c in cols))


def emit_json(result: dict, path: Path | None) -> None:
    """Print ``result`` as one JSON line, and write it (indented) to ``path`` when given."""
    if path:
        path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


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
    p.add_argument("--processes", default="1", help="comma-separated process counts (gloo ranks on CPU)")
    p.add_argument("--prefetch", default="0,2",
                   help="comma-separated prefetch depths (TrainConfig.prefetch_batches; 0: prepared in the step)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="setting override (JSON value)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.prepared_inputs = _load_cache(args.cache) if args.cache else None
    settings, *data = _inputs(args)
    settings.update({k: _value(v) for k, v in (s.split("=", 1) for s in args.set)})
    rows = []
    for world in (int(x) for x in args.processes.split(",")):
        for b in args.backends.split(","):
            for depth in (int(x) for x in args.prefetch.split(",")):
                row = (run_backend(b, settings, data, args, prefetch=depth) if world == 1
                       else run_parallel(b, world, depth, args))
                rows.append({**row, "driver_peak_rss_mb": round(peak_rss_mb())})
    print_table(rows, list(rows[0]))
    result = {"source": str(args.cache) if args.cache else "toy", "threads": torch.get_num_threads(),
              "settings": settings, "rows": rows}
    emit_json(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
