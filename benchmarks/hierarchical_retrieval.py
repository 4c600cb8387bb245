"""Hierarchical (coarse-to-fine) retrieval against exact search, on an evaluation split.

Uses the split that ``benchmarks/hir_ablations.py`` prepares (``--cache`` pickle, or ``--lake`` / ``--run-date`` to
prepare it the same way, as ``evaluation_report`` draws it), trains one HIR model on its training part (the
``config/cpu_sample.yaml`` settings, ``--set`` / ``--epochs`` on top), embeds every node with the published encoder
and takes each node's argmax cluster per level (as the evaluation does). Then, on the split's warm and cold targets,
for every routing level (``--levels``) and number of clusters probed (``--clusters``), it retrieves each user's
Recall@K list with :func:`hir_pipeline.retrieval.hierarchical_top_k` (the implementation ``hir query recommend
--retrieval hierarchical`` and the evaluation report's ``hierarchical_*`` rows use; the user's own cluster is
probed first, candidates are capped at ``--candidate-share`` of the rankable items and at ``--candidates``) and
with exact search (:func:`hir_pipeline.retrieval.exact_top_k`), one query at a time.

Per setting: Recall@K, its ratio to exact search's, the mean share of the rankable items scored (dot products
computed; centroid scores not counted), clusters probed, and queries per second of both (single-user queries,
numpy, the index built once outside the timing). The target of issue 21 is a ratio >= 0.95 while scoring <= 20 % of
the items; the table says which settings meet it. ``--json PATH`` writes ``{"split", "note", "k", "settings",
"model", "exact", "rows", "target"}``.

Usage: ``python benchmarks/hierarchical_retrieval.py --cache PATH [--lake DIR --run-date D] [--split test|validation]
[--levels 0,1] [--clusters 1,2,4,8] [--candidate-share 0.2] [--candidates 0] [--epochs 8] [--set key=value ...]
[--threads 1] [--model PATH | --model-outputs LAKE] [--json PATH]`` (``--lake`` / ``--run-date`` may be left out
once ``--cache`` holds the prepared splits; ``--model`` keeps the trained model, so other settings are measured
without training again; ``--model-outputs LAKE`` measures the published run's model instead)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hir_ablations import (  # noqa: E402
    QUIET,
    SPLITS,
    make_trainer,
    parse_value,
    prepared_split,
    sample_settings,
)

#: Issue 21's target: at least this share of exact search's Recall@K ...
TARGET_RATIO = 0.95
#: ... while scoring at most this share of the items.
TARGET_SHARE = 0.20


def train(inputs, overrides: dict) -> dict:
    """One HIR model on ``inputs``: every node's published embedding and argmax cluster per level."""
    trainer = make_trainer(inputs, overrides)
    t0 = time.perf_counter()
    trainer.fit()
    train_s = time.perf_counter() - t0
    res = trainer.infer()
    return {"ids": [str(e) for e in inputs.entity_ids], "embeddings": res.embeddings,
            "assignments": [p.argmax(axis=1) for p in res.probs], "level_sizes": list(trainer.model_cfg.level_sizes),
            "train_s": round(train_s, 1)}


def measure(data, users, items, item_clusters, user_clusters, k: int, settings=None) -> dict[str, dict[str, Any]]:
    """Per split: Recall@K, mean share scored, mean clusters probed and queries per second of one retrieval.

    Args:
        data: the split's evaluation data.
        users: float ``[U, d]`` user vectors aligned with ``data.user_ids``.
        items: float ``[I, d]`` item vectors aligned with ``data.item_ids``.
        item_clusters: per level, int ``[I]`` cluster of each item.
        user_clusters: per level, int ``[U]`` cluster of each user.
        k: cut-off.
        settings: a ``HierarchicalSettings`` (hierarchical retrieval), or ``None`` (exact search).
    """
    import numpy as np

    from hir_pipeline.evaluation.scoring import evaluate_rankings
    from hir_pipeline.retrieval import build_index, exact_top_k, hierarchical_top_k

    index = own = level = None
    if settings is not None:
        level = settings.routing_level(len(item_clusters))
        own = np.asarray(user_clusters[level])
    facts: dict[str, list] = {"share": [], "probed": [], "seconds": []}

    def rank(batch, allowed):
        ranked = np.full((len(batch), k), -1, dtype=np.int64)
        for j, u in enumerate(batch):
            t0 = time.perf_counter()
            if settings is None:
                got = exact_top_k(users[[u]], items, k, allowed[j])
            else:
                got = hierarchical_top_k(users[[u]], items, index, k, settings, allowed=allowed[j],
                                         user_clusters=own[[u]])
            facts["seconds"].append(time.perf_counter() - t0)
            facts["share"].append(float(got.scored_share[0]))
            facts["probed"].append(int(got.probed[0]))
            ranked[j] = got.items[0]
        return ranked

    out = {}
    for split in data.splits:
        for v in facts.values():
            v.clear()
        if settings is not None:  # built per catalogue (the split's candidates), outside the timing, as a server would
            index = build_index(items, item_clusters, level, members=data.candidates[split])
        per_user = evaluate_rankings(rank, data, k, splits=[split])[split]
        out[split] = {"recall": float(per_user.recall.mean()) if per_user.recall.size else float("nan"),
                      "scored_share": float(np.mean(facts["share"])) if facts["share"] else float("nan"),
                      "clusters_probed": float(np.mean(facts["probed"])) if facts["probed"] else float("nan"),
                      "qps": len(facts["seconds"]) / max(sum(facts["seconds"]), 1e-12), "users": len(per_user.users)}
    return out


