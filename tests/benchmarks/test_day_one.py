"""benchmarks/day_one.py reads what ``hir materialize`` prints: the console lines of a real Dagster run (the CLI's
loggers), the profile and the log file, and the evaluation's line from that file."""

import importlib.util
from pathlib import Path

import dagster as dg
import pytest

from hir_pipeline.cli import with_run_log

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "day_one.py"
_SPEC = importlib.util.spec_from_file_location("day_one", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@dg.asset
def first_step(context: dg.AssetExecutionContext) -> None:
    context.log.info("targets: warm recall@20 vs best baseline (als) = 1.02x [0.95x, 1.09x]")


@dg.asset(deps=[first_step])
def second_step() -> None:
    raise RuntimeError("no rows for 2024-06-30")


def test_console_lines_of_a_real_run_are_read_back(tmp_path, capsys):
    job = dg.Definitions(assets=[first_step, second_step], jobs=[dg.define_asset_job("j")]).resolve_job_def("j")
    log_file = tmp_path / "run.log"
    job, run_config = with_run_log(job, {}, log_file, verbose=False)
    job.execute_in_process(run_config=run_config, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    print(f"hir: source=x lake=y run date=2024-06-30 ingestion window=all profile=cpu\nhir: full log: {log_file}")
    parsed = bench.parse_console(capsys.readouterr().out)
    assert set(parsed["steps"]) == {"first_step"} and parsed["steps"]["first_step"] >= 0
    assert parsed["failed"] == [{"step": "second_step", "error": "RuntimeError: no rows for 2024-06-30"}]
    assert parsed["profile"] == "cpu" and parsed["log_file"] == str(log_file)
    assert bench.evaluation_line(parsed["log_file"]) == (
        "targets: warm recall@20 vs best baseline (als) = 1.02x [0.95x, 1.09x]")
    assert bench.evaluation_line(str(tmp_path / "missing.log")) is None


def test_a_folder_without_a_source_is_refused_with_a_hint(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--source", str(tmp_path), "--state", str(tmp_path / "state")])
    assert exit_.value.code == 2
    assert "holds no source" in capsys.readouterr().err
