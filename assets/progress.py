"""Spark progress in the Dagster run log: long Spark actions report their stages while they run.

Spark's own progress goes to the driver console and the Spark UI; a data engineer watching a run in the
Dagster UI would otherwise see nothing between "started" and "done". :func:`spark_progress` polls the
SparkContext's status tracker from a daemon thread and logs the active stages (completed / total tasks)
through ``context.log`` whenever they change, and labels the Spark jobs with the step's name.
:func:`spark_stages` times an asset's steps (:class:`hir_pipeline.timing.Stages`) with that progress around each.
"""

import contextlib
import threading
import time
from collections.abc import Iterator

import dagster as dg
from pyspark.sql import SparkSession

from hir_pipeline.timing import Stages


@contextlib.contextmanager
def spark_progress(
    context: dg.AssetExecutionContext, session: SparkSession, label: str, every_s: float = 10.0
) -> Iterator[None]:
    """Log the progress of the Spark stages started inside the block, at most every ``every_s`` seconds.

    Args:
        context: the asset's execution context (its ``log`` receives the progress lines).
        session: the Spark session running the work.
        label: the step's name, e.g. ``"graph_views: sampling"``; also set as the Spark job description.
        every_s: polling interval; a line is logged only when the stages' progress changed.
    """
    sc = session.sparkContext
    sc.setJobDescription(label)
    stop = threading.Event()
    start = time.perf_counter()

    def poll() -> None:
        tracker = sc.statusTracker()
        last = ""
        while not stop.wait(every_s):
            try:
                stages = [tracker.getStageInfo(s) for s in sorted(tracker.getActiveStageIds())]
            except Exception:  # the session is stopping: progress is best effort
                return
            parts = [f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks" for s in stages if s is not None]
            line = ", ".join(parts)
            if line and line != last:
                context.log.info(f"{label}: {time.perf_counter() - start:.0f}s, {line}")
                last = line

    thread = threading.Thread(target=poll, name=f"spark-progress-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)
        sc.setJobDescription(None)


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
