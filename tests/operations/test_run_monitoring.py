"""Runs that die, on the instance configuration we ship: ``dagster-daemon run`` on a copy of the committed
``dagster.yaml`` (only ``run_monitoring.poll_interval_seconds`` lowered, so the test waits seconds, not a minute),
serving the one-op code location of ``run_worker_defs.py``; its sensor launches one run through the queued run
coordinator, tagged as the nightly schedule tags its runs.

* A run worker killed with SIGKILL (what the kernel's out-of-memory killer does) is marked failed, naming the signal,
  and ``run_retries`` launches a retry that succeeds.
* A run past its ``dagster/max_runtime`` (``HIR_NIGHTLY_MAX_RUNTIME_S``, lowered to seconds) is stopped and failed
  by run monitoring, then retried.
* A run whose worker was killed together with the code server that started it (so nothing else sees it die) is
  failed by run monitoring at its maximum runtime, then retried.

That both instance files ship run monitoring and retries, and that the nightly schedule's runs carry the maximum
runtime, is checked fast.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.operations.services import REPO, VENV_BIN, Service, wait_for

INSTANCE_FILES = (REPO / "dagster.yaml", REPO / "deploy" / "dagster.postgres.yaml")
DEFS = Path(__file__).with_name("run_worker_defs.py")
#: The test's only change to the shipped instance: the monitoring daemon looks every second.
POLL_S = 1


def _shipped(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_both_instance_files_monitor_runs_and_retry_failed_ones_once():
    local, postgres = (_shipped(p) for p in INSTANCE_FILES)
    for key in ("run_monitoring", "run_retries", "run_coordinator"):
        assert local[key] == postgres[key], key
    assert local["run_retries"] == {"enabled": True, "max_retries": 1}


def test_the_shipped_instance_has_run_monitoring_on(tmp_path):
    from dagster._core.launcher import DefaultRunLauncher

    home = _instance_home(tmp_path, poll_s=None)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_monitoring_enabled
        assert 0 < instance.run_monitoring_start_timeout_seconds <= 600
        assert 0 < instance.run_monitoring_poll_interval_seconds <= 120
        # The default launcher cannot resume a run (Dagster refuses resume attempts with it): a run whose worker
        # died is failed, then retried by run_retries.
        assert isinstance(instance.run_launcher, DefaultRunLauncher) and not instance.run_launcher.supports_resume_run
        assert instance.run_monitoring_max_resume_run_attempts == 0
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 1
        # no instance-wide limit: `hir materialize` runs in-process on this instance (a backfill may take long)
        assert instance.run_monitoring_max_runtime_seconds == 0


def _instance_home(tmp_path: Path, poll_s: int | None = POLL_S) -> Path:
    """A Dagster home holding the committed dagster.yaml, its poll interval set to ``poll_s`` (None: as shipped)."""
    config = _shipped(INSTANCE_FILES[0])
    if poll_s is not None:
        config["run_monitoring"]["poll_interval_seconds"] = poll_s
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home


class Daemon:
    """``dagster-daemon run`` serving ``run_worker_defs.py`` on a temporary instance; run workers write their pid
    into :attr:`runs`."""

    def __init__(self, tmp_path: Path, **env: str):
        self.home = _instance_home(tmp_path)
        self.runs = tmp_path / "runs"
        self.runs.mkdir()
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "HIR_"))}
        environ.update(DAGSTER_HOME=str(self.home), HIR_TEST_RUN_DIR=str(self.runs), PYTHONPATH=str(REPO),
                       PYTHONUNBUFFERED="1", **env)
        # The instance's SQLite storages are created (and stamped with their schema revision) here, before any
        # other process opens them: the daemon, its code server and this process creating them at once could stamp
        # one database twice ("more than one head" from alembic, seen once in a full-suite run).
        self.instance = dg.DagsterInstance.from_config(str(self.home))
        # started in the test folder, away from a checkout's .env (which would name another instance)
        self.service = Service([str(VENV_BIN / "dagster-daemon"), "run", "-f", str(DEFS)], tmp_path / "daemon.log",
                               environ, cwd=tmp_path)

    def wait(self, predicate, timeout_s: float, what: str):
        return wait_for(predicate, timeout_s, what, every_s=0.5, proc=self.service.proc, log=self.service.log)

    def first_run(self) -> tuple[str, int]:
        """(run id, run worker pid) of the sensor's run, once its op is running."""
        pid_file = self.wait(lambda: next(self.runs.glob("*.pid"), None), 180, "the sensor's run to start its op")
        return pid_file.stem, int(self.wait(pid_file.read_text, 10, "the pid"))

    def finished(self, run_id: str, timeout_s: float = 120) -> dg.DagsterRun:
        return self.wait(lambda: (r := self.instance.get_run_by_id(run_id)) and r.is_finished and r, timeout_s,
                         f"run {run_id} to finish")

    def messages(self, run_id: str) -> list[str]:
        return [e.message for e in self.instance.all_logs(run_id)]

    def retry_of(self, run_id: str) -> dg.DagsterRun:
        """The retry ``run_retries`` launched for the run, once it has succeeded (a retry's op returns at once)."""
        retry = self.wait(lambda: next((r for r in self.instance.get_runs() if r.parent_run_id == run_id), None),
                          120, f"run_retries to launch a retry of {run_id}")
        assert retry.tags["dagster/retry_number"] == "1"
        assert self.finished(retry.run_id).status == dg.DagsterRunStatus.SUCCESS, self.messages(retry.run_id)
        return retry

    def stop(self) -> None:
        self.instance.dispose()
        self.service.stop()


