"""Publication pictures: PCA projection, sunburst layout nesting, valid PNGs."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hir_pipeline.publish.pictures import (
    ClusterNode,
    embedding_map_png,
    hierarchy_sunburst_png,
    pca_2d,
    sunburst_layout,
)

NODES = [
    ClusterNode(0, 0, None, 30, "sports"),
    ClusterNode(0, 5, None, 10, "coffee"),
    ClusterNode(1, 1, 0, 20, "running"),
    ClusterNode(1, 2, 0, 10, "yoga"),
    ClusterNode(1, 3, 5, 10, "espresso"),
    ClusterNode(2, 9, 1, 0, "trail"),  # empty leaf still gets a sliver
]


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
    for node in NODES:
        if node.parent_cluster_id is None:
            continue
        ps, pw = layout[(node.level - 1, node.parent_cluster_id)]
        s, w = layout[(node.level, node.cluster_id)]
        assert ps - 1e-9 <= s and s + w <= ps + pw + 1e-9
    # cluster 1's width comes from its single (empty -> 1) child, cluster 2 from its size
    assert layout[(1, 1)][1] / layout[(1, 2)][1] == pytest.approx(1 / 10)


def test_pictures_are_valid_pngs():
    for png in (hierarchy_sunburst_png(NODES),
                embedding_map_png(np.random.default_rng(0).normal(size=(50, 8)), np.arange(50) % 3,
                                  {0: "a", 1: "b", 2: "c"})):
        img = Image.open(io.BytesIO(png))
        assert img.format == "PNG" and img.size[0] > 200 and img.size[1] > 200
