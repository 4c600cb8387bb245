"""Querying the published tables without Spark (deltalake + numpy): the API and the ``hir query`` command line.

:mod:`hir_pipeline.query.api` resolves a publication and answers :func:`similar`, :func:`cluster` and
:func:`recommend`; :mod:`hir_pipeline.query.cli` wires them into ``hir query ...``. Both are re-exported here.
"""

from hir_pipeline.query.api import (
    MANIFEST_TABLE,
    RECOMMENDABLE_TYPES,
    ClusterView,
    Hit,
    Member,
    Publication,
    QueryError,
    Recommendation,
    Snapshot,
    UnknownIdError,
    cluster,
    hierarchy_settings,
    recommend,
    similar,
)
from hir_pipeline.query.cli import EXIT_UNKNOWN, add_query_parser, run_query

__all__ = [
    "EXIT_UNKNOWN",
    "MANIFEST_TABLE",
    "RECOMMENDABLE_TYPES",
    "ClusterView",
    "Hit",
    "Member",
    "Publication",
    "QueryError",
    "Recommendation",
    "Snapshot",
    "UnknownIdError",
    "add_query_parser",
    "cluster",
    "hierarchy_settings",
    "recommend",
    "run_query",
    "similar",
]
