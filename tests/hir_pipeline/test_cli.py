"""The ``hir`` command line, run as a real subprocess against a temporary state folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from hir_pipeline.cli import build_parser
from tests.assets.conftest import SMALL_STRUCTURE


def _hir(args: list[str], state: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "HIR_STATE_DIR": str(state), "DAGSTER_HOME": str(state / "dagster"),
           "HIR_SPARK_MASTER": "local[2]"}
    return subprocess.run([sys.executable, "-m", "hir_pipeline.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_parser_defaults():
    args = build_parser().parse_args(["materialize"])
    assert args.partition is None and args.select is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["materialize", "--bogus"])


def test_env_file_gets_the_instance_and_keeps_the_users_lines(tmp_path):
    from hir_pipeline.cli import write_dagster_env

    (tmp_path / ".env").write_text("# mine\nAWS_PROFILE=dev\nDAGSTER_HOME=/old\n")
    write_dagster_env(tmp_path, {"DAGSTER_HOME": "/new/home"})
    assert (tmp_path / ".env").read_text() == "# mine\nAWS_PROFILE=dev\nDAGSTER_HOME=/new/home\n"
    (tmp_path / "sub").mkdir()
    write_dagster_env(tmp_path / "sub", {"DAGSTER_HOME": "/x"})
    assert (tmp_path / "sub" / ".env").read_text() == "DAGSTER_HOME=/x\n"


def test_instance_is_the_environment_then_the_env_file_then_the_default(tmp_path, monkeypatch):
    import hir_pipeline.cli as cli

    monkeypatch.setattr(cli, "project_root", lambda: tmp_path)
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("HIR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert cli.dagster_home() == tmp_path / "state" / "dagster"
    assert "dagster dev -m hir_pipeline.definitions" in cli.ui_command()  # no .env: opened from its folder
    cli.write_dagster_env(tmp_path, {"DAGSTER_HOME": str(tmp_path / "named")})
    monkeypatch.delenv("DAGSTER_HOME")
    assert cli.dagster_home() == tmp_path / "named"
    assert (tmp_path / "named" / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"  # installed
    assert cli.ui_command() == f"cd {tmp_path} && .venv/bin/dg dev"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "explicit"))
    assert cli.dagster_home() == tmp_path / "explicit"


def test_missing_source_is_one_clear_line_and_writes_nothing(tmp_path):
    lake = tmp_path / "lake"
    proc = _hir(["materialize", "--source", str(tmp_path / "nope"), "--lake", str(lake)], tmp_path)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hir: error:")]
    assert errors == [f"hir: error: source folder {tmp_path / 'nope'} does not exist"]
    assert not lake.exists()
    # checked before a Spark session starts: the run log, which gets the JVM's console output, stayed empty
    assert [log.read_text() for log in (tmp_path / "logs").glob("materialize-*.log")] == [""]


@pytest.mark.slow
def test_wrong_column_type_names_table_and_column(spark, tmp_path):
    source = tmp_path / "src"
    spark.createDataFrame([("u1", "user")], "entity_id string, entity_type string").write.parquet(
        str(source / "entities"))
    spark.createDataFrame([("u1", "p1", "r")], "src_id string, dst_id string, relation string").write.parquet(
        str(source / "relations"))
    spark.createDataFrame([("u1", "p1", "click", True)], "user_id string, entity_id string, event_type string, "
                          "event_ts boolean").write.parquet(str(source / "events"))
    proc = _hir(["materialize", "--source", str(source), "--lake", str(tmp_path / "lake")], tmp_path)
    assert proc.returncode == 2
    assert "events.event_ts" in proc.stderr
    assert not (tmp_path / "lake").exists()


@pytest.mark.slow
def test_materialize_ingestion_backfill_as_of_latest_event(spark, tmp_path):
    from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source

    config = SyntheticConfig(seed=3, n_events=2_000, n_products=80, n_advertisers=16, days=3)
    write_synthetic_source(spark, config, tmp_path / "src")
    lake = tmp_path / "lake"
    proc = _hir(["materialize", "--source", str(tmp_path / "src"), "--lake", str(lake),
                 "--select", "group:ingestion"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run date={config.end_date}" in proc.stdout and "ingestion window=all" in proc.stdout
    events = spark.read.format("delta").load(str(lake / "events"))
    assert events.count() > 0
    # A quiet console: one line per step as it starts and ends (rows, Delta version), nothing on stderr; Dagster's
    # DEBUG events and Spark's console in the log file that the last line names.
    lines = proc.stdout.strip().splitlines()
    assert all(line.startswith(("hir:", "  ")) or not line.strip() for line in lines), proc.stdout
    assert "DEBUG" not in proc.stdout and proc.stderr == "", proc.stderr[-3000:]
    assert re.search(rf"^hir: bronze_tables done in [\d.]+s: .*events: rows {events.count():,}, Delta version \d+",
                     proc.stdout, flags=re.M), proc.stdout
    assert lines[-1].startswith("hir: full log: ")
    logged = Path(lines[-1].removeprefix("hir: full log: ")).read_text()
    assert "STEP_START" in logged and "DEBUG" in logged and "WARN" in logged  # Dagster's events, Spark's console
    # INFO of the run's loggers is in the log once, through Dagster; not a second time through the root handler
    assert not [line for line in logged.splitlines() if line.startswith("INFO ")]
    assert (tmp_path / "dagster" / "dagster.yaml").exists()  # the committed instance config was installed


def test_evaluate_reads_the_run_config_of_the_assets_it_runs(tmp_path):
    from hir_pipeline.cli import evaluate_selection, load_run_config, nightly_subset
    from hir_pipeline.definitions import defs

    nightly, job = nightly_subset(defs, evaluate_selection())
    assert set(job.graph.node_dict) == {"bronze_tables", "content_embeddings", "evaluation_report"}
    sample = load_run_config("config/cpu_sample.yaml", job, known_ops=nightly.graph.node_dict)
    settings = sample["resources"]["model_settings"]["config"]  # the HIR settings interest_model trains with
    assert settings["model"]["hidden_dim"] == 64 and settings["train"]["published_encoder"] == "student"
    (tmp_path / "other.yaml").write_text(
        "ops:\n  interest_model:\n    config: {torch_threads: 1}\n  evaluation_report:\n    config: {k: 10}\n"
        "resources:\n  graph_settings:\n    config: {seed: 2}\n")
    assert load_run_config(str(tmp_path / "other.yaml"), job, known_ops=nightly.graph.node_dict) == {
        "ops": {"evaluation_report": {"config": {"k": 10}}}, "resources": {"graph_settings": {"config": {"seed": 2}}}}
    (tmp_path / "typo.yaml").write_text("ops:\n  evaluation_reprot:\n    config: {k: 10}\n")
    with pytest.raises(ValueError, match="evaluation_reprot"):  # a typo is named, never silently dropped
        load_run_config(str(tmp_path / "typo.yaml"), job, known_ops=nightly.graph.node_dict)
    args = build_parser().parse_args(["evaluate", "--source", "synthetic", "--config", "x.yaml", "--epochs", "2"])
    assert (args.source, args.config, args.epochs) == ("synthetic", "x.yaml", 2)


@pytest.mark.slow
def test_evaluate_standalone_prints_and_writes_the_report(spark, tmp_path):
    """``hir evaluate`` on a synthetic source folder: ingestion, content, evaluation; table printed and written.

    The file's config of every asset ``hir evaluate`` runs applies: here a tiny text model for content_embeddings."""
    from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source
    from tests.tiny_models import build_tiny_text_model

    write_synthetic_source(spark, SyntheticConfig(seed=5, n_events=3_000, n_products=80, n_advertisers=16, days=4),
                           tmp_path / "src")
    text_model = build_tiny_text_model(tmp_path / "text", seed=0)
    model = "{hidden_dim: 16, num_layers: 1, num_heads: 2, out_dim: 16, level_sizes: [4, 16, 64]}"
    (tmp_path / "eval.yaml").write_text(
        # one epoch of a 16-wide model is not held to the promotion gate here (the gate: tests/assets)
        "ops:\n  evaluation_report:\n    config:\n      baselines: [popularity, content]\n      gate_tolerance: 1.0\n"
        f"  content_embeddings:\n    config: {{text_model: {json.dumps(str(text_model))}}}\n"
        f"resources:\n  model_settings:\n    config:\n      model: {model}\n      train: {{epochs: 1}}\n"
        f"  graph_settings:\n    config: {json.dumps(SMALL_STRUCTURE)}\n")
    lake, report = tmp_path / "lake", tmp_path / "report.md"
    proc = _hir(["evaluate", "--source", str(tmp_path / "src"), "--lake", str(lake),
                 "--config", str(tmp_path / "eval.yaml"), "--report", str(report)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = report.read_text()
    assert table.strip() and table.strip() in proc.stdout
    # The console of `hir materialize`: one line per step, nothing on stderr, the full log named last.
    assert "ingestion window=all" in proc.stdout and "DEBUG" not in proc.stdout and proc.stderr == ""
    for step in ("bronze_tables", "content_embeddings", "evaluation_report"):
        assert re.search(rf"^hir: {step} done in [\d.]+s", proc.stdout, flags=re.M), proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    logged = Path(last.removeprefix("hir: full log: ")).read_text()
    assert last.startswith("hir: full log: ") and "STEP_START" in logged and "epoch 0 done" in logged
    assert not [line for line in logged.splitlines() if line.startswith("INFO ")]  # each line once
    for method in ("hir", "popularity", "content"):
        assert method in table
    assert "NMI vs planted hierarchy" in proc.stdout
    metrics = spark.read.format("delta").load(str(lake / "evaluation_metrics"))
    assert {r.method for r in metrics.select("method").distinct().collect()} == {"hir", "hir_mean_user", "popularity",
                                                                              "content"}
    content = spark.read.format("delta").load(str(lake / "content_embeddings"))
    widths = {r.width for r in content.select(F.size("text_embedding").alias("width")).distinct().collect()}
    assert widths == {32}  # the tiny model's width (build_tiny_text_model), not the default MiniLM's 384


@pytest.mark.parametrize(("argv", "message"), [
    (["materialize", "--config", "no/such.yaml"], "run config no/such.yaml: cannot read it"),
    (["materialize", "--config", "{bad"], None),  # replaced by a file with broken YAML below
    (["materialize", "--config", "[list]"], None),  # replaced by a file holding a list below
    (["evaluate", "--config", "no/such.yaml"], "run config no/such.yaml: cannot read it"),
])
def test_bad_config_files_are_one_line_and_exit_status_2(tmp_path, capsys, monkeypatch, argv, message):
    from hir_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    if message is None:
        (tmp_path / "c.yaml").write_text(argv[-1] if argv[-1] != "[list]" else "- a\n- b\n")
        message = "not valid YAML" if argv[-1] == "{bad" else "expected a mapping"
        argv = [*argv[:-1], str(tmp_path / "c.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hir: error: run config") and message in err[0], err


def test_unknown_ops_and_resources_in_a_run_config_name_the_key(tmp_path):
    from hir_pipeline.cli import load_run_config
    from hir_pipeline.definitions import NIGHTLY_JOB, defs

    nightly = defs.resolve_job_def(NIGHTLY_JOB)
    subset = nightly.get_subset(op_selection=["bronze_tables"])
    path = tmp_path / "c.yaml"
    path.write_text("ops:\n  interest_modle:\n    config: {}\n")
    with pytest.raises(ValueError, match=r"unknown op\(s\) \['interest_modle'\]"):
        load_run_config(str(path), subset, known_ops=nightly.graph.node_dict)
    path.write_text("resources:\n  sprak:\n    config: {}\n")
    with pytest.raises(ValueError, match=r"unknown resource\(s\) \['sprak'\]"):
        load_run_config(str(path), nightly)
    path.write_text("ops:\n  interest_model:\n    config: {torch_threads: 1}\n")  # known, not selected: dropped
    assert load_run_config(str(path), subset, known_ops=nightly.graph.node_dict)["ops"] == {}


def test_a_bad_partition_date_is_one_line_and_exit_status_2(tmp_path, capsys, monkeypatch):
    from hir_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert main(["materialize", "--partition", "2024-13-01"]) == 2
    assert capsys.readouterr().err.strip() == "hir: error: --partition '2024-13-01' is not a date (YYYY-MM-DD)"


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"hir {version('hir-pipeline')}"


def test_a_run_of_the_same_date_in_progress_refuses_another(tmp_path):
    import dagster as dg

    from hir_pipeline.cli import refuse_concurrent_run

    @dg.op
    def noop():
        return 1

    @dg.job
    def job():
        noop()

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        refuse_concurrent_run(instance, "2024-03-02")  # nothing in progress
        run = instance.create_run_for_job(job, tags={"dagster/partition": "2024-03-02"},
                                          status=dg.DagsterRunStatus.STARTED)
        with pytest.raises(ValueError, match=rf"^run {run.run_id} for 2024-03-02 is started on this Dagster"):
            refuse_concurrent_run(instance, "2024-03-02")
        refuse_concurrent_run(instance, "2024-03-03")  # another date may run
        instance.report_run_failed(run)
        refuse_concurrent_run(instance, "2024-03-02")  # a finished run does not block


def test_a_run_left_by_a_dead_hir_process_is_marked_failed_not_blocking(tmp_path, capsys):
    import socket
    import subprocess
    import sys

    import dagster as dg

    from hir_pipeline.cli import HOST_TAG, PID_TAG, refuse_concurrent_run

    @dg.op
    def noop():
        return 1

    @dg.job
    def job():
        noop()

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        tags = {"dagster/partition": "2024-03-02", HOST_TAG: socket.gethostname()}
        dead = instance.create_run_for_job(job, tags={**tags, PID_TAG: str(gone.pid)},
                                           status=dg.DagsterRunStatus.STARTED)
        refuse_concurrent_run(instance, "2024-03-02")
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert "marked failed" in capsys.readouterr().err
        alive = instance.create_run_for_job(job, tags={**tags, PID_TAG: str(os.getpid())},
                                            status=dg.DagsterRunStatus.STARTED)
        with pytest.raises(ValueError, match=alive.run_id):
            refuse_concurrent_run(instance, "2024-03-02")


@pytest.mark.parametrize("command", [["setup"], ["materialize"], ["evaluate"], ["query"], ["query", "versions"]])
def test_every_command_s_help_shows_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*command, "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    assert "example" in help_text and f"hir {' '.join(command)}" in help_text


def test_images_are_optional_one_notice_line_where_they_cannot_be_fetched(tmp_path, monkeypatch):
    from hir_pipeline.cli import images_line

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no apt-get, no dpkg-deb
    line = images_line(tmp_path / "cache")
    assert line.startswith("not fetched, optional (Fashion-MNIST needs apt-get and dpkg-deb") and "\n" not in line
    assert not (tmp_path / "cache" / "data").exists()


def test_info_of_a_logger_with_its_own_level_is_not_printed_by_the_root_handler(capsys):
    """Dagster sets the run's managed loggers to INFO; their records reach the run log through Dagster, and must not
    reach stderr (the run log's second copy) through the root handler."""
    import logging

    from hir_pipeline.cli import configure_root_logging

    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    root.handlers[:] = []
    managed = logging.getLogger("hir_pipeline.test_managed")
    managed.setLevel(logging.INFO)
    try:
        configure_root_logging(verbose=False)
        managed.info("an INFO line of a managed logger")
        managed.warning("a warning")
        assert capsys.readouterr().err == "WARNING a warning\n"
    finally:
        managed.setLevel(logging.NOTSET)
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