def model_outputs(lake: str, run_date: dt.date | None) -> dict:
    """The ``model_outputs`` of a lake (its run date, else the newest; the newest model version of that date) as a
    trained model: every node's embedding and cluster per level (deltalake, no Spark)."""
    import numpy as np
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    table = DeltaTable(f"{lake.rstrip('/')}/model_outputs").to_pyarrow_table(
        columns=["entity_id", "embedding", "cluster_ids", "model_version", "run_date"])
    day = run_date or max(table.column("run_date").to_pylist())
    table = table.filter(pc.equal(table.column("run_date"), day))
    version = max(table.column("model_version").to_pylist(), key=lambda v: (len(v), v))
    table = table.filter(pc.equal(table.column("model_version"), version))
    clusters = np.asarray(table.column("cluster_ids").to_pylist(), dtype=np.int64)
    return {"ids": table.column("entity_id").to_pylist(),
            "embeddings": np.asarray(table.column("embedding").to_pylist(), dtype=np.float32),
            "assignments": list(clusters.T), "level_sizes": [int(c.max()) + 1 for c in clusters.T],
            "train_s": None, "source": f"model_outputs of {day}, model version {version}"}


def cluster_usage(item_clusters) -> list[dict]:
    """Per level: clusters that hold at least one item, and the largest cluster's share of the items."""
    import numpy as np

    out = []
    for c in item_clusters:
        counts = np.bincount(c[c >= 0]) if (c >= 0).any() else np.zeros(1, dtype=np.int64)
        out.append({"clusters_with_items": int((counts > 0).sum()),
                    "largest_share": round(float(counts.max() / max(counts.sum(), 1)), 4)})
    return out


def study(data, model: dict, k: int, levels: list[int] | None, clusters: list[int], candidates: int,
          candidate_share: float, say=print) -> tuple[dict, list[dict]]:
    """Exact search and every (level, clusters) setting on the trained ``model``; ``(exact, rows)``."""
    from hir_pipeline.evaluation.runner import align_clusters
    from hir_pipeline.evaluation.scoring import EmbeddingScorer
    from hir_pipeline.retrieval import HierarchicalSettings

    scorer = EmbeddingScorer.from_lookup(data, model["ids"], model["embeddings"])
    item_clusters = align_clusters(model["ids"], model["assignments"], data.item_ids)
    user_clusters = align_clusters(model["ids"], model["assignments"], data.user_ids)
    model["item_clusters"] = cluster_usage(item_clusters)
    say(json.dumps({"item_clusters_per_level": model["item_clusters"]}))
    exact = measure(data, scorer.users, scorer.items, item_clusters, user_clusters, k)
    say(json.dumps({"retrieval": "exact", **{s: {m: round(v, 4) for m, v in got.items()}
                                             for s, got in exact.items()}}))
    default = HierarchicalSettings()
    rows = []
    for level in (levels if levels is not None else range(len(item_clusters))):
        size = model["level_sizes"][level]
        for n in clusters:
            if n > size:
                continue
            settings = HierarchicalSettings(level=level, clusters=n, candidates=candidates,
                                            candidate_share=candidate_share)
            got = measure(data, scorer.users, scorer.items, item_clusters, user_clusters, k, settings)
            for split, m in got.items():
                full = exact[split]["recall"]
                row = {"split": split, "level": level, "level_size": size, "clusters": n, "candidates": candidates,
                       "candidate_share": candidate_share,
                       "default": (settings.routing_level(len(item_clusters)), n, candidates, candidate_share)
                       == (default.routing_level(len(item_clusters)), default.clusters, default.candidates,
                           default.candidate_share),
                       "recall": round(m["recall"], 4),
                       "recall_ratio": round(m["recall"] / full, 4) if full > 0 else None,
                       "scored_share": round(m["scored_share"], 4), "clusters_probed": round(m["clusters_probed"], 2),
                       "qps": round(m["qps"], 1), "qps_exact": round(exact[split]["qps"], 1), "users": m["users"]}
                row["meets_target"] = bool(row["recall_ratio"] is not None and row["recall_ratio"] >= TARGET_RATIO
                                           and row["scored_share"] <= TARGET_SHARE)
                rows.append(row)
                say(json.dumps(row))
    return exact, rows


