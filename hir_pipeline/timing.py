"""Wall-clock seconds of named stages: the one stage timer of the pipeline (assets, Spark jobs, core library).

A caller that reports its steps (a Dagster asset's run log, an evaluation's progress lines) passes ``say``; one
that shows Spark progress while a step runs passes ``around`` (see ``assets.progress.spark_stages``). The
seconds end up in metadata (``stage_seconds``), MLflow metrics or log lines.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

T = TypeVar("T")


class Stages:
    """Times named stages, optionally announcing each and running it inside a context.

    Args:
        say: called with ``"<label>name ..."`` when a stage starts and ``"<label>name done in 1.2s"`` when it
            ends; ``None``: silent.
        label: prefix of those lines, e.g. ``"graph_views: "``.
        around: ``around(name)`` is a context manager entered around each stage (e.g. Spark progress logging).

    Attributes:
        seconds: stage name -> wall-clock seconds (rounded to milliseconds), in the order the stages ran; a name
            run twice adds up.
    """

    def __init__(self, say: Callable[[str], None] | None = None, label: str = "",
                 around: Callable[[str], AbstractContextManager] | None = None) -> None:
        self.say, self.label, self.around = say, label, around
        self.seconds: dict[str, float] = {}
        self._started: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (not recorded when the block raises)."""
        if self.say is not None:
            self.say(f"{self.label}{name} ...")
        start = self._started[name] = time.perf_counter()
        with self.around(name) if self.around is not None else contextlib.nullcontext():
            yield
        took = time.perf_counter() - start
        self.seconds[name] = round(self.seconds.get(name, 0.0) + took, 3)
        if self.say is not None:
            self.say(f"{self.label}{name} done in {took:.1f}s")

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """``fn()`` timed as stage ``name``; returns its result."""
        with self(name):
            return fn()

    def elapsed(self, name: str) -> float:
        """Seconds since stage ``name`` (the latest run of it) started; 0.0 when it never started."""
        start = self._started.get(name)
        return 0.0 if start is None else time.perf_counter() - start
