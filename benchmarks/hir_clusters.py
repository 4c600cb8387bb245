"""Interest clusters of HIR on an evaluation split: NMI against the planted hierarchy per entity type, cluster
usage, sharpness and tree agreement per level, next to warm / cold Recall@K.

Uses the split that ``benchmarks/hir_ablations.py`` prepares (``--cache`` pickle, or ``--lake`` / ``--run-date``
to prepare it the same way), trains one HIR model per ``--set`` configuration on top of
``config/cpu_sample.yaml``'s ``interest_model`` settings, embeds every node with the published encoder
(``Trainer.infer``, as the asset does) and scores it with ``evaluation.runner.clustering_rows`` (the rows the
nightly ``evaluation_report`` writes) and Recall@K.

The planted hierarchy is the ``ground_truth`` folder written beside a synthetic source
(``<cache>/sources/synthetic-<seed>-<events>-img/ground_truth``: entity_id, level0, level1, level2); without
``--truth`` only the truth-free rows are reported.

Usage: ``python benchmarks/hir_clusters.py --cache PATH [--lake DIR --run-date D] [--truth DIR] [--epochs 8]
[--set key=value ...] [--label NAME] [--threads 1] [--json PATH]``. Prints one JSON line; ``--json`` appends it
to a JSON list file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hir_ablations import QUIET, make_trainer, parse_value, prepare, sample_settings  # noqa: E402


def read_truth(folder: Path) -> dict[str, dict[str, int | None]]:
    """``entity_id -> {level column: label or None}`` from a synthetic source's ``ground_truth`` Parquet folder."""
    import pyarrow.parquet as pq

    table = pq.read_table(folder)
    levels = [c for c in ("level0", "level1", "level2") if c in table.column_names]
    ids = table.column("entity_id").to_pylist()
    cols = {c: table.column(c).to_pylist() for c in levels}
    return {e: {c: cols[c][i] for c in levels} for i, e in enumerate(ids)}


def run(prepared: dict, overrides: dict, k: int, truth: dict | None) -> dict:
    """Train one model on the prepared split; its recall and clustering rows as one flat dict."""
    import numpy as np

    from hir_pipeline.evaluation.runner import ClusterLevels, clustering_rows
    from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_scorer

    data, inputs = prepared["data"], prepared["inputs"]
    trainer = make_trainer(inputs, overrides)
    model_cfg, train_cfg = trainer.model_cfg, trainer.cfg
    t0 = time.perf_counter()
    history = trainer.fit()
    train_s = time.perf_counter() - t0
    res = trainer.infer()
    ids = [str(e) for e in inputs.entity_ids]
    out: dict = {"train_s": round(train_s, 1), "published": train_cfg.published_encoder}
    got = evaluate_scorer(EmbeddingScorer.from_lookup(data, ids, res.embeddings), data, k)
    for split, metrics in got.items():
        out[f"{split}_recall"] = round(metrics[f"recall_at_{k}"], 4)
    assignments = [p.argmax(axis=1) for p in res.probs]
    clusters = ClusterLevels(assignments, model_cfg.level_sizes, probs=res.probs, parent_maps=res.parent_maps)
    for _, group, metric, value in clustering_rows(ids, [str(t) for t in inputs.entity_types], clusters, truth):
        if group in ("all", "user", "item"):
            out[f"{group}.{metric}"] = round(float(value), 4)
    last = history[-1] if history else {}
    for key in ("dino", "cross_entity", "engagement", "engagement_temp"):
        if key in last:
            out[f"final_{key}"] = round(float(last[key]), 4)
    out["final_dino_per_level"] = [round(float(last.get(f"dino_level_{lvl}", float("nan"))), 3)
                                   for lvl in range(model_cfg.num_levels)]
    out["uniform_dino_per_level"] = [round(float(np.log(s)), 3) for s in model_cfg.level_sizes]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lake")
    p.add_argument("--run-date", type=dt.date.fromisoformat)
    p.add_argument("--cache", type=Path, required=True, help="pickle of the prepared split (made when missing)")
    p.add_argument("--truth", type=Path, help="ground_truth folder of the synthetic source")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--label", default="run")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", type=Path, help="JSON list file the result is appended to")
    args = p.parse_args()

    if args.cache.exists():
        prepared = pickle.loads(args.cache.read_bytes())
    else:
        if args.lake is None or args.run_date is None:
            p.error("--lake and --run-date are required unless --cache names an existing prepared split")
        prepared = prepare(args.lake, args.run_date)
        args.cache.write_bytes(pickle.dumps(prepared))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    truth = read_truth(args.truth) if args.truth else None
    settings = {**sample_settings(), **QUIET, "epochs": args.epochs,
                **{k: parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}}
    row = {"label": args.label, "set": args.set, **run(prepared, settings, args.k, truth)}
    print(json.dumps(row), flush=True)
    if args.json:
        rows = json.loads(args.json.read_text()) if args.json.exists() else []
        args.json.write_text(json.dumps([*rows, row], indent=2))


if __name__ == "__main__":
    main()
