"""Where every Delta table of the pipeline lives."""

from __future__ import annotations

import dagster as dg

from hir_pipeline.contracts import LAKE_TABLES


class LakeResource(dg.ConfigurableResource):
    """The Delta lake.

    Args:
        root: folder or URI (``s3a://bucket/lake``, ``abfss://...``, ``/data/lake``) under which
            each table is stored at ``<root>/<table>``.
    """

    root: str

    def path(self, table: str) -> str:
        if table not in LAKE_TABLES:
            raise KeyError(f"unknown lake table {table!r}; known: {', '.join(LAKE_TABLES)}")
        return f"{self.root.rstrip('/')}/{table}"
