"""One Delta-enabled SparkSession per process, built lazily and stopped at exit."""

from __future__ import annotations

import atexit
import threading

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from hir_pipeline.settings import cache_dir
from spark_jobs.session import build_spark_session, ensure_delta_jars

_lock = threading.Lock()


class SparkResource(dg.ConfigurableResource):
    """Delta-enabled Spark.

    Args:
        master: Spark master URL (``local[*]``, ``spark://host:7077``, ...).
        conf: extra Spark settings, e.g. ``{"spark.driver.memory": "8g"}``; they win over the defaults.
        app_name: application name in the Spark UI.
    """

    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    app_name: str = "hir-pipeline"

    def get_session(self) -> SparkSession:
        """The process's session, created on first use (the Delta jars come from the local cache)."""
        with _lock:
            active = SparkSession.getActiveSession()
            if active is not None:
                return active
            session = build_spark_session(
                jars=ensure_delta_jars(cache_dir()), master=self.master, app_name=self.app_name, conf=self.conf
            )
            atexit.register(session.stop)
            return session
