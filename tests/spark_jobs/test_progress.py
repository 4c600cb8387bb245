"""The Spark progress reporter driven step by step by a scripted status source: no Spark, no timer, no poll luck."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from spark_jobs.progress import JobsSummary, ProgressReporter, StageProgress


class ScriptedSource:
    """A status source that answers each call with the next state of its script (the last one repeats)."""

    def __init__(self, stages: Sequence[Sequence[StageProgress]] = ((),), summaries: Sequence[JobsSummary] = ()):
        self.stages, self.summaries = list(stages), list(summaries) or [JobsSummary()]
        self.groups: list[str] = []

    def active_stages(self) -> Sequence[StageProgress]:
        return self.stages.pop(0) if len(self.stages) > 1 else self.stages[0]

    def group_summary(self, group: str) -> JobsSummary:
        self.groups.append(group)
        return self.summaries.pop(0) if len(self.summaries) > 1 else self.summaries[0]


def _clock(*seconds: float) -> Iterator[float]:
    return iter(seconds).__next__


def _reporter(source: ScriptedSource, lines: list[str], *seconds: float) -> ProgressReporter:
    return ProgressReporter(source, lines.append, "graph_views: sampling", "group-1", clock=_clock(0.0, *seconds))


def test_poll_logs_the_running_stages_when_they_change_and_nothing_when_idle():
    s1, s1_half, s2 = StageProgress(1, 0, 4), StageProgress(1, 2, 4), StageProgress(2, 0, 3)
    source = ScriptedSource([[], [s1], [s1], [s1_half, s2], []])
    lines: list[str] = []
    reporter = _reporter(source, lines, 5.0, 7.4, 12.6)
    polled = [reporter.poll() for _ in range(5)]
    assert polled == [None, "graph_views: sampling: 5s, stage 1: 0/4 tasks", None,
                      "graph_views: sampling: 7s, stage 1: 2/4 tasks, stage 2: 0/3 tasks", None]
    assert lines == [p for p in polled if p]  # what poll returns is what it logged


def test_finish_summarises_the_jobs_of_its_group():
    source = ScriptedSource(summaries=[JobsSummary(succeeded=3, tasks=1_204)])
    lines: list[str] = []
    line = _reporter(source, lines, 12.6).finish()
    assert line == "graph_views: sampling: 13s, 3 Spark jobs (3 succeeded), 1,204 tasks"
    assert lines == [line] and source.groups == ["group-1"]


def test_finish_rereads_a_job_that_still_reads_as_running_until_it_ended():
    """Spark's status store lags the action by a listener event: the summary is read again, not guessed."""
    source = ScriptedSource(summaries=[JobsSummary(succeeded=1, running=1, tasks=4), JobsSummary(succeeded=1,
                                       failed=1, tasks=6)])
    line = _reporter(source, [], 1.0).finish()
    assert line == "graph_views: sampling: 1s, 2 Spark jobs (1 succeeded, 1 failed), 6 tasks"
    assert len(source.groups) == 2


def test_finish_names_a_job_still_running_after_the_settle_time_and_a_block_without_spark():
    running = ScriptedSource(summaries=[JobsSummary(running=1, tasks=2)])
    assert _reporter(running, [], 0.2).finish(settle_s=0) == (
        "graph_views: sampling: 0s, 1 Spark job (1 still running), 2 tasks")
    assert _reporter(ScriptedSource(), [], 0.2).finish() == "graph_views: sampling: 0s, 0 Spark jobs"
