"""A code location of one tiny job for the run-monitoring tests, so that a run worker starts in seconds.

``tests/operations/test_run_monitoring.py`` serves it with ``dagster-daemon run -f``. Its sensor asks for one run,
tagged as the nightly schedule tags its runs; the run's worker writes its process id where the test finds it and
then waits (the first run), or returns at once (a retry). Like the pipeline's code location, it executes in-process,
so the op's process is the run worker.
"""

import os
import time
from pathlib import Path

import dagster as dg

from hir_pipeline.definitions import nightly_run_tags

#: Folder shared with the test (``HIR_TEST_RUN_DIR``): ``<run_id>.pid`` files.
RUN_DIR = Path(os.environ.get("HIR_TEST_RUN_DIR", "."))
#: How long a first run waits to be killed before it fails on its own (it never should).
WAIT_S = 600


@dg.op
def wait_unless_retry(context: dg.OpExecutionContext) -> None:
    """Write the run worker's pid; a first run then waits (to be killed), a retry finishes."""
    (RUN_DIR / f"{context.run_id}.pid").write_text(str(os.getpid()))
    if context.run.parent_run_id is None:
        time.sleep(WAIT_S)
        raise RuntimeError(f"not killed within {WAIT_S}s")


@dg.job
def nightly_stand_in() -> None:
    wait_unless_retry()


@dg.sensor(job=nightly_stand_in, default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=1)
def launch_once() -> dg.RunRequest:
    """One run (the same run key is never launched twice), with the nightly runs' tags."""
    return dg.RunRequest(run_key="once", tags=nightly_run_tags())


defs = dg.Definitions(jobs=[nightly_stand_in], sensors=[launch_once], executor=dg.in_process_executor)
