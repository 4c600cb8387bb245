"""Ablation study of HIR on the evaluation split: which part of the model earns its recall?

Prepares the evaluation split of a lake once with Spark (exactly as ``evaluation_report`` does: per-user
temporal hold-out, deep-funnel targets, seeded cold items; graph and views rebuilt from the training events;
``spark_jobs.evaluation.build_split_graph`` + ``spark_jobs.model_inputs.load_model_inputs``), caches it as a
pickle, then trains one HIR model per variant with torch only and scores it like the asset (Recall@K of the dot
product of the published, L2-normalised embeddings; warm and cold items). Variants (``--variants``):

* ``full``            -- the configuration given (``--set`` overrides on top of ``config/cpu_sample.yaml``'s
  ``interest_model`` settings),
* ``no_distillation`` -- ``distillation_weight = 0`` (engagement objective only),
* ``no_content``      -- ``use_content = False`` (IDs, types, degrees and structure only),
* ``no_structure``    -- ``structural_bias = False`` (plain attention within each view),
* ``one_level``       -- a single level of prototypes (the finest),
* ``no_logq``         -- ``engagement_logq = False`` (no in-batch sampling correction).

Both trained networks are scored, each embedded by ``Trainer.infer`` on the views it was trained on (student:
narrow, teacher: broad), as the asset embeds the published one;
``warm_recall`` / ``cold_recall`` are those of the published encoder (``published_encoder``, the student unless
``--set published_encoder=teacher``), ``teacher_*`` / ``student_*`` those of each. Prints a table; with
``--json PATH`` writes a list of ``{"variant", "published", "warm_recall", "cold_recall", "teacher_warm_recall",
"teacher_cold_recall", "student_warm_recall", "student_cold_recall", "train_s"}``.

The lake must hold the bronze tables and ``content_embeddings`` of the run date (e.g. after
``scripts/quickstart.sh``: ``--lake .hir/lake --run-date 1998-04-22`` for MovieLens).

Usage: ``python benchmarks/hir_ablations.py --lake DIR --run-date D [--epochs 8] [--variants full,no_content]
[--set key=value ...] [--cache PATH] [--json PATH]`` (``--lake`` / ``--run-date`` may be left out once ``--cache``
holds the prepared split)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import pickle
import sys
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {
    "full": {},
    "no_distillation": {"distillation_weight": 0.0},
    "no_content": {"use_content": False},
    "no_structure": {"structural_bias": False},
    "one_level": {"level_sizes": None},  # filled with the finest level of the base config
    "no_logq": {"engagement_logq": False},
}
SAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "config" / "cpu_sample.yaml"
#: Settings on top of the CPU sample config: quiet, on CPU.
QUIET = {"log_every": 0, "device": "cpu"}
ENCODERS = ("teacher", "student")


def sample_settings(path: Path = SAMPLE_CONFIG) -> dict:
    """The ``interest_model`` settings of ``config/cpu_sample.yaml`` that are ModelConfig / TrainConfig fields."""
    import yaml

    from hir_pipeline.model.config import ModelConfig, TrainConfig

    known = {f.name for cls in (ModelConfig, TrainConfig) for f in dataclasses.fields(cls)}
    config = (yaml.safe_load(path.read_text()) or {})["ops"]["interest_model"]["config"]
    return {k: v for k, v in config.items() if k in known}


def prepare(lake: str, day: dt.date) -> dict:
    """The evaluation data, HIR inputs and item content of ``day``'s split (Spark)."""
    from pyspark.sql import functions as F

    from resources import SparkResource
    from spark_jobs.delta_io import read_table
    from spark_jobs.evaluation import prepare_evaluation
    from spark_jobs.evaluation_data import collect_content
    from spark_jobs.evaluation_split import SplitConfig
    from spark_jobs.graph import GraphConfig

    session = SparkResource().get_session()
    bronze = {t: read_table(session, f"{lake}/{t}") for t in ("entities", "relations", "events")}
    content = read_table(session, f"{lake}/content_embeddings")
    if "run_date" in content.columns:
        content = content.where(F.col("run_date") == F.lit(day))
    split_cfg = SplitConfig()
    split, data, inputs = prepare_evaluation(bronze["entities"], bronze["relations"], bronze["events"], content,
                                             day, split_cfg, GraphConfig(funnel=split_cfg.funnel))
    return {"data": data, "inputs": inputs, "item_content": collect_content(content, data.item_ids),
            "note": split.note}


