"""Data-quality checks of the graph tables: pure functions returning ``(passed, metadata)``.

The Dagster layer wraps each one into an asset check; metadata values are plain ints / lists so they
serialise as check metadata.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

CheckResult = tuple[bool, dict]


def check_no_dangling_edges(nodes: DataFrame, edges: DataFrame) -> CheckResult:
    """Every ``src_idx`` and ``dst_idx`` of ``graph_edges`` is a ``node_idx`` of ``graph_nodes``."""
    idx = nodes.select(F.col("node_idx").alias("_i"))
    bad = 0
    for col in ("src_idx", "dst_idx"):
        bad += edges.join(idx, edges[col] == idx["_i"], "left_anti").count()
    return bad == 0, {"dangling_endpoints": int(bad)}


def check_weights_finite_positive(edges: DataFrame) -> CheckResult:
    """Every edge weight is a finite number above zero."""
    w = F.col("weight")
    bad = edges.where(w.isNull() | F.isnan(w) | (w <= 0) | (F.abs(w) == float("inf"))).count()
    return bad == 0, {"bad_weights": int(bad), "edges": int(edges.count())}


def check_anchor_first(views: DataFrame) -> CheckResult:
    """Every view holds its anchor at position 0 (``nodes[0] == anchor_idx``)."""
    first = F.element_at("nodes", 1)
    bad = views.where(first.isNull() | (first != F.col("anchor_idx"))).count()
    return bad == 0, {"views_without_anchor_first": int(bad)}


def _bad_matrices(batches):
    for pdf in batches:
        square = sym = diag = 0
        for nodes, dist in zip(pdf["nodes"], pdf["dist"], strict=True):
            n = len(nodes)
            d = np.frombuffer(dist, dtype=np.int8)
            if d.size != n * n:
                square += 1
                continue
            d = d.reshape(n, n)
            sym += int(not np.array_equal(d, d.T))
            diag += int(np.any(np.diagonal(d) != 0))
        yield pd.DataFrame({"not_square": [square], "not_symmetric": [sym], "nonzero_diagonal": [diag]})


def check_distance_matrices(views: DataFrame) -> CheckResult:
    """Every ``dist`` array is ``n * n`` bytes for ``n`` nodes, symmetric, and zero on the diagonal."""
    counts = views.select("nodes", "dist").mapInPandas(
        _bad_matrices, "not_square long, not_symmetric long, nonzero_diagonal long"
    ).agg(*[F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in ("not_square", "not_symmetric", "nonzero_diagonal")])
    meta = {k: int(v) for k, v in counts.first().asDict().items()}
    return not any(meta.values()), meta

