"""The comparison table and plot of an evaluation, and the standalone ``hir evaluate`` entry point."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

from hir_pipeline.evaluation.runner import BASELINES, MetricRow

_SPLITS = ("warm", "cold")


def _fmt(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4f}"


def comparison_table(rows: Sequence[MetricRow], k: int = 20, note: str | None = None) -> str:
    """Markdown table: one line per method, Recall@k / NDCG@k for warm and cold items, users evaluated.

    Args:
        rows: metric rows of every method.
        k: cut-off of the ranking metrics.
        note: a line printed under the table (e.g. the target stage and any fallback).
    """
    val = {(m, s, name): v for m, s, name, v in rows}
    methods = sorted({m for m, s, _, _ in rows if s in _SPLITS},
                     key=lambda m: (m != "hir", BASELINES.index(m) if m in BASELINES else 99, m))
    cols = [(s, name) for s in _SPLITS for name in (f"recall_at_{k}", f"ndcg_at_{k}")]
    head = "| method | " + " | ".join(f"{s} {name.replace('_at_', '@')}" for s, name in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(_fmt(val.get((m, s, name))) for s, name in cols) + " |")
    users = {s: val.get((methods[0], s, "users")) for s in _SPLITS} if methods else {}
    lines.append("")
    lines.append("users evaluated: " + ", ".join(f"{s} {int(u)}" for s, u in users.items() if u is not None))
    ratios = [(s, name, v) for m, s, name, v in rows if m == "hir" and "_vs_" in name]
    if ratios:
        lines.append("targets: " + "; ".join(f"{s} {name.replace('_at_', '@')} = {v:.2f}x" for s, name, v in ratios))
    nmis = sorted((s, name, v) for m, s, name, v in rows if m == "hir" and name.startswith("nmi_level_")
                  and s == "all")
    if nmis:
        lines.append("NMI vs planted hierarchy: " + ", ".join(f"{name[4:]} {v:.3f}" for _, name, v in nmis))
    if note:
        lines.append(note)
    return "\n".join(lines)


def comparison_plot(rows: Sequence[MetricRow], k: int = 20) -> bytes:
    """PNG bar chart of Recall@k and NDCG@k per method, warm and cold side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    val = {(m, s, name): v for m, s, name, v in rows}
    methods = sorted({m for m, s, _, _ in rows if s in _SPLITS},
                     key=lambda m: (m != "hir", BASELINES.index(m) if m in BASELINES else 99, m))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, name in zip(axes, (f"recall_at_{k}", f"ndcg_at_{k}"), strict=True):
        width = 0.8 / max(len(methods), 1)
        for i, m in enumerate(methods):
            heights = [val.get((m, s, name), float("nan")) for s in _SPLITS]
            ax.bar([j + i * width for j in range(len(_SPLITS))], heights, width, label=m)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(_SPLITS))], list(_SPLITS))
        ax.set_title(name.replace("_at_", "@"))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def png_markdown(png: bytes, alt: str = "comparison") -> str:
    """Markdown embedding a PNG inline (Dagster renders it in the asset's metadata)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def run_evaluation_cli(
    source: str,
    lake: str | None = None,
    partition: str | None = None,
    epochs: int | None = None,
    config: dict | None = None,
    report_path: str | None = None,
) -> int:
    """``hir evaluate``: ingest the source, embed its content and run ``evaluation_report``, then print the table.

    Orchestration entry point (imports Dagster and Spark lazily; the rest of this package does not). It
    materializes, through Dagster and against the project's instance (so the run shows in the UI), the ingestion
    assets, ``content_embeddings`` and ``evaluation_report`` - not the graph, training or publishing assets, which
    the evaluation does not read (it builds its own graph from the training split). Without a nightly training
    run for the date, the evaluation logs to an MLflow run of its own and promotes nothing.

    Args:
        source: ``movielens``, ``synthetic`` or a source folder.
        lake: Delta lake root (default ``HIR_LAKE`` or ``.hir/lake``).
        partition: run date ``YYYY-MM-DD`` (ingests that day); default: backfill the whole source and evaluate
            as of its latest event date.
        epochs: override of HIR's training epochs for the evaluation model.
        config: more ``evaluation_report`` run config (see ``assets.evaluation.EvaluationConfig``).
        report_path: also write the comparison table (markdown) here.

    Returns:
        Process exit code: 0 on success, 1 when the run failed.
    """
    import os
    import sys

    import dagster as dg

    from assets import ASSET_MODULES
    from hir_pipeline.cli import dagster_home
    from hir_pipeline.definitions import default_resources
    from spark_jobs.source_reader import latest_event_date, read_source

    dagster_home()
    resources = default_resources(lake, source)
    if partition:
        dt_partition, window = partition, "day"
    else:
        session = resources["spark"].get_session()
        latest = latest_event_date(read_source(session, resources["source"].prepare(session))["events"])
        if latest is None:
            raise ValueError(f"source {source!r} has no event with a parseable event_ts")
        dt_partition, window = latest.isoformat(), "all"
    print(f"hir evaluate: source={source} lake={resources['lake'].root} run date={dt_partition} "
          f"ingestion window={window}", flush=True)
    eval_config = dict(config or {})
    if epochs is not None:
        eval_config["epochs"] = epochs
    selection = dg.AssetSelection.groups("ingestion") | dg.AssetSelection.assets("content_embeddings",
                                                                                 "evaluation_report")
    everything = [*dg.load_assets_from_modules(ASSET_MODULES), *dg.load_asset_checks_from_modules(ASSET_MODULES)]
    result = dg.materialize(
        everything, selection=selection, partition_key=dt_partition, resources=resources,
        instance=dg.DagsterInstance.get(), raise_on_error=False,
        run_config=dg.RunConfig(ops={"bronze_tables": {"config": {"window": window}},
                                     "evaluation_report": {"config": eval_config}}),
    )
    reports = [e for e in result.get_asset_materialization_events()
               if e.asset_key == dg.AssetKey("evaluation_report")]
    if not result.success or not reports:
        print(f"hir evaluate: run {result.run_id} failed; inspect it in the UI "
              f"(DAGSTER_HOME={os.environ['DAGSTER_HOME']} dagster dev)", file=sys.stderr)
        return 1
    meta = reports[-1].materialization.metadata
    table = meta["comparison"].value
    print(f"\nEvaluation of {dt_partition} (model version {meta['model_version'].value}):\n")
    print(table)
    print(f"\nDelta: {meta['path'].value} (version {meta['delta_version'].value}); "
          f"MLflow run {meta['mlflow_run_id'].value}")
    if report_path:
        from pathlib import Path

        Path(report_path).write_text(table + "\n")
    return 0
