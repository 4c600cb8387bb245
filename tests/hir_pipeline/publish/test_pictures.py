"""Publication pictures: PCA projection, sunburst layout nesting, labels and sizes a reader sees, valid PNGs."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.publish.pictures import (
    ClusterNode,
    embedding_map_figure,
    embedding_map_png,
    hierarchy_sunburst_figure,
    hierarchy_sunburst_png,
    pca_2d,
    sunburst_layout,
)

NODES = [
    ClusterNode(0, 0, None, 30, "running / shoes / trail"),
    ClusterNode(0, 5, None, 10, "espresso / coffee"),
    ClusterNode(1, 1, 0, 20, "running / marathon"),
    ClusterNode(1, 2, 0, 10, "yoga / mat"),
    ClusterNode(1, 3, 5, 10, "espresso / grinder"),
    ClusterNode(2, 8, 1, 20, "trail"),
    ClusterNode(2, 9, 1, 0, "L2-9"),  # an empty cluster (as older publications list them) is not drawn
]


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_pca_first_component_carries_most_variance():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 6)) * np.array([10, 3, 0.1, 0.1, 0.1, 0.1])
    xy = pca_2d(x)
    assert xy.shape == (500, 2)
    assert xy[:, 0].var() > xy[:, 1].var() > 1.0
    assert abs(np.corrcoef(xy[:, 0], x[:, 0])[0, 1]) > 0.99


def test_sunburst_children_nest_inside_parents_and_cover_the_circle():
    layout = sunburst_layout(NODES)
    total = sum(layout[(0, c)][1] for c in (0, 5))
    assert total == pytest.approx(2 * np.pi)
    assert (2, 9) not in layout  # empty: left out
    for node in NODES:
        if node.parent_cluster_id is None or (node.level, node.cluster_id) not in layout:
            continue
        ps, pw = layout[(node.level - 1, node.parent_cluster_id)]
        s, w = layout[(node.level, node.cluster_id)]
        assert ps - 1e-9 <= s and s + w <= ps + pw + 1e-9
    # cluster 1's width comes from its drawn child (20 members), cluster 2 from its size
    assert layout[(1, 1)][1] / layout[(1, 2)][1] == pytest.approx(2)


def test_sunburst_names_wedges_by_label_and_size_with_a_legend_of_coarse_clusters():
    fig = hierarchy_sunburst_figure(NODES)
    texts = "\n".join(_texts(fig))
    for words in ("running", "shoes", "espresso", "yoga", "(30)", "(10)", "(20)"):
        assert words in texts
    assert "L2-9" not in texts
    assert _legend(fig) == ["running / shoes / trail (30)", "espresso / coffee (10)"]
    assert _legend(hierarchy_sunburst_figure(NODES, max_legend=1)) == ["running / shoes / trail (30)"]


def test_embedding_map_legend_names_coarse_clusters_by_label_largest_first():
    rng = np.random.default_rng(0)
    coarse = np.array([0] * 30 + [5] * 10 + [7] * 5)
    fig = embedding_map_figure(rng.normal(size=(45, 8)), coarse, {0: "running / shoes", 5: "espresso"})
    assert _legend(fig) == ["running / shoes (30)", "espresso (10)", "7 (5)"]
    # more coarse clusters than legend entries: the smallest share a grey "other" entry
    assert _legend(embedding_map_figure(rng.normal(size=(45, 8)), coarse, {0: "running"}, max_legend=2)) == [
        "running (30)", "other: 2 clusters (15)"]


def test_pictures_are_valid_pngs():
    for png in (hierarchy_sunburst_png(NODES),
                embedding_map_png(np.random.default_rng(0).normal(size=(50, 8)), np.arange(50) % 3,
                                  {0: "a", 1: "b", 2: "c"})):
        img = Image.open(io.BytesIO(png))
        assert img.format == "PNG" and img.size[0] > 200 and img.size[1] > 200
