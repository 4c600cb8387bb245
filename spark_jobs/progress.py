"""Progress lines of the Spark work of one step, from a status source that can be Spark's or a test's.

:class:`ProgressReporter` turns what a :class:`StatusSource` says into log lines: :meth:`ProgressReporter.poll`
gives a line for the stages running now (called on a timer while the step runs), :meth:`ProgressReporter.finish`
the one line that always ends a step (its Spark jobs by outcome and the tasks they ran). The source is a protocol so
that the reporter can be driven step by step with a scripted sequence of stage states; :class:`SparkStatusSource`
reads Spark's ``StatusTracker``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pyspark import SparkContext


@dataclass(frozen=True)
class StageProgress:
    """One running Spark stage: its id and its completed / total tasks."""

    stage_id: int
    completed_tasks: int
    total_tasks: int


@dataclass(frozen=True)
class JobsSummary:
    """The Spark jobs of one job group so far: how many ended how, and the tasks their stages completed."""

    succeeded: int = 0
    failed: int = 0
    running: int = 0
    tasks: int = 0

    @property
    def jobs(self) -> int:
        return self.succeeded + self.failed + self.running


class StatusSource(Protocol):
    """Where a :class:`ProgressReporter` reads the state of Spark's work."""

    def active_stages(self) -> Sequence[StageProgress]:
        """The stages running now, by stage id."""
        ...

    def group_summary(self, group: str) -> JobsSummary:
        """The jobs started so far under job group ``group``."""
        ...


class SparkStatusSource:
    """:class:`StatusSource` over a SparkContext's ``StatusTracker`` (best effort: a stopping session reads as idle).

    Args:
        sc: the SparkContext whose jobs are reported.
    """

    def __init__(self, sc: SparkContext) -> None:
        self._tracker = sc.statusTracker()

    def active_stages(self) -> list[StageProgress]:
        try:
            infos = [self._tracker.getStageInfo(s) for s in sorted(self._tracker.getActiveStageIds())]
        except Exception:  # the session is stopping: progress is best effort
            return []
        return [StageProgress(s.stageId, s.numCompletedTasks, s.numTasks) for s in infos if s is not None]

    def group_summary(self, group: str) -> JobsSummary:
        try:
            jobs = [self._tracker.getJobInfo(j) for j in self._tracker.getJobIdsForGroup(group)]
            jobs = [j for j in jobs if j is not None]
            stages = [self._tracker.getStageInfo(s) for j in jobs for s in j.stageIds]
        except Exception:  # the session is stopping
            return JobsSummary()
        status = [j.status for j in jobs]
        return JobsSummary(succeeded=status.count("SUCCEEDED"), failed=status.count("FAILED"),
                           running=len(status) - status.count("SUCCEEDED") - status.count("FAILED"),
                           tasks=sum(s.numCompletedTasks for s in stages if s is not None))


class ProgressReporter:
    """Log lines of one step's Spark progress: :meth:`poll` while it runs, :meth:`finish` once it ended.

    Args:
        source: where the state of Spark's work is read.
        say: receives each line (e.g. a Dagster ``context.log.info``).
        label: the step's name, first on every line.
        group: the Spark job group of the step's jobs (summarised by :meth:`finish`).
        clock: seconds, for the elapsed time on each line (a test passes a scripted one).
    """

    def __init__(self, source: StatusSource, say: Callable[[str], None], label: str, group: str,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.source, self.say, self.label, self.group, self.clock = source, say, label, group, clock
        self._start = clock()
        self._last = ""

    def _elapsed(self) -> str:
        return f"{self.clock() - self._start:.0f}s"

    def poll(self) -> str | None:
        """Log and return the running stages' progress, unless nothing runs or it is the line logged last."""
        line = ", ".join(f"stage {s.stage_id}: {s.completed_tasks}/{s.total_tasks} tasks"
                         for s in self.source.active_stages())
        if not line or line == self._last:
            return None
        self._last = line
        out = f"{self.label}: {self._elapsed()}, {line}"
        self.say(out)
        return out

    def finish(self, settle_s: float = 2.0) -> str:
        """Log and return the step's last line: its Spark jobs by outcome and the tasks they completed.

        Spark's status store is updated by a listener after an action returns, so a job that has just ended may
        still read as running: the summary is re-read until none runs, for at most ``settle_s`` seconds.
        """
        deadline = time.monotonic() + settle_s
        summary = self.source.group_summary(self.group)
        while summary.running and time.monotonic() < deadline:
            time.sleep(0.05)
            summary = self.source.group_summary(self.group)
        outcomes = ", ".join(f"{n} {what}" for n, what in ((summary.succeeded, "succeeded"),
                                                           (summary.failed, "failed"),
                                                           (summary.running, "still running")) if n)
        out = f"{self.label}: {self._elapsed()}, {summary.jobs} Spark job{'' if summary.jobs == 1 else 's'}"
        if summary.jobs:
            out += f" ({outcomes}), {summary.tasks:,} tasks"
        self.say(out)
        return out
