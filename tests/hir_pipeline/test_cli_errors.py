"""The ``hir`` command line's error paths: a missing ``--config`` file, an unreadable lake, a bad date and a query on
an empty lake each give exactly one line on stderr and exit status 2, never a traceback.

Each case runs the real ``main()`` against real local files (the lakes are real Delta tables written by
``deltalake``, then broken); ``capfd`` sees whatever reaches the process's stderr, Spark's and Rust's included.
The config and date errors are raised before Spark starts, so none of these tests starts a Spark session; one case
runs as a process, as a user types it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from hir_pipeline.cli import main
from hir_pipeline.contracts import MANIFEST_TABLE

MISSING_CONFIG = "run config {tmp}/no/such.yaml: cannot read it (No such file or directory)"


def _manifest(lake: Path) -> Path:
    """A real one-row ``publications`` Delta table in ``lake`` (its columns do not matter to the errors here)."""
    path = lake / MANIFEST_TABLE
    write_deltalake(str(path), pa.table({"run_date": pa.array(["2024-06-01"]), "model_version": ["1"]}))
    return path


def corrupt_log(lake: Path) -> None:
    """The manifest's first commit is not JSON (a torn copy, a disk error)."""
    (_manifest(lake) / "_delta_log" / f"{0:020d}.json").write_text("garbage\n")


def missing_data_file(lake: Path) -> None:
    """The manifest's log names a Parquet file that is gone (a partial copy, a vacuum run by hand)."""
    for data in _manifest(lake).glob("*.parquet"):
        data.unlink()


CASES = {
    # name: (argv with {tmp} and {lake} to fill, lake set-up, the line expected on stderr)
    "materialize, missing --config": (["materialize", "--config", "{tmp}/no/such.yaml"], None,
                                      f"hir: error: {MISSING_CONFIG}"),
    "evaluate, missing --config": (["evaluate", "--config", "{tmp}/no/such.yaml", "--source", "{tmp}/no-source"],
                                   None, f"hir: error: {MISSING_CONFIG}"),
    "materialize, bad date": (["materialize", "--partition", "2024-13-01"], None,
                              "hir: error: --partition '2024-13-01' is not a date (YYYY-MM-DD)"),
    "evaluate, bad date": (["evaluate", "--partition", "2024-02-30"], None,
                           "hir: error: --partition '2024-02-30' is not a date (YYYY-MM-DD)"),
    "query, bad date": (["query", "similar", "u1", "--as-of", "2024-13-01", "--lake", "{lake}"], None,
                        "hir query similar: error: argument --as-of: '2024-13-01' is not a date (YYYY-MM-DD) "
                        "(see hir query similar --help)"),
    "query, corrupt Delta log": (["query", "similar", "u1", "--lake", "{lake}"], corrupt_log,
                                 "hir query: publications in lake '{lake}' cannot be read: Kernel error: Json error: "
                                 "Encountered unexpected 'g' whilst parsing value"),
    "query, data file gone": (["query", "recommend", "u1", "--lake", "{lake}"], missing_data_file,
                              "hir query: publications in lake '{lake}' cannot be read: "),
    "query, empty lake": (["query", "cluster", "0", "1", "--lake", "{lake}"], Path.mkdir,
                          "hir query: nothing published yet in lake '{lake}' (no publications table): "
                          "materialize the publish assets"),
    "query, no lake folder": (["query", "similar", "u1", "--lake", "{lake}"], None,
                              "hir query: nothing published yet in lake '{lake}' (no publications table): "
                              "materialize the publish assets"),
}


@pytest.fixture()
def state(tmp_path, monkeypatch) -> Path:
    """``hir``'s state (Dagster instance, MLflow) in a temporary folder; ``main()`` exports DAGSTER_HOME."""
    monkeypatch.setenv("HIR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "state" / "dagster"))
    return tmp_path


def _case(name: str, tmp: Path) -> tuple[list[str], str]:
    """The argv and expected line of case ``name``, its lake (``tmp/lake``) set up."""
    argv, setup, line = CASES[name]
    lake = tmp / "lake"
    if setup is not None:
        setup(lake)
    fill = {"tmp": tmp, "lake": lake}
    return [a.format(**fill) for a in argv], line.format(**fill)


@pytest.mark.parametrize("name", CASES)
def test_each_error_is_one_line_on_stderr_and_exit_status_2(name, state, capfd):
    argv, expected = _case(name, state)
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's usage errors exit
        code = stop.code
    out, err = capfd.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(expected) if expected.endswith(": ") else err.rstrip("\n") == expected, err
    assert out == ""


def test_as_a_process_an_unreadable_lake_is_one_line_and_exit_status_2(tmp_path):
    """What a user sees: the Delta error (whose text carries a Rust backtrace) is one line, no Python traceback."""
    argv, expected = _case("query, corrupt Delta log", tmp_path)
    env = {**os.environ, "HIR_STATE_DIR": str(tmp_path / "state"), "DAGSTER_HOME": str(tmp_path / "state" / "dg")}
    proc = subprocess.run([sys.executable, "-m", "hir_pipeline.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, expected + "\n", "")
