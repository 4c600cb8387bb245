"""Where things live by default, and how the environment overrides it.

All defaults are project-local so that a fresh clone runs with no services: a SQLite-backed
Dagster instance, a SQLite MLflow store and a Delta lake in a folder. Every path can be moved
with an environment variable (documented in the README) or with Dagster resource config.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Delta Lake release whose jars are put on Spark's classpath. Must equal the delta-spark pin in
#: pyproject.toml, and delta-spark 4.0 is built for Spark 4.0 (Scala 2.13).
DELTA_VERSION = "4.0.1"
SCALA_BINARY_VERSION = "2.13"


def project_root() -> Path:
    """The checkout holding pyproject.toml, or the working directory for an installed package."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def _path_from_env(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def state_dir() -> Path:
    """Run state: the lake, the Dagster instance and the MLflow store (``HIR_STATE_DIR``)."""
    return _path_from_env("HIR_STATE_DIR", project_root() / ".hir")


def cache_dir() -> Path:
    """Downloaded, re-usable inputs: jars, datasets, generated sources (``HIR_CACHE_DIR``)."""
    return _path_from_env("HIR_CACHE_DIR", project_root() / ".cache")


def default_lake_root() -> str:
    """Root URI of the Delta lake (``HIR_LAKE``): any URI Delta supports, or a local folder."""
    return os.environ.get("HIR_LAKE") or str(state_dir() / "lake")


def default_mlflow_tracking_uri() -> str:
    """MLflow tracking URI (``MLFLOW_TRACKING_URI``), by default a local SQLite store."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{state_dir() / 'mlflow.db'}"


def default_mlflow_artifact_root() -> str:
    return os.environ.get("HIR_MLFLOW_ARTIFACTS") or (state_dir() / "mlartifacts").as_uri()


def default_spark_master() -> str:
    """Spark master URL (``HIR_SPARK_MASTER``), by default ``local[*]``."""
    return os.environ.get("HIR_SPARK_MASTER", "local[*]")
