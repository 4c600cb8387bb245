"""Spark progress in the Dagster run log: long Spark actions report their stages while they run.

Spark's own progress goes to the driver console and the Spark UI; a data engineer watching a run in the
Dagster UI would otherwise see nothing between "started" and "done". :func:`spark_progress` runs the block's Spark
jobs under a job group of its own, polls a :class:`spark_jobs.progress.StatusSource` (Spark's status tracker by
default) from a daemon thread, logs the active stages (completed / total tasks) through ``context.log`` whenever
they change, and ends with one line summarising the block's Spark jobs. :func:`spark_stages` times an asset's steps
(:class:`hir_pipeline.timing.Stages`) with that progress around each.
"""

import contextlib
import threading
import uuid
from collections.abc import Iterator

import dagster as dg
from pyspark.sql import SparkSession

from hir_pipeline.timing import Stages
from spark_jobs.progress import ProgressReporter, SparkStatusSource, StatusSource

#: The SparkContext local properties that ``setJobGroup`` sets.
GROUP_PROPERTY, DESCRIPTION_PROPERTY = "spark.jobGroup.id", "spark.job.description"


@contextlib.contextmanager
def spark_progress(
    context: dg.AssetExecutionContext, session: SparkSession, label: str, every_s: float = 10.0,
    source: StatusSource | None = None,
) -> Iterator[None]:
    """Log the progress of the Spark stages started inside the block, at most every ``every_s`` seconds, then a
    last line with the block's Spark jobs (``"<label>: 12s, 3 Spark jobs (3 succeeded), 40 tasks"``).

    Args:
        context: the asset's execution context (its ``log`` receives the progress lines).
        session: the Spark session running the work.
        label: the step's name, e.g. ``"graph_views: sampling"``; also set as the Spark job description.
        every_s: polling interval; a line is logged only when the stages' progress changed.
        source: where progress is read (default: the session's status tracker).
    """
    sc = session.sparkContext
    # restored at the end: a block nested in another leaves the outer one's jobs under the outer group
    outer = {key: sc.getLocalProperty(key) for key in (GROUP_PROPERTY, DESCRIPTION_PROPERTY)}
    group = f"{label} [{uuid.uuid4().hex[:8]}]"  # unique: a step run twice is summarised once per run
    sc.setJobGroup(group, label)
    reporter = ProgressReporter(source or SparkStatusSource(sc), context.log.info, label, group)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(every_s):
            reporter.poll()

    thread = threading.Thread(target=poll, name=f"spark-progress-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)
        reporter.finish()
        for key, value in outer.items():  # PySpark has no clearJobGroup; None unsets a property
            sc.setLocalProperty(key, value)


def spark_stages(context: dg.AssetExecutionContext, session: SparkSession, label: str, every_s: float = 10.0) -> Stages:
    """The stage timer of an asset: each stage is announced in the run log and runs under :func:`spark_progress`.

    Args:
        context: the asset's execution context (its ``log`` receives the lines).
        session: the Spark session running the work.
        label: the asset's name, prefixed to every line (``"graph_views"`` -> ``"graph_views: sampling ..."``).
        every_s: interval of the Spark progress lines.
    """
    return Stages(say=context.log.info, label=f"{label}: ",
                  around=lambda name: spark_progress(context, session, f"{label}: {name}", every_s))
