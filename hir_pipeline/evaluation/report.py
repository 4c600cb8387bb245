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


def _order(method: str) -> tuple:
    """HIR, then its diagnostics (``hir_*``), then the baselines in :data:`BASELINES` order, then the rest."""
    return (method != "hir", not method.startswith("hir"), BASELINES.index(method) if method in BASELINES else 99,
            method)


def _comparison_lines(val: dict, k: int, confidence: float) -> list[str]:
    """One line per HIR comparison row: the ratio, its interval and the difference with its interval."""
    metric = f"recall_at_{k}"
    parts, with_ci = [], False
    for s in _SPLITS:
        for ref in ("best_baseline", "content"):
            ratio = val.get(("hir", s, f"{metric}_vs_{ref}"))
            if ratio is None:
                continue
            label = ref.replace("_", " ")
            if ref == "best_baseline":
                # the rule of runner.best_baseline: highest mean, first in BASELINES order on a tie
                base = [(val[(m, s, metric)], -i, m) for i, m in enumerate(BASELINES)
                        if math.isfinite(val.get((m, s, metric), math.nan))]
                label += f" ({max(base)[2]})" if base else ""
            text = f"{s} recall@{k} vs {label} = {_fmt_x(ratio)}"
            lo, hi = (val.get(("hir", s, f"{metric}_vs_{ref}_ci_{e}")) for e in ("low", "high"))
            if lo is not None and hi is not None:
                with_ci = True
                text += f" [{_fmt_x(lo)}, {_fmt_x(hi)}]"
            diff = val.get(("hir", s, f"{metric}_diff_vs_{ref}"))
            if diff is not None:
                d_lo, d_hi = (val.get(("hir", s, f"{metric}_diff_vs_{ref}_ci_{e}"), math.nan) for e in ("low", "high"))
                text += f", difference {diff:+.4f} [{d_lo:+.4f}, {d_hi:+.4f}]"
            parts.append(text)
    if not parts:
        return []
    tail = f" ({confidence:.0%} paired bootstrap intervals over users)" if with_ci else ""
    return ["targets: " + "; ".join(parts) + tail]


def _fmt_x(v: float) -> str:
    return f"{v:.2f}x" if math.isfinite(v) else "-"


def comparison_table(rows: Sequence[MetricRow], k: int = 20, note: str | None = None,
                     confidence: float = 0.95) -> str:
    """Markdown table: one line per method, Recall@k / NDCG@k for warm and cold items, users evaluated, HIR's
    ratios to the baselines with their intervals, and HIR's hierarchical retrieval against exact search.

    Args:
        rows: metric rows of every method.
        k: cut-off of the ranking metrics.
        note: a line printed under the table (e.g. the target stage and any fallback).
        confidence: nominal coverage of the intervals among ``rows`` (names them).
    """
    val = {(m, s, name): v for m, s, name, v in rows}
    methods = sorted({m for m, s, _, _ in rows if s in _SPLITS}, key=_order)
    cols = [(s, name) for s in _SPLITS for name in (f"recall_at_{k}", f"ndcg_at_{k}")]
    head = "| method | " + " | ".join(f"{s} {name.replace('_at_', '@')}" for s, name in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(_fmt(val.get((m, s, name))) for s, name in cols) + " |")
    users = {s: val.get((methods[0], s, "users")) for s in _SPLITS} if methods else {}
    lines.append("")
    lines.append("users evaluated: " + ", ".join(f"{s} {int(u)}" for s, u in users.items() if u is not None))
    lines += _comparison_lines(val, k, confidence)
    nmis = sorted((s, name, v) for m, s, name, v in rows if m == "hir" and name.startswith("nmi_level_")
                  and s == "all")
    if nmis:
        lines.append("NMI vs planted hierarchy: " + ", ".join(f"{name[4:]} {v:.3f}" for _, name, v in nmis))
    purity = sorted((name, v) for m, _, name, v in rows if m == "hir" and name.startswith("label_purity_"))
    if purity:  # label_purity_level_<l> / label_purity_real_words_level_<l> (hir_pipeline.evaluation.label_purity)
        lines.append("label purity vs planted vocabularies: " + ", ".join(
            f"{name.removeprefix('label_purity_').replace('_', ' ')} {v:.3f}" for name, v in purity))
    hierarchical = _hierarchical_line(val)
    if hierarchical:
        lines.append(hierarchical)
    if note:
        lines.append(note)
    return "\n".join(lines)


def _hierarchical_line(val: dict) -> str | None:
    """HIR's hierarchical retrieval against exact search per split: recall ratio and share of items scored."""
    parts = []
    for s in _SPLITS:
        ratio, share = (val.get(("hir", s, f"hierarchical_{m}")) for m in ("recall_ratio", "scored_share"))
        if share is not None:
            parts.append(f"{s} recall {_fmt_x(ratio) if ratio is not None else '-'} of exact search, "
                         f"{share:.1%} of the items scored")
    return "hierarchical retrieval: " + "; ".join(parts) if parts else None


def comparison_bars(rows: Sequence[MetricRow], k: int = 20) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """What :func:`comparison_plot` draws: metric -> method -> (bar heights, error half-widths), one per split
    (warm, cold). An error is the metric's standard deviation over the training seeds (its ``<metric>_seed_std``
    row: HIR trained with several seeds), 0 where there is none; a missing metric is NaN."""
    val = {(m, s, name): v for m, s, name, v in rows}
    methods = sorted({m for m, s, _, _ in rows if s in _SPLITS}, key=_order)
    return {name: {m: ([val.get((m, s, name), float("nan")) for s in _SPLITS],
                       [val.get((m, s, f"{name}_seed_std"), 0.0) for s in _SPLITS]) for m in methods}
            for name in (f"recall_at_{k}", f"ndcg_at_{k}")}


def comparison_plot(rows: Sequence[MetricRow], k: int = 20) -> bytes:
    """PNG bar chart of Recall@k and NDCG@k per method, warm and cold side by side; error bars of one standard
    deviation over the training seeds where the evaluation trained several (:func:`comparison_bars`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = comparison_bars(rows, k)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, by_method) in zip(axes, bars.items(), strict=True):
        width = 0.8 / max(len(by_method), 1)
        for i, (m, (heights, errors)) in enumerate(by_method.items()):
            ax.bar([j + i * width for j in range(len(_SPLITS))], heights, width, label=m,
                   yerr=errors if any(errors) else None, capsize=3)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(_SPLITS))], list(_SPLITS))
        seeds = any(any(errors) for _, errors in by_method.values())
        ax.set_title(name.replace("_at_", "@") + (" (error bars: ±1 std over seeds)" if seeds else ""))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def png_markdown(png: bytes, alt: str = "comparison") -> str:
    """Markdown embedding a PNG inline (Dagster renders it in the asset's metadata)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
