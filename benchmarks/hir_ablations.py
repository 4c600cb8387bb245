"""Ablation and tuning study of HIR against the baselines, on the inner validation split or the evaluation split.

Prepares the evaluation split of a lake once with Spark (exactly as ``evaluation_report`` does: per-user
temporal hold-out, deep-funnel targets, seeded cold items; graph and views rebuilt from the training events;
``spark_jobs.evaluation.run.prepare_evaluation``) and, inside its training part, the inner validation split: the same
rules applied to the training events (``spark_jobs.evaluation.run.prepare_validation``: each user's latest events held
out, deep-funnel targets, cold items; HIR's graph rebuilt from the inner training events). The baselines' grids tune
one level further in by the same rules, as they do in the evaluation. Both splits are cached in one pickle
(``--cache``).

``--split validation`` (the default) scores on the inner split: settings are chosen there, never on the test
targets. ``--split test`` scores on the evaluation split's targets: only for the final report of settings chosen
on validation.

On the chosen split the baselines (``EvaluationSettings.baselines``: popularity, the ALS grid, LightGCN,
content-only, random) are fitted and scored per user exactly as ``evaluation_report`` does
(``hir_pipeline.evaluation.runner.ranking_results``); their per-user recalls are cached beside the split
(``<cache>.baselines.pkl``, keyed by the split's data and the settings) so reruns only train HIR. Then, for every
point of the ``--grid`` and every variant, one HIR model per seed (``--seeds``, training seeds ``seed, seed + 1,
...``) is trained with torch only and scored like the asset (Recall@K of the dot product of the published,
L2-normalised embeddings). Variants (``--variants``):

* ``full``            -- the configuration given (``--set`` / ``--grid`` overrides on top of
  ``config/cpu_sample.yaml``'s ``model_settings`` resource),
* ``no_distillation`` -- ``distillation_weight = 0`` (engagement objective only),
* ``no_content``      -- ``use_content = False`` (IDs, types, degrees and structure only),
* ``no_structure``    -- ``structural_bias = False`` (plain attention within each view),
* ``one_level``       -- a single level of prototypes (the finest),
* ``no_logq``         -- ``engagement_logq = False`` (no in-batch sampling correction),
* ``no_history``      -- ``use_history = False`` (no pooled engagement history in the tokens),
* ``no_structure_embedding`` -- ``use_structure_embedding = False`` (no graph-wide FastRP input).

``--defaults`` starts from the library defaults (the production, GPU-sized schedule) instead of the CPU sample
config.

For each row: the published encoder's warm and cold Recall@K, mean over seeds (and their standard deviation);
its ratio to the best baseline and the difference, with a paired bootstrap interval over users of the
seed-averaged per-user recall (``hir_pipeline.evaluation.runner.paired_comparisons``; cold also against
content-only); the ``mean_user`` diagnostic (the published item embeddings scored against the mean user vector);
the teacher's and the student's recall (each embedded on the views it trained on). Prints the baselines and a
table; ``--json PATH`` writes ``{"split", "note", "k", "seeds", "settings", "grid", "baselines", "rows"}`` where
each row holds ``variant``, ``overrides``, ``published``, ``warm_recall``, ``cold_recall``, ``*_seed_std``, the
comparisons and ``per_seed`` results.

The lake must hold the bronze tables and ``content_embeddings`` of the run date (e.g. after
``scripts/quickstart.sh``: ``--lake .hir/lake --run-date 1998-04-22`` for MovieLens).

Usage: ``python benchmarks/hir_ablations.py [--lake DIR --run-date D] --cache PATH [--split validation|test]
[--seeds 3] [--variants full,no_content] [--set key=value ...] [--grid key=v1,v2 ...] [--epochs 8] [--json PATH]``
(``--lake`` / ``--run-date`` may be left out once ``--cache`` holds the prepared splits)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {
    "full": {},
    "no_distillation": {"distillation_weight": 0.0},
    "no_content": {"use_content": False},
    "no_structure": {"structural_bias": False},
    "one_level": {"level_sizes": None},  # filled with the finest level of the run's settings
    "no_logq": {"engagement_logq": False},
    "no_history": {"use_history": False},
    "no_structure_embedding": {"use_structure_embedding": False},
}
SAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "config" / "cpu_sample.yaml"
#: Settings on top of the CPU sample config: quiet, on CPU.
QUIET = {"log_every": 0, "device": "cpu"}
ENCODERS = ("teacher", "student")
SPLITS = ("validation", "test")


def sample_settings(path: Path = SAMPLE_CONFIG) -> dict:
    """The ``model_settings`` resource of ``config/cpu_sample.yaml``, its ``model`` and ``train`` sections merged
    (ModelConfig / TrainConfig fields)."""
    import yaml

    config = (yaml.safe_load(path.read_text()) or {})["resources"]["model_settings"]["config"]
    return {**(config.get("model") or {}), **(config.get("train") or {})}


def prepare(lake: str, day: dt.date) -> dict:
    """The evaluation split of ``day`` and its inner validation split: data, HIR inputs, item content (Spark)."""
    from resources import SparkResource
    from spark_jobs.evaluation.data import collect_entity_content
    from spark_jobs.evaluation.run import (
        EvaluationJobConfig,
        prepare_evaluation,
        prepare_validation,
        read_evaluation_inputs,
    )

    session = SparkResource().get_session()
    bronze, content = read_evaluation_inputs(session, lambda t: f"{lake}/{t}", day, require_content=True)
    config = EvaluationJobConfig()
    split, data, inputs = prepare_evaluation(bronze, content, day, config)
    # the inner split: the evaluation split's rules applied to its training events
    inner, inner_inputs = prepare_validation(bronze, split, content, day, config)
    split_cfg = config.split
    return {"data": data, "inputs": inputs, "item_content": collect_entity_content(content, data.item_ids),
            "note": split.note, "run_date": str(day),
            "validation": {"data": inner, "inputs": inner_inputs, "fraction": split_cfg.holdout_fraction,
                           "seed": split_cfg.seed, "cold_fraction": split_cfg.cold_item_fraction,
                           "rules": "temporal"}}


def split_of(prepared: dict, split: str) -> tuple[Any, Any, str]:
    """``(data, inputs, note)`` of the chosen split (``validation``: splits ``warm`` / ``cold`` of the inner one)."""
    if split == "test":
        return prepared["data"], prepared["inputs"], f"test split: {prepared.get('note', '')}"
    v = prepared["validation"]
    if v.get("rules") == "temporal":
        note = (f"inner validation split: the evaluation split's rules on its training events (each user's latest "
                f"{v['fraction']:g} of events held out, deep-funnel targets, {v['cold_fraction']:g} of the items "
                f"cold, seed {v['seed']})")
    else:  # a split prepared before the inner split followed the evaluation's rules
        note = (f"inner validation split of the training part: {v['fraction']:g} of each user's pairs at random "
                f"(seed {v['seed']}), {v['cold_fraction']:g} of the items cold")
    return v["data"], v["inputs"], note


def data_fingerprint(data) -> str:
    """Hash of an EvalData's ids, training matrix and targets (what a baseline's result depends on)."""
    h = hashlib.sha256()
    h.update("\x00".join(data.user_ids + data.item_ids).encode())
    for m in (data.train, *(data.targets[s] for s in sorted(data.targets))):
        m = m.tocsr()
        for a in (m.indptr, m.indices, m.data):
            h.update(a.tobytes())
    for s in sorted(data.candidates):
        h.update(s.encode() + data.candidates[s].tobytes())
    tuning = getattr(data, "tuning", None)
    if tuning is not None:  # the baselines' grids score on it
        h.update(b"tuning" + data_fingerprint(tuning).encode())
    return h.hexdigest()[:24]


def baseline_results(data, item_content, settings, cache: Path | None, say=print) -> dict:
    """Per method, per split, per-user metrics of the baselines on ``data``, from ``cache`` when it has them.

    Args:
        data: the split's evaluation data.
        item_content: item content aligned with ``data.item_ids`` (content-only baseline), or ``None``.
        settings: ``EvaluationSettings`` (which baselines, their settings, the cut-off).
        cache: pickle of earlier results (read, then rewritten with these), or ``None``.
        say: called with one line per baseline.
    """
    from hir_pipeline.evaluation.runner import make_baselines, ranking_results

    key = json.dumps({"data": data_fingerprint(data), "k": settings.k, "baselines": list(settings.baselines),
                      "als": dataclasses.asdict(settings.als), "lightgcn": dataclasses.asdict(settings.lightgcn),
                      "seed": settings.seed}, sort_keys=True)
    stored = pickle.loads(cache.read_bytes()) if cache is not None and cache.exists() else {}
    if key in stored:
        say(f"baselines from {cache}")
        return stored[key]
    scorers = make_baselines(settings, item_content)
    got = ranking_results(scorers, data, settings.k, progress=say)
    result = {"per_user": got.per_user, "seconds": got.seconds,
              "details": {s.name: s.best for s in scorers if getattr(s, "best", None)}}
    if cache is not None:
        stored[key] = result
        tmp = cache.with_suffix(cache.suffix + ".tmp")
        tmp.write_bytes(pickle.dumps(stored))
        tmp.replace(cache)  # atomic: another reader never sees half a file
    return result


def make_trainer(inputs, overrides: dict):
    """A seeded ``Trainer`` for ``inputs`` with ModelConfig / TrainConfig ``overrides`` (the model config fitted to
    the inputs), as the asset builds it; shared by the benchmarks that train on a prepared split.

    Args:
        inputs: HIR's training inputs (``ModelInputs``).
        overrides: ModelConfig / TrainConfig settings; an unknown name exits with a message.
    """
    import torch

    from hir_pipeline.model.config import ModelConfig, TrainConfig
    from hir_pipeline.training.fit import resolve_model_config
    from hir_pipeline.training.trainer import Trainer

    model_names = {f.name for f in dataclasses.fields(ModelConfig)}
    train_names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - model_names - train_names
    if unknown:
        raise SystemExit(f"unknown setting(s): {', '.join(sorted(unknown))}")
    settings = {k_: (tuple(v) if isinstance(v, list) else v) for k_, v in overrides.items()}  # JSON lists: tuples
    model_cfg = resolve_model_config(ModelConfig(**{k_: v for k_, v in settings.items() if k_ in model_names}), inputs)
    train_cfg = TrainConfig(**{k_: v for k_, v in settings.items() if k_ in train_names})
    if train_cfg.engagement_weights is not None:
        engagement, seen, ranks = reweighted_engagement(inputs.engagement, inputs.seen_pairs,
                                                        train_cfg.engagement_weights, inputs.engagement_recency)
        inputs = dataclasses.replace(inputs, engagement=engagement, seen_pairs=seen, engagement_recency=ranks)
    if train_cfg.recency_half_life is not None and inputs.engagement_recency is None:
        if "recency_half_life" in overrides:
            raise SystemExit("this prepared split has no recency ranks: prepare it again (--lake, --run-date)")
        print("note: this prepared split has no recency ranks (prepared before they existed): no recency weighting")
    inputs = inputs.with_recency(train_cfg.recency_half_life)  # as the asset: after the stage weights
    torch.manual_seed(train_cfg.seed)
    return Trainer(model_cfg, train_cfg, inputs.features(model_cfg), inputs.broad_views, inputs.narrow_views or None,
                   inputs.engagement, seen=inputs.seen_pairs)


def reweighted_engagement(engagement, seen, weights, ranks=None):
    """A prepared split's ``(engagement, seen, ranks)`` under other funnel-stage weights (``engagement_weights``).

    The asset applies the weights when it collects the pairs from Spark (its history pools follow them too); a
    prepared split was collected once with the default ones
    (:func:`spark_jobs.model.inputs.default_engagement_weights`), which differ per stage, so each pair's deepest
    stage is read back from its weight. A stage given weight 0 makes its pairs seen, not engaged.

    Args:
        engagement: ``(user_idx, item_idx, weight)`` collected with the default weights.
        seen: ``(user_idx, item_idx)`` of the seen-only pairs, or ``None``.
        weights: the weight of each stage of the default funnel.
        ranks: the pairs' recency ranks (``ModelInputs.engagement_recency``), or ``None``; those of the pairs that
            stay engaged are returned.
    """
    import numpy as np

    from hir_pipeline.contracts import DEFAULT_FUNNEL
    from spark_jobs.model.inputs import default_engagement_weights

    default = np.asarray(default_engagement_weights(DEFAULT_FUNNEL), dtype=np.float32)
    if len(weights) != len(default):
        raise SystemExit(f"engagement_weights needs {len(default)} stage weights ({', '.join(DEFAULT_FUNNEL)})")
    users, items, w = (np.asarray(a) for a in engagement)
    stage = np.abs(w[:, None] - default[None, :]).argmin(axis=1)
    if not np.allclose(default[stage], w, rtol=1e-5):
        raise SystemExit("the prepared split's pairs were not collected with the default engagement weights")
    new = np.asarray(weights, dtype=np.float32)[stage]
    engaged = new > 0
    seen_u, seen_i = (np.empty(0, dtype=users.dtype),) * 2 if seen is None else seen
    seen = (np.concatenate([seen_u, users[~engaged]]), np.concatenate([seen_i, items[~engaged]]))
    return (users[engaged], items[engaged], new[engaged]), seen, None if ranks is None else np.asarray(ranks)[engaged]


def run_variant(data, inputs, overrides: dict, k: int) -> dict:
    """Train one model and return per-user metrics of the published encoder (``hir``), its mean-user version
    (``hir_mean_user``), the teacher and the student, and the training seconds.

    Args:
        data: the split's evaluation data.
        inputs: HIR's training inputs of that split.
        overrides: ModelConfig / TrainConfig settings.
        k: cut-off.
    """

    from hir_pipeline.evaluation.scoring import EmbeddingScorer, evaluate_per_user

    trainer = make_trainer(inputs, overrides)
    train_cfg = trainer.cfg
    t0 = time.perf_counter()
    trainer.fit()
    train_s = time.perf_counter() - t0
    ids = [str(e) for e in inputs.entity_ids]
    out = {}
    for who in ENCODERS:
        scorer = EmbeddingScorer.from_lookup(data, ids, trainer.infer(which=who).embeddings, who)
        out[who] = evaluate_per_user(scorer, data, k)
        if who == train_cfg.published_encoder:
            out["hir"] = out[who]
            out["hir_mean_user"] = evaluate_per_user(scorer.mean_user(), data, k)
    return {"published": train_cfg.published_encoder, "per_user": out, "train_s": round(train_s, 1)}


def summarize_runs(runs: list[dict], seeds: list[int], baselines: dict, settings) -> dict:
    """One study row from a variant's runs over seeds: means, seed spread, comparisons, per-seed figures.

    Args:
        runs: :func:`run_variant` results, one per seed.
        seeds: the training seed of each run.
        baselines: per method, per split, the baselines' per-user metrics.
        settings: ``EvaluationSettings`` (cut-off and bootstrap).
    """
    import numpy as np

    from hir_pipeline.evaluation.runner import average_over_seeds, paired_comparisons

    per_seed = []
    for seed, run in zip(seeds, runs, strict=True):
        row: dict[str, Any] = {"seed": seed, "train_s": run["train_s"]}
        for who, name in (("hir", ""), ("hir_mean_user", "mean_user_"), ("teacher", "teacher_"),
                          ("student", "student_")):
            for split, got in run["per_user"][who].items():
                row[f"{name}{split}_recall"] = round(float(got.recall.mean()), 4)
        per_seed.append(row)
    averaged = {who: average_over_seeds([r["per_user"][who] for r in runs]) for who in runs[0]["per_user"]}
    out: dict[str, Any] = {"published": runs[0]["published"], "seeds": list(seeds)}
    for who, name in (("hir", ""), ("hir_mean_user", "mean_user_"), ("teacher", "teacher_"),
                      ("student", "student_")):
        for split in averaged[who]:
            values = [r[f"{name}{split}_recall"] for r in per_seed]
            out[f"{name}{split}_recall"] = round(float(np.mean(values)), 4)
            if who == "hir":
                out[f"{split}_recall_seed_std"] = round(float(np.std(values, ddof=1)), 4) if len(values) > 1 else 0.0
    comparisons = paired_comparisons({**baselines, "hir": averaged["hir"]}, settings)
    out["comparisons"] = [{"split": c.split, "reference": c.reference, "baseline": c.baseline,
                           **{f: round(v, 4) if isinstance(v, float) else v
                              for f, v in dataclasses.asdict(c.interval).items()}} for c in comparisons]
    out["train_s_mean"] = round(float(np.mean([r["train_s"] for r in per_seed])), 1)
    out["per_seed"] = per_seed
    return out


def parse_value(text: str):
    """A JSON value, or the text itself when it is not JSON (``student`` -> ``"student"``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets: ``"[8,64],[16,128]"`` -> ``["[8,64]", "[16,128]"]``."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def parse_grid(specs: list[str]) -> dict[str, list]:
    """``["lr=0.001,0.002", "level_sizes=[8,64],[512]"]`` -> ``{"lr": [0.001, 0.002], "level_sizes": [...]}``."""
    grid: dict[str, list] = {}
    for spec in specs:
        if "=" not in spec:
            raise SystemExit(f"--grid takes key=v1,v2,... (got {spec!r})")
        key, values = spec.split("=", 1)
        grid[key.strip()] = [parse_value(v.strip()) for v in split_top_level(values)]
    return grid


def grid_points(grid: dict[str, list]) -> list[dict]:
    """Every combination of the grid's values (one empty point for an empty grid)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def variant_overrides(base: dict, point: dict, variant: str) -> dict:
    """The settings of one run: base, then the grid point, then the variant's ablation."""
    from hir_pipeline.model.config import ModelConfig

    merged = {**base, **point}
    extra = dict(VARIANTS[variant])
    if "level_sizes" in extra:
        extra["level_sizes"] = [tuple(merged.get("level_sizes", ModelConfig().level_sizes))[-1]]
    return {**merged, **extra}


def study(data, inputs, baselines: dict, base: dict, grid: dict[str, list], variants: list[str], seeds: list[int],
          settings, say=print) -> list[dict]:
    """Train and score every (grid point, variant) over ``seeds``; one summary row each.

    Args:
        data: the split's evaluation data.
        inputs: HIR's training inputs of that split.
        baselines: per method, per split, the baselines' per-user metrics on ``data``.
        base: ModelConfig / TrainConfig settings shared by every run.
        grid: setting -> values to sweep (every combination is run).
        variants: names among :data:`VARIANTS`.
        seeds: training seeds.
        settings: ``EvaluationSettings`` (cut-off and bootstrap).
        say: called with one JSON line per trained model.
    """
    rows = []
    for point in grid_points(grid):
        for name in variants:
            if name not in VARIANTS:
                raise SystemExit(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
            runs = []
            for seed in seeds:
                run = run_variant(data, inputs, {**variant_overrides(base, point, name), "seed": seed}, settings.k)
                runs.append(run)
                say(json.dumps({"variant": name, **point, "seed": seed, "train_s": run["train_s"],
                                **{f"{s}_recall": round(float(v.recall.mean()), 4)
                                   for s, v in run["per_user"]["hir"].items()}}))
            rows.append({"variant": name, "overrides": point, **summarize_runs(runs, seeds, baselines, settings)})
    return rows


def _fmt_cmp(row: dict, split: str, reference: str) -> str:
    for c in row["comparisons"]:
        if c["split"] == split and c["reference"] == reference:
            return (f"{c['ratio']:.2f}x [{c['ratio_low']:.2f}, {c['ratio_high']:.2f}] vs {c['baseline']}, "
                    f"{c['diff']:+.4f} [{c['diff_low']:+.4f}, {c['diff_high']:+.4f}]")
    return "-"


def report(rows: list[dict], baselines: dict, k: int, confidence: float) -> str:
    """The baselines' mean Recall@k and one line per study row (markdown)."""
    import numpy as np

    lines = [f"| baseline | warm recall@{k} | cold recall@{k} |", "|---|---|---|"]
    for m, per_split in baselines.items():
        vals = [f"{float(np.mean(per_split[s].recall)):.4f}" if s in per_split else "-" for s in ("warm", "cold")]
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    lines += ["", f"| variant | overrides | warm recall@{k} (sd) | warm vs best baseline | cold recall@{k} (sd) | "
              "cold vs best baseline | cold vs content | mean user warm / cold | teacher warm / cold | "
              "student warm / cold | train s |", "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {json.dumps(r['overrides']) if r['overrides'] else '-'} "
            f"| {r['warm_recall']:.4f} ({r['warm_recall_seed_std']:.4f}) | {_fmt_cmp(r, 'warm', 'best_baseline')} "
            f"| {r['cold_recall']:.4f} ({r['cold_recall_seed_std']:.4f}) | {_fmt_cmp(r, 'cold', 'best_baseline')} "
            f"| {_fmt_cmp(r, 'cold', 'content')} | {r['mean_user_warm_recall']:.4f} / {r['mean_user_cold_recall']:.4f} "
            f"| {r['teacher_warm_recall']:.4f} / {r['teacher_cold_recall']:.4f} "
            f"| {r['student_warm_recall']:.4f} / {r['student_cold_recall']:.4f} | {r['train_s_mean']} |")
    lines.append(f"\nmeans over seeds {rows[0]['seeds'] if rows else []}; intervals: {confidence:.0%} paired "
                 "bootstrap over users of the seed-averaged per-user recall (ratio of means, difference)")
    return "\n".join(lines)


def prepared_split(args, parser) -> tuple[dict, Any, Any, str]:
    """``(prepared, data, inputs, note)`` of ``args.split`` (:func:`load_prepared`, :func:`split_of`), with torch
    set to ``args.threads`` threads first when given."""
    prepared = load_prepared(args, parser)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return (prepared, *split_of(prepared, args.split))


def load_prepared(args, parser) -> dict:
    """The cached splits, or freshly prepared ones (then cached); a cache without the validation split is
    prepared again."""
    prepared = pickle.loads(args.cache.read_bytes()) if args.cache and args.cache.exists() else None
    if prepared is not None and "validation" in prepared:
        return prepared
    if args.lake is None or args.run_date is None:
        parser.error("--lake and --run-date are required unless --cache names prepared splits (with validation)")
    prepared = prepare(args.lake, args.run_date)
    if args.cache:
        args.cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.cache.with_suffix(args.cache.suffix + ".tmp")
        tmp.write_bytes(pickle.dumps(prepared))
        tmp.replace(args.cache)
    return prepared


def main(argv: list[str] | None = None) -> dict:
    from hir_pipeline.evaluation.runner import BASELINES, EvaluationSettings

    defaults = EvaluationSettings()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lake", help="lake root holding bronze tables and content_embeddings (not needed when --cache "
                   "holds the prepared splits)")
    p.add_argument("--run-date", type=dt.date.fromisoformat, help="run date of the split (not needed when --cache "
                   "holds the prepared splits)")
    p.add_argument("--cache", type=Path, help="pickle of the prepared splits (reused when present); baseline "
                   "results go beside it (<cache>.baselines.pkl)")
    p.add_argument("--split", choices=SPLITS, default="validation", help="validation: tune (default); test: only "
                   "to report settings chosen on validation")
    p.add_argument("--seeds", type=int, default=3, help="HIR models per row (training seeds seed, seed + 1, ...)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: as the base settings say)")
    p.add_argument("--defaults", action="store_true", help="start from the library defaults (the production, "
                   "GPU-sized schedule) instead of config/cpu_sample.yaml's model_settings")
    p.add_argument("--variants", default="full", help=f"comma-separated among {', '.join(VARIANTS)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="ModelConfig / TrainConfig override for every run (JSON value)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="sweep a ModelConfig / TrainConfig setting (JSON values; every combination of the --grid "
                   "options is run)")
    p.add_argument("--baselines", default=",".join(defaults.baselines), help=f"among {', '.join(BASELINES)}")
    p.add_argument("--k", type=int, default=defaults.k)
    p.add_argument("--bootstrap-samples", type=int, default=defaults.bootstrap_samples)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    prepared, data, inputs, note = prepared_split(args, p)
    settings = dataclasses.replace(defaults, k=args.k, baselines=tuple(args.baselines.split(",")),
                                   als=dataclasses.replace(defaults.als, k=args.k),
                                   bootstrap_samples=args.bootstrap_samples)
    cache = args.cache.with_suffix(args.cache.suffix + ".baselines.pkl") if args.cache else None
    baselines = baseline_results(data, prepared["item_content"], settings, cache)
    base = {**({} if args.defaults else sample_settings()), **QUIET,
            **({} if args.epochs is None else {"epochs": args.epochs}),
            **{k: parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}}
    first_seed = int(base.pop("seed", 0))
    seeds = [first_seed + i for i in range(args.seeds)]
    grid = parse_grid(args.grid)
    rows = study(data, inputs, baselines["per_user"], base, grid, args.variants.split(","), seeds, settings)
    print(f"\n{note}; settings: {json.dumps(base)}; grid: {json.dumps(grid)}")
    print(report(rows, baselines["per_user"], args.k, settings.confidence))
    result = {"split": args.split, "note": note, "k": args.k, "seeds": seeds, "settings": base, "grid": grid,
              "baselines": {m: {s: round(float(v.recall.mean()), 4) for s, v in per.items()}
                            for m, per in baselines["per_user"].items()},
              "baseline_details": baselines["details"], "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
