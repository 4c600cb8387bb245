"""Pictures of a publication, as PNG bytes: the cluster hierarchy as a sunburst whose wedges are named by label and
size, and a 2-D map of the embeddings (PCA) coloured by coarse cluster with a legend of their labels. Only clusters
holding members are drawn. Matplotlib's non-interactive Agg backend, no display needed; the ``*_figure`` functions
return the figure itself (its texts and legend are what a reader sees).
"""

from __future__ import annotations

import io
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClusterNode:
    """One published cluster.

    Args:
        level: 0 = coarsest.
        cluster_id: published ID (unique within the level).
        parent_cluster_id: published ID of the parent at ``level - 1`` (None at level 0).
        size: members at this level.
        label: human-readable label.
    """

    level: int
    cluster_id: int
    parent_cluster_id: int | None
    size: int
    label: str


def _figure(width: float, height: float):
    # A bare Figure (no pyplot): no global backend state, no GUI, safe in worker threads.
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _png(fig, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def _palette(n: int) -> np.ndarray:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if n > 10 else "tab10"]
    return np.array([cmap(i % cmap.N) for i in range(max(n, 1))])


def sunburst_layout(nodes: Sequence[ClusterNode]) -> dict[tuple[int, int], tuple[float, float]]:
    """Angular extent ``(start, width)`` in radians of every cluster; children nest inside their parent.

    A leaf is as wide as its size; an inner cluster as wide as its children together (top-1 assignments
    are made per level, so a parent's own size need not equal its children's sum). A cluster without members
    and without a drawn child is left out.

    Args:
        nodes: the published clusters of every level.
    """
    children: dict[tuple[int, int], list[ClusterNode]] = defaultdict(list)
    for node in nodes:
        if node.parent_cluster_id is not None:
            children[(node.level - 1, node.parent_cluster_id)].append(node)
    width: dict[tuple[int, int], float] = {}

    def measure(node: ClusterNode) -> float:
        key = (node.level, node.cluster_id)
        kids = children.get(key, [])
        width[key] = sum(measure(k) for k in kids) if kids else float(max(node.size, 0))
        return width[key]

    roots = sorted((n for n in nodes if n.level == 0), key=lambda n: n.cluster_id)
    total = sum(measure(r) for r in roots) or 1.0
    layout: dict[tuple[int, int], tuple[float, float]] = {}

    def place(node: ClusterNode, start: float) -> None:
        key = (node.level, node.cluster_id)
        if width[key] <= 0:
            return
        layout[key] = (start, 2 * np.pi * width[key] / total)
        for kid in sorted(children.get(key, []), key=lambda n: n.cluster_id):
            place(kid, start)
            start += layout.get((kid.level, kid.cluster_id), (0.0, 0.0))[1]

    start = 0.0
    for root in roots:
        place(root, start)
        start += layout.get((0, root.cluster_id), (0.0, 0.0))[1]
    return layout


def wedge_text(node: ClusterNode, width: float, min_width: float = 0.2, line_chars: int = 16) -> str | None:
    """What a wedge of the sunburst says: its label (wrapped, as many terms as fit) and its size; None when the
    wedge is too narrow for text.

    Args:
        node: the cluster.
        width: the wedge's angular width in radians.
        min_width: narrowest wedge that gets text.
        line_chars: characters per line of the wrapped label.
    """
    if width < min_width:
        return None
    lines = 3 if width > 4 * min_width else 2 if width > 2 * min_width else 1
    label = textwrap.shorten(node.label, width=line_chars * lines, placeholder="…")
    return "\n".join([*textwrap.wrap(label, line_chars)[:lines], f"({node.size:,})"])


