"""Publishing helpers that need numpy/scipy/matplotlib only (no Spark, no Dagster).

* :mod:`~hir_pipeline.publish.stable_ids` — keep an interest's cluster ID across model versions.
* :mod:`~hir_pipeline.publish.labels` — human-readable cluster labels: the terms that set a cluster's members apart.
* :mod:`~hir_pipeline.publish.pictures` — the cluster hierarchy (sunburst) and a 2-D embedding map, as PNG.
"""
