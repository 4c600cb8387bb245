"""benchmarks/train_throughput.py through its command line: one process and two gloo ranks on the toy graph."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_throughput.py"
TINY = ["--set", "hidden_dim=16", "--set", "num_layers=1", "--set", "num_heads=2", "--set", "out_dim=8",
        "--set", "level_sizes=[2,4]", "--set", "batch_size=16", "--set", "engagement_batch_size=16"]


def test_one_process_in_process(tmp_path):
    spec = importlib.util.spec_from_file_location("train_throughput", _SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "throughput.json"
    assert bench.main(["--steps", "2", "--warmup", "1", "--backends", "chunked", "--json", str(out), *TINY]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["processes"], r["prefetch"]) for r in rows] == [(1, 0), (1, 2)]  # batches in the step, then ahead
    for row in rows:
        assert row["steps"] == 1 and row["prepare_ms"] > 0 and row["step_ms"] > 0


@pytest.mark.slow
def test_one_and_two_processes_report_a_row_each(tmp_path):
    out = tmp_path / "throughput.json"
    proc = subprocess.run([sys.executable, str(_SCRIPT), "--processes", "1,2", "--steps", "3", "--warmup", "1",
                           "--threads", "1", "--backends", "chunked", "--prefetch", "2", "--json", str(out), *TINY],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["backend"], r["processes"], r["prefetch"]) for r in rows] == [("chunked", 1, 2), ("chunked", 2, 2)]
    for r in rows:
        assert r["steps"] == 2 and r["samples_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["driver_peak_rss_mb"] > 0
    assert "processes" in proc.stdout.splitlines()[0]  # the table's header