def run_variant(prepared: dict, overrides: dict, k: int) -> dict:
    """Train one model on the prepared split and return the published encoder's, the teacher's and the student's
    Recall@k."""
    import torch

    from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_scorer
    from hir_pipeline.model.config import ModelConfig, TrainConfig
    from hir_pipeline.training.fit import resolve_model_config
    from hir_pipeline.training.trainer import Trainer

    data, inputs = prepared["data"], prepared["inputs"]
    model_names = {f.name for f in dataclasses.fields(ModelConfig)}
    train_names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - model_names - train_names
    if unknown:
        raise SystemExit(f"unknown setting(s): {', '.join(sorted(unknown))}")
    model_kw = {k_: (tuple(v) if k_ == "level_sizes" else v) for k_, v in overrides.items() if k_ in model_names}
    model_cfg = resolve_model_config(ModelConfig(**model_kw), inputs)
    train_cfg = TrainConfig(**{k_: v for k_, v in overrides.items() if k_ in train_names})
    features = inputs.features(model_cfg.id_buckets)
    torch.manual_seed(train_cfg.seed)
    trainer = Trainer(model_cfg, train_cfg, features, inputs.broad_views, inputs.narrow_views or None,
                      inputs.engagement, seen=getattr(inputs, "seen_pairs", None))
    t0 = time.perf_counter()
    trainer.fit()
    train_s = time.perf_counter() - t0
    ids = [str(e) for e in inputs.entity_ids]
    per_encoder = {}
    for who in ENCODERS:
        emb = trainer.infer(which=who).embeddings
        got = evaluate_scorer(EmbeddingScorer.from_lookup(data, ids, emb), data, k)
        for split, metrics in got.items():
            per_encoder[f"{who}_{split}_recall"] = round(metrics[f"recall_at_{k}"], 4)
    published = train_cfg.published_encoder
    return {"published": published,
            **{f"{s}_recall": per_encoder.get(f"{published}_{s}_recall", float("nan")) for s in ("warm", "cold")},
            **per_encoder, "train_s": round(train_s, 1)}


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lake", help="lake root holding bronze tables and content_embeddings (not needed when --cache "
                   "exists)")
    p.add_argument("--run-date", type=dt.date.fromisoformat, help="run date of the split (not needed when --cache "
                   "exists)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated among {', '.join(VARIANTS)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="ModelConfig / TrainConfig override for every variant (JSON value)")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--cache", type=Path, help="pickle of the prepared split (reused when present)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    if args.cache and args.cache.exists():
        prepared = pickle.loads(args.cache.read_bytes())
    else:
        if args.lake is None or args.run_date is None:
            p.error("--lake and --run-date are required unless --cache names an existing prepared split")
        prepared = prepare(args.lake, args.run_date)
        if args.cache:
            args.cache.write_bytes(pickle.dumps(prepared))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    base = {**sample_settings(), **QUIET, "epochs": args.epochs,
            **{k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}}
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        extra = dict(VARIANTS[name])
        if "level_sizes" in extra:
            from hir_pipeline.model.config import ModelConfig

            extra["level_sizes"] = [tuple(base.get("level_sizes", ModelConfig().level_sizes))[-1]]
        got = run_variant(prepared, {**base, **extra}, args.k)
        rows.append({"variant": name, **got})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nsplit: {prepared.get('note', '')}; settings: {json.dumps(base)}")
    cols = ["variant", "published", "warm_recall", "cold_recall", "teacher_warm_recall", "teacher_cold_recall",
            "student_warm_recall", "student_cold_recall", "train_s"]
    print(" | ".join(f"{c:>20}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r.get(c, float('nan'))!s:>20}" for c in cols))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
