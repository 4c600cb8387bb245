"""The console of ``hir materialize``: one line per asset step from a real Dagster run, the full log in a file,
progress lines throttled, native standard error sent to the file."""


import io
import logging
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import dagster as dg

from hir_pipeline.cli import with_run_log
from hir_pipeline.run_console import RunConsole, native_stderr_to


@dg.asset
def counted(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    context.log.info("counting rows")
    return dg.MaterializeResult(metadata={"dagster/row_count": 1234, "delta_version": 7})


@dg.asset(deps=[counted])
def broken() -> None:
    raise ValueError("row 17 has no date\nsecond line of the error")


def _run(tmp_path, verbose: bool = False):
    job = dg.Definitions(assets=[counted, broken], jobs=[dg.define_asset_job("two_steps")]).resolve_job_def(
        "two_steps")
    log_path = tmp_path / "run.log"
    job, run_config = with_run_log(job, {}, log_path, verbose=verbose)
    result = job.execute_in_process(run_config=run_config, instance=dg.DagsterInstance.ephemeral(),
                                    raise_on_error=False)
    return result, log_path


def test_a_run_prints_one_line_per_step_start_and_end_and_logs_everything_to_the_file(tmp_path, capsys):
    result, log_path = _run(tmp_path)
    assert not result.success
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "hir: counted started"
    assert re.fullmatch(r"hir: counted done in \d+\.\ds: counted: rows 1,234, Delta version 7", lines[1]), lines
    assert lines[2] == "hir: broken started"
    assert re.fullmatch(r"hir: broken FAILED after \d+\.\ds: ValueError: row 17 has no date", lines[3]), lines
    assert len(lines) == 4, lines  # no DEBUG event, no INFO line of the assets
    logged = log_path.read_text()
    for needle in ("DEBUG", "STEP_START", "counting rows", "second line of the error"):
        assert needle in logged, needle


def test_verbose_also_shows_dagsters_own_console(tmp_path, capsys):
    _run(tmp_path, verbose=True)
    captured = capsys.readouterr()
    assert "hir: counted started" in captured.out
    assert "STEP_START" in captured.err and "DEBUG" in captured.err  # Dagster's console logger writes to stderr


def _record(step: str, message: str = "", kind: str | None = None) -> logging.LogRecord:
    record = logging.LogRecord("run", logging.INFO, __file__, 1, message, None, None)
    event = SimpleNamespace(event_type_value=kind, event_specific_data=None) if kind else None
    record.dagster_meta = {"step_key": step, "dagster_event": event}
    return record


def test_progress_lines_show_a_running_steps_latest_line_at_most_every_interval():
    now = [0.0]
    out = io.StringIO()
    console = RunConsole(out, progress_every_s=30, clock=lambda: now[0])
    console.emit(_record("train", kind="STEP_START"))
    for t, message in [(10, "epoch 1/8"), (31, "epoch 2/8\ndetails"), (45, "epoch 3/8"), (62, "epoch 4/8")]:
        now[0] = t
        console.emit(_record("train", message))
    console.emit(_record("other_step", "not running: ignored"))
    assert out.getvalue().splitlines() == [
        "hir: train started", "hir:   train (31.0s): epoch 2/8", "hir:   train (62.0s): epoch 4/8"]


def test_native_standard_error_goes_to_the_file_and_the_terminal_stream_stays(tmp_path, capfd):
    path = tmp_path / "logs" / "run.log"
    with native_stderr_to(path) as terminal:
        os.write(2, b"from fd 2\n")
        print("from sys.stderr", file=sys.stderr)
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child process\\n')"],
                       check=True)
        print("hir: error line", file=terminal)
    print("after the block", file=sys.stderr)
    err = capfd.readouterr().err
    assert err.splitlines() == ["hir: error line", "after the block"]
    assert path.read_text().splitlines() == ["from fd 2", "from sys.stderr", "from a child process"]
