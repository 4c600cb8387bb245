"""benchmarks/suite_order.py: its runs of real pytest processes, read back into rows (outcome counts, failing
tests, exit status), and the summary-line parsing on pytest's own wording."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "suite_order.py"
_SPEC = importlib.util.spec_from_file_location("suite_order", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

MIXED = '''
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("fixture breaks")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="says why")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False

@pytest.mark.slow
def test_deselected_by_the_tier():
    pass
'''


def test_a_module_run_alone_is_read_back_outcome_by_outcome(tmp_path, capsys):
    module = tmp_path / "test_mixed_outcomes.py"
    module.write_text(MIXED)
    out = tmp_path / "rows.json"
    assert bench.main(["--only", "alone", "--modules", str(module), "--json", str(out)]) == 1
    [row] = json.loads(out.read_text())["rows"]
    assert row["kind"] == "alone" and row["target"] == str(module) and row["returncode"] == 1 and not row["ok"]
    counts = {k: row[k] for k in bench.OUTCOMES}
    assert counts == {"passed": 1, "failed": 1, "errors": 1, "skipped": 1, "xfailed": 1, "xpassed": 0,
                      "deselected": 1}
    assert [n.rsplit("::", 1)[1] for n in row["failing"]] == ["test_errors", "test_fails"]
    printed = capsys.readouterr().out
    assert "FAIL rc=1" in printed and "test_mixed_outcomes.py::test_fails" in printed


def test_a_passing_module_is_ok_and_the_exit_status_is_zero(tmp_path):
    module = tmp_path / "test_all_pass.py"
    module.write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    out = tmp_path / "rows.json"
    assert bench.main(["--only", "alone", "--modules", str(module), "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["ok"] and row["passed"] == 2 and row["failed"] == row["errors"] == 0 and row["failing"] == []


def test_a_run_past_its_timeout_is_a_failed_row(tmp_path, capsys):
    module = tmp_path / "test_hangs.py"
    module.write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    row = bench.run_one("alone", str(module), [str(module)], timeout_s=3)
    assert row["returncode"] == -1 and not row["ok"] and row["passed"] == 0
    bench.print_row(row)
    assert "TIMEOUT" in capsys.readouterr().out


def test_summary_line_wording():
    assert bench.parse_summary("=== 3 passed, 1 error, 2 deselected in 4.10s ===") == {
        "passed": 3, "failed": 0, "errors": 1, "skipped": 0, "xfailed": 0, "xpassed": 0, "deselected": 2}
    # Only the last timed line counts; a run cut before its summary counts nothing.
    assert bench.parse_summary("2 failed in 1.0s\nnoise\n5 passed in 2.5s")["passed"] == 5
    assert bench.parse_summary("collected 4 items\n....") == dict.fromkeys(bench.OUTCOMES, 0)
