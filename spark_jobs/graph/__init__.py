"""The typed, weighted, time-decayed interaction graph and its sampled views.

``build_edges`` -> ``build_nodes`` -> ``build_views`` produce the ``graph_edges``, ``graph_nodes`` and
``graph_views`` tables of ``hir_pipeline.contracts``; ``update_views`` is the nightly increment,
``snapshots`` keeps one snapshot per run date and decides when the increment applies, and ``checks`` holds the
data-quality checks.
"""

from spark_jobs.graph.config import GraphConfig
from spark_jobs.graph.edges import build_edges
from spark_jobs.graph.nodes import build_nodes
from spark_jobs.graph.views import GraphSnapshot, affected_anchors, anchors_to_recompute, build_views, update_views

__all__ = [
    "GraphConfig", "GraphSnapshot", "affected_anchors", "anchors_to_recompute", "build_edges", "build_nodes",
    "build_views", "update_views",
]