def report(exact: dict, rows: list[dict], k: int) -> str:
    """Markdown: exact search per split, one line per setting, and whether the target is met."""
    lines = [f"| split | level (size) | clusters | recall@{k} | vs exact | items scored | clusters probed | "
             "queries/s | exact queries/s | target |", "|" + "---|" * 10]
    for r in rows:
        ratio = "-" if r["recall_ratio"] is None else f"{r['recall_ratio']:.3f}x"
        lines.append(f"| {r['split']} | {r['level']} ({r['level_size']}) | {r['clusters']}"
                     f"{' (default)' if r['default'] else ''} | {r['recall']:.4f} | {ratio} | "
                     f"{r['scored_share']:.1%} | {r['clusters_probed']:.1f} | {r['qps']:.0f} | {r['qps_exact']:.0f} | "
                     f"{'met' if r['meets_target'] else '-'} |")
    lines.append("")
    lines.append("exact search: " + "; ".join(f"{s} recall@{k} {m['recall']:.4f} ({m['users']} users, "
                                               f"{m['qps']:.0f} queries/s)" for s, m in exact.items()))
    for split in exact:
        met = [r for r in rows if r["split"] == split and r["meets_target"]]
        lines.append(f"target (>= {TARGET_RATIO}x exact recall@{k}, <= {TARGET_SHARE:.0%} of items scored) on {split}: "
                     + (", ".join(f"level {r['level']} x {r['clusters']} clusters" for r in met) if met
                        else "not met by any setting"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from hir_pipeline.retrieval import HierarchicalSettings

    default = HierarchicalSettings()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lake", help="lake root holding bronze tables and content_embeddings (not needed when --cache "
                   "holds the prepared splits)")
    p.add_argument("--run-date", type=dt.date.fromisoformat, help="run date of the split")
    p.add_argument("--cache", type=Path, help="pickle of the prepared splits (made when missing)")
    p.add_argument("--split", choices=SPLITS, default="test", help="test: the evaluation split's targets (default); "
                   "validation: the inner split")
    p.add_argument("--levels", default=None, help="routing levels, comma-separated (default: every level)")
    p.add_argument("--clusters", default="1,2,4,8,16", help="clusters probed, comma-separated (a number above a "
                   "level's size is skipped)")
    p.add_argument("--candidates", type=int, default=default.candidates, help="most items scored (0: no cap)")
    p.add_argument("--candidate-share", type=float, default=default.candidate_share,
                   help="most items scored as a share of the rankable items (0: no cap)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: the sample config's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="ModelConfig / TrainConfig override (JSON value)")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--model", type=Path, help="pickle of the trained model's embeddings and clusters: reused when "
                   "present (no training), written otherwise")
    p.add_argument("--model-outputs", dest="model_outputs", metavar="LAKE",
                   help="measure the published run's model (model_outputs of --run-date in LAKE) instead of training "
                   "one: it trained on every event, so its recall on the split is not a held-out figure; its ratio to "
                   "exact search still measures the routing")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    _, data, inputs, note = prepared_split(args, p)
    settings = {**sample_settings(), **QUIET, **({} if args.epochs is None else {"epochs": args.epochs}),
                **{k: parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}}
    if args.model_outputs:
        model = model_outputs(args.model_outputs, args.run_date)
        print(json.dumps({"model": model["source"]}), flush=True)
    elif args.model is not None and args.model.exists():
        model = pickle.loads(args.model.read_bytes())
    else:
        model = train(inputs, settings)
        print(json.dumps({"trained": model["level_sizes"], "train_s": model["train_s"]}), flush=True)
        if args.model is not None:
            args.model.write_bytes(pickle.dumps(model))
    levels = None if args.levels is None else [int(x) for x in args.levels.split(",")]
    exact, rows = study(data, model, args.k, levels, [int(x) for x in args.clusters.split(",")], args.candidates,
                        args.candidate_share)
    print(f"\n{note}; settings: {json.dumps(settings)}")
    print(report(exact, rows, args.k))
    print("items' clusters per level (clusters holding an item, largest cluster's share): " + ", ".join(
        f"level {lvl} {u['clusters_with_items']} / {u['largest_share']:.0%}"
        for lvl, u in enumerate(model["item_clusters"])))
    result = {"split": args.split, "note": note, "k": args.k, "settings": settings,
              "model": {"level_sizes": model["level_sizes"], "train_s": model["train_s"],
                        "source": model.get("source", "trained on the split"),
                        "item_clusters_per_level": model["item_clusters"]},
              "exact": exact, "rows": rows,
              "target": {"recall_ratio": TARGET_RATIO, "scored_share": TARGET_SHARE,
                         "met": {s: [r for r in rows if r["split"] == s and r["meets_target"]] != [] for s in exact}}}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
