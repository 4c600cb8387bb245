"""What ``hir materialize`` prints while a run goes: one line per asset step as it starts and ends, a progress line
during long steps, the failing step's first error line; everything else goes to a log file.

A run's log is every Dagster event (DEBUG included), every ``context.log`` line of the assets and, from the JVM and
native libraries, whatever they write to the process's standard error (Spark's log4j console, JDK notices). On a
terminal that is thousands of lines for one night. :class:`RunConsole` is a ``logging.Handler`` fed Dagster's run log
records (the CLI wraps it in a Dagster logger); it keeps the console to the lines a person acts on and writes the
full log to a file. :func:`native_stderr_to` sends the file descriptor 2 of this process (and of the JVM it starts)
to that file for the length of the run.

The records are read by their Dagster metadata (``record.dagster_meta``: ``step_key``, ``dagster_event``) without
importing Dagster, so this module stays in the core library layer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

#: Dagster event types that make a console line.
STEP_START, STEP_SUCCESS, STEP_FAILURE = "STEP_START", "STEP_SUCCESS", "STEP_FAILURE"
MATERIALIZATION = "ASSET_MATERIALIZATION"
#: Materialization metadata shown on a step's closing line, in this order: (metadata key, label).
SHOWN_METADATA = (("dagster/row_count", "rows"), ("delta_version", "Delta version"))


def _event(record: logging.LogRecord) -> tuple[str | None, Any]:
    """(step key, Dagster event or None) of a run log record."""
    meta = getattr(record, "dagster_meta", None) or {}
    return meta.get("step_key"), meta.get("dagster_event")


def _user_error(error: Any) -> Any:
    """The asset's own exception of a step failure: Dagster wraps it (``DagsterExecutionStepExecutionError:
    Error occurred while executing op ...``) with the asset's exception as the cause."""
    while getattr(error, "cause", None) is not None and str(getattr(error, "cls_name", "")).startswith("Dagster"):
        error = error.cause
    return error


def _metadata_value(entry: Any) -> Any:
    """The plain value of a Dagster metadata entry (``IntMetadataValue(5)`` -> 5), or the entry itself."""
    return getattr(entry, "value", entry)


class RunConsole(logging.Handler):
    """Console lines of a run, from its Dagster log records.

    Args:
        out: where the lines go (the terminal's standard output).
        progress_every_s: a running step's latest INFO line (an epoch, Spark stages) is shown at most this often;
            0 turns progress lines off.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, out: IO[str], progress_every_s: float = 30.0, clock=time.monotonic) -> None:
        super().__init__(level=logging.DEBUG)  # Dagster logs its step events at DEBUG
        self.out = out
        self.progress_every_s = progress_every_s
        self.clock = clock
        self._started: dict[str, float] = {}
        self._last_progress: dict[str, float] = {}
        self._materialized: dict[str, list[str]] = {}
        self.failed_steps: list[str] = []

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def emit(self, record: logging.LogRecord) -> None:
        step, event = _event(record)
        kind = getattr(event, "event_type_value", None)
        if kind == STEP_START and step:
            now = self.clock()
            self._started[step] = self._last_progress[step] = now
            self._print(f"hir: {step} started")
        elif kind == MATERIALIZATION and step:
            self._materialized.setdefault(step, []).append(self._describe_materialization(event))
        elif kind == STEP_SUCCESS and step:
            outputs = "; ".join(m for m in self._materialized.pop(step, []) if m)
            self._print(f"hir: {step} done in {self._elapsed(step)}" + (f": {outputs}" if outputs else ""))
        elif kind == STEP_FAILURE and step:
            self.failed_steps.append(step)
            error = _user_error(getattr(getattr(event, "event_specific_data", None), "error", None))
            message = (getattr(error, "message", None) or record.getMessage()).strip().splitlines()
            self._print(f"hir: {step} FAILED after {self._elapsed(step)}: {message[0] if message else ''}")
        elif event is None and step in self._started and record.levelno >= logging.INFO:
            # the asset's own words, without the run/step prefix Dagster puts on the record's message
            self._progress(step, (getattr(record, "dagster_meta", None) or {}).get("orig_message")
                           or record.getMessage())

    def _progress(self, step: str, message: str) -> None:
        now = self.clock()
        if self.progress_every_s <= 0 or now - self._last_progress[step] < self.progress_every_s:
            return
        self._last_progress[step] = now
        first = message.strip().splitlines()[0] if message.strip() else ""
        self._print(f"hir:   {step} ({self._elapsed(step)}): {first[:160]}")

    def _elapsed(self, step: str) -> str:
        started = self._started.get(step)
        return "?" if started is None else f"{self.clock() - started:.1f}s"

    @staticmethod
    def _describe_materialization(event: Any) -> str:
        """``"events: rows 1,234, Delta version 7"`` from a materialization event's asset key and metadata."""
        materialization = getattr(getattr(event, "event_specific_data", None), "materialization", None)
        if materialization is None:
            return ""
        key = materialization.asset_key.to_user_string()
        meta = materialization.metadata or {}
        shown = []
        for name, label in SHOWN_METADATA:
            if name in meta:
                value = _metadata_value(meta[name])
                shown.append(f"{label} {value:,}" if isinstance(value, int) else f"{label} {value}")
        return f"{key}: {', '.join(shown)}" if shown else key


def log_file_handler(path: Path) -> logging.Handler:
    """Every record of the run, DEBUG included, one line each with its step, into ``path`` (appended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    return handler


@contextlib.contextmanager
def native_stderr_to(path: Path) -> Iterator[IO[str]]:
    """Send file descriptor 2 (Python's ``sys.stderr``, the JVM Spark starts, native libraries) to ``path`` for
    the block; yields a stream on the terminal's standard error for the lines that must still reach it.

    A process started inside the block (Spark's JVM) keeps writing to the file after the block: it inherited the
    descriptor at its start.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", buffering=1)
    with open(path, "ab") as sink:
        os.dup2(sink.fileno(), 2)
    # sys.stderr too, in case it is not a stream on descriptor 2 (a test runner's capture, an embedding host)
    python_stderr, sys.stderr = sys.stderr, open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        yield terminal
    finally:
        sys.stderr.close()
        sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)
        terminal.close()