def hierarchy_sunburst_figure(nodes: Sequence[ClusterNode], title: str = "Interest hierarchy",
                               max_legend: int = 20):
    """The published hierarchy as a sunburst: level 0 inside, one ring per level, width ~ members; the wedges
    of the two inner rings say their label and size where they are wide enough, and a legend names every coarse
    cluster (largest first, at most ``max_legend``) by label and size.

    Args:
        nodes: every published cluster of every level.
        title: figure title.
        max_legend: most coarse clusters named in the legend.
    """
    layout = sunburst_layout(nodes)
    roots = sorted({n.cluster_id for n in nodes if n.level == 0})
    colour = {c: col for c, col in zip(roots, _palette(len(roots)), strict=False)}
    by_key = {(n.level, n.cluster_id): n for n in nodes}

    def root_of(node: ClusterNode) -> int:
        while node.level > 0 and (node.level - 1, node.parent_cluster_id) in by_key:
            node = by_key[(node.level - 1, node.parent_cluster_id)]
        return node.cluster_id

    fig = _figure(9.5, 7.5)
    ax = fig.add_subplot(projection="polar")
    for node in nodes:
        key = (node.level, node.cluster_id)
        if key not in layout:
            continue  # empty, or an orphan (parent not published): not drawn
        start, width = layout[key]
        rgba = np.array(colour.get(root_of(node), (0.6, 0.6, 0.6, 1.0)), dtype=float)
        rgba[:3] = rgba[:3] + (1 - rgba[:3]) * min(0.25 * node.level, 0.75)  # deeper = lighter
        bar = ax.bar(start, 1.0, width=width, bottom=1.0 + node.level, align="edge", color=rgba,
                     edgecolor="white", linewidth=0.5)
        if node.level == 0:
            bar.set_label(f"{node.label} ({node.size:,})")
        text = wedge_text(node, width, min_width=0.3 if node.level == 0 else 0.2) if node.level <= 1 else None
        if text:
            ax.text(start + width / 2, 1.5 + node.level, text, ha="center", va="center",
                    fontsize=7 if node.level == 0 else 6)
    handles, names = ax.get_legend_handles_labels()
    sizes = {f"{n.label} ({n.size:,})": n.size for n in nodes if n.level == 0}
    order = sorted(range(len(names)), key=lambda i: -sizes.get(names[i], 0))[:max_legend]
    if order:
        ax.legend([handles[i] for i in order], [names[i] for i in order], title="coarse clusters (members)",
                  fontsize=7, title_fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_axis_off()
    ax.set_title(title)
    return fig


def hierarchy_sunburst_png(nodes: Sequence[ClusterNode], title: str = "Interest hierarchy", dpi: int = 90,
                           max_legend: int = 20) -> bytes:
    """:func:`hierarchy_sunburst_figure` as PNG bytes.

    Args:
        nodes: every published cluster of every level.
        title: figure title.
        dpi: resolution of the PNG.
        max_legend: most coarse clusters named in the legend.
    """
    return _png(hierarchy_sunburst_figure(nodes, title, max_legend), dpi)


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Project rows of ``x`` onto its first two principal components (``[N, 2]``; first = most variance)."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    if len(x) < 2:
        return np.zeros((len(x), 2))
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    proj = centred @ vt[:2].T
    return np.pad(proj, ((0, 0), (0, 2 - proj.shape[1])))


def embedding_map_figure(
    embeddings: np.ndarray,
    coarse: np.ndarray,
    labels: Mapping[int, str] | None = None,
    title: str = "Embeddings (PCA) by coarse cluster",
    max_legend: int = 20,
):
    """Scatter of the embeddings' first two principal components, one colour per coarse cluster, with a legend
    naming each by label and drawn points (largest first); beyond ``max_legend - 1`` clusters the rest share one
    grey "other" entry, so colours stay distinguishable.

    Args:
        embeddings: float ``[N, D]``.
        coarse: int ``[N]`` level-0 published cluster of each row.
        labels: coarse cluster -> label for the legend (the cluster ID where missing).
        title: figure title.
        max_legend: most legend entries.
    """
    xy = pca_2d(embeddings)
    coarse = np.asarray(coarse)
    ids, counts = np.unique(coarse.astype(np.int64), return_counts=True)
    order = [int(ids[i]) for i in np.lexsort((ids, -counts))]
    named = order if len(order) <= max_legend else order[:max_legend - 1]
    colours = _palette(len(named))
    fig = _figure(9.5, 6.0)
    ax = fig.add_subplot()
    for c, col in zip(named, colours, strict=False):
        sel = coarse == c
        name = labels.get(c, str(c)) if labels else str(c)
        ax.scatter(xy[sel, 0], xy[sel, 1], s=6, alpha=0.7, color=col, label=f"{name} ({int(sel.sum()):,})",
                   linewidths=0)
    rest = ~np.isin(coarse, named)
    if rest.any():
        ax.scatter(xy[rest, 0], xy[rest, 1], s=6, alpha=0.5, color=(0.6, 0.6, 0.6, 1.0), linewidths=0,
                   label=f"other: {len(order) - len(named)} clusters ({int(rest.sum()):,})")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title)
    ax.legend(title="coarse cluster (points)", fontsize=7, title_fontsize=7, markerscale=2, frameon=False,
              loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def embedding_map_png(
    embeddings: np.ndarray,
    coarse: np.ndarray,
    labels: Mapping[int, str] | None = None,
    title: str = "Embeddings (PCA) by coarse cluster",
    dpi: int = 90,
    max_legend: int = 20,
) -> bytes:
    """:func:`embedding_map_figure` as PNG bytes.

    Args:
        embeddings: float ``[N, D]``.
        coarse: int ``[N]`` level-0 published cluster of each row.
        labels: coarse cluster -> label for the legend.
        title: figure title.
        dpi: resolution of the PNG.
        max_legend: most legend entries.
    """
    return _png(embedding_map_figure(embeddings, coarse, labels, title, max_legend), dpi)