@pytest.fixture
def daemon_factory(tmp_path):
    started: list[Daemon] = []

    def start(**env: str) -> Daemon:
        started.append(Daemon(tmp_path, **env))
        return started[-1]

    yield start
    for daemon in started:
        daemon.stop()


@pytest.mark.slow
def test_a_run_worker_killed_with_sigkill_is_failed_and_retried(daemon_factory):
    """The code server that started the worker sees it die (Dagster's default run launcher offers run monitoring no
    worker health check: this is where a killed worker is noticed) and fails the run; ``run_retries`` retries it."""
    from hir_pipeline.definitions import nightly_run_tags

    daemon = daemon_factory()
    run_id, pid = daemon.first_run()
    run = daemon.instance.get_run_by_id(run_id)
    assert run.status == dg.DagsterRunStatus.STARTED
    assert nightly_run_tags().items() <= run.tags.items()  # the nightly runs' maximum runtime

    os.kill(pid, signal.SIGKILL)
    killed = daemon.finished(run_id)
    assert killed.status == dg.DagsterRunStatus.FAILURE
    assert any("was terminated by signal 9 (SIGKILL)" in m for m in daemon.messages(run_id)), daemon.messages(run_id)
    retry = daemon.retry_of(run_id)
    assert retry.tags[dg.MAX_RUNTIME_SECONDS_TAG] == killed.tags[dg.MAX_RUNTIME_SECONDS_TAG]


@pytest.mark.slow
def test_a_run_past_its_maximum_runtime_is_stopped_failed_and_retried(daemon_factory):
    max_runtime_s = 3
    daemon = daemon_factory(HIR_NIGHTLY_MAX_RUNTIME_S=str(max_runtime_s))
    run_id, pid = daemon.first_run()
    # The daemon reports the run failed after asking the worker to stop; the stopped worker reports it canceled. The
    # two events race (under load the worker's can come first, then the failure overwrites the status), so the
    # failure event itself is what is checked: it is what run_retries acts on.
    daemon.wait(lambda: f"Exceeded maximum runtime of {max_runtime_s} seconds." in daemon.messages(run_id), 60,
                "run monitoring to fail the run")
    failed = daemon.instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert [e.message for e in failed] == [f"Exceeded maximum runtime of {max_runtime_s} seconds."]
    assert daemon.finished(run_id, timeout_s=60).is_finished
    daemon.wait(lambda: f"Process for run exited (pid: {pid})." in daemon.messages(run_id), 60,
                "the run worker to exit")
    daemon.retry_of(run_id)


@pytest.mark.slow
def test_a_run_whose_worker_and_code_server_were_killed_is_failed_by_run_monitoring_and_retried(daemon_factory):
    """Nothing is left to see the worker die: the monitoring daemon fails the run once it is past its maximum
    runtime. That is over a minute here, so that the daemon has replaced the dead code server (it reloads its code
    locations every 60 s) when the retry is launched, as it always has after the hours of a real limit."""
    max_runtime_s = 75
    daemon = daemon_factory(HIR_NIGHTLY_MAX_RUNTIME_S=str(max_runtime_s))
    run_id, pid = daemon.first_run()
    server = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # the worker's parent
    assert b"api\0grpc" in Path(f"/proc/{server}/cmdline").read_bytes(), "the worker's parent is its code server"
    os.kill(server, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)

    run = daemon.finished(run_id, timeout_s=max_runtime_s + 60)
    assert run.status == dg.DagsterRunStatus.FAILURE
    messages = daemon.messages(run_id)
    assert f"Canceling due to exceeding maximum runtime of {max_runtime_s} seconds." in messages, messages
    assert any(m.startswith("This job is being forcibly marked as failed.") for m in messages if m), messages
    daemon.retry_of(run_id)
