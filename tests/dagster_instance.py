"""Dagster instances for tests with the committed ``dagster.yaml``'s settings (test helper only)."""

from __future__ import annotations

import dagster as dg
import yaml

from hir_pipeline.settings import project_root


def project_python_logs() -> dict:
    """The ``python_logs`` section of the committed ``dagster.yaml`` (which loggers reach the run log, their level)."""
    return yaml.safe_load((project_root() / "dagster.yaml").read_text())["python_logs"]


def ephemeral_instance() -> dg.DagsterInstance:
    """An in-memory instance that captures the project's Python loggers into the run log as the committed one does."""
    return dg.DagsterInstance.ephemeral(settings={"python_logs": project_python_logs()})
