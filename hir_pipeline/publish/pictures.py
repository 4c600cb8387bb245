"""Pictures of a publication, as PNG bytes: the cluster hierarchy as a sunburst, and a 2-D map of the
embeddings (PCA) coloured by coarse cluster. Matplotlib's non-interactive Agg backend, no display needed.
"""

from __future__ import annotations

import io
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
    are made per level, so a parent's own size need not equal its children's sum).
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
        if width[key] <= 0:
            width[key] = 1.0  # an empty cluster still gets a sliver, so it is visible
        return width[key]

    roots = sorted((n for n in nodes if n.level == 0), key=lambda n: n.cluster_id)
    total = sum(measure(r) for r in roots) or 1.0
    layout: dict[tuple[int, int], tuple[float, float]] = {}

    def place(node: ClusterNode, start: float) -> None:
        key = (node.level, node.cluster_id)
        layout[key] = (start, 2 * np.pi * width[key] / total)
        for kid in sorted(children.get(key, []), key=lambda n: n.cluster_id):
            place(kid, start)
            start += layout[(kid.level, kid.cluster_id)][1]

    start = 0.0
    for root in roots:
        place(root, start)
        start += layout[(0, root.cluster_id)][1]
    return layout


def hierarchy_sunburst_png(nodes: Sequence[ClusterNode], title: str = "Interest hierarchy", dpi: int = 90) -> bytes:
    """The published hierarchy as a sunburst: level 0 inside, one ring per level, width ~ members.

    Args:
        nodes: every published cluster of every level.
        title: figure title.
        dpi: resolution of the PNG.
    """
    layout = sunburst_layout(nodes)
    roots = sorted({n.cluster_id for n in nodes if n.level == 0})
    colour = {c: col for c, col in zip(roots, _palette(len(roots)), strict=False)}
    by_key = {(n.level, n.cluster_id): n for n in nodes}

    def root_of(node: ClusterNode) -> int:
        while node.level > 0 and (node.level - 1, node.parent_cluster_id) in by_key:
            node = by_key[(node.level - 1, node.parent_cluster_id)]
        return node.cluster_id

    fig = _figure(7.5, 7.5)
    ax = fig.add_subplot(projection="polar")
    for node in nodes:
        key = (node.level, node.cluster_id)
        if key not in layout:
            continue  # orphan (parent not published): not drawn
        start, width = layout[key]
        rgba = np.array(colour.get(root_of(node), (0.6, 0.6, 0.6, 1.0)), dtype=float)
        rgba[:3] = rgba[:3] + (1 - rgba[:3]) * min(0.25 * node.level, 0.75)  # deeper = lighter
        ax.bar(start, 1.0, width=width, bottom=1.0 + node.level, align="edge", color=rgba,
               edgecolor="white", linewidth=0.5)
        if node.level <= 1 and width > (0.35 if node.level == 0 else 0.25):
            # level 0: the whole label; level 1: its first term, so neighbouring wedges do not collide
            text = node.label if node.level == 0 else node.label.split(" / ")[0]
            ax.text(start + width / 2, 1.5 + node.level, f"{node.cluster_id}: {text}"[:30], ha="center",
                    va="center", fontsize=8 if node.level == 0 else 6.5)
    ax.set_axis_off()
    ax.set_title(title)
    return _png(fig, dpi)


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Project rows of ``x`` onto its first two principal components (``[N, 2]``; first = most variance)."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    if len(x) < 2:
        return np.zeros((len(x), 2))
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    proj = centred @ vt[:2].T
    return np.pad(proj, ((0, 0), (0, 2 - proj.shape[1])))


def embedding_map_png(
    embeddings: np.ndarray,
    coarse: np.ndarray,
    labels: Mapping[int, str] | None = None,
    title: str = "Embeddings (PCA) by coarse cluster",
    dpi: int = 90,
) -> bytes:
    """Scatter of the embeddings' first two principal components, one colour per coarse cluster.

    Args:
        embeddings: float ``[N, D]``.
        coarse: int ``[N]`` level-0 published cluster of each row.
        labels: coarse cluster -> label for the legend.
        title: figure title.
        dpi: resolution of the PNG.
    """
    xy = pca_2d(embeddings)
    coarse = np.asarray(coarse)
    ids = sorted({int(c) for c in coarse})
    colours = _palette(len(ids))
    fig = _figure(7.5, 6.0)
    ax = fig.add_subplot()
    for c, col in zip(ids, colours, strict=False):
        sel = coarse == c
        name = f"{c}: {labels[c]}"[:40] if labels and c in labels else str(c)
        ax.scatter(xy[sel, 0], xy[sel, 1], s=6, alpha=0.7, color=col, label=name, linewidths=0)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title)
    if len(ids) <= 20:
        ax.legend(fontsize=7, markerscale=2, loc="best", frameon=False)
    return _png(fig, dpi)
