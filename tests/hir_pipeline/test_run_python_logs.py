"""The project's Python loggers reach the Dagster run log through the instance setting ``python_logs`` of the
committed ``dagster.yaml`` (real runs on real instances), also under ``hir materialize``."""

from __future__ import annotations

import logging
import re
import shutil

import dagster as dg
import yaml

from hir_pipeline import cli
from hir_pipeline.settings import project_root
from tests.dagster_instance import project_python_logs

PROJECT_LOGGERS = ("hir_pipeline", "spark_jobs", "assets", "resources")


@dg.asset
def chatty() -> None:
    logging.getLogger("hir_pipeline.training.trainer").info("epoch 0 step 1/3 loss 0.5")
    logging.getLogger("spark_jobs.graph.build").warning("12 dangling edges")
    logging.getLogger("assets.model").debug("below the configured level")
    logging.getLogger("some_library").warning("not one of the project's loggers")


def _materialize(instance: dg.DagsterInstance) -> dict[str, int]:
    result = dg.materialize([chatty], instance=instance)
    assert result.success
    return {e.user_message: e.level for e in instance.all_logs(result.run_id)
            if e.step_key == "chatty" and e.dagster_event is None}


def test_committed_instance_config_manages_the_project_loggers_at_info():
    assert set(project_python_logs()["managed_python_loggers"]) == set(PROJECT_LOGGERS)
    assert project_python_logs()["python_log_level"] == "INFO"


def test_an_instance_from_the_committed_dagster_yaml_logs_project_records_at_their_levels(tmp_path):
    shutil.copyfile(project_root() / "dagster.yaml", tmp_path / "dagster.yaml")
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        logged = _materialize(instance)
    finally:
        instance.dispose()
    assert logged == {"epoch 0 step 1/3 loss 0.5": logging.INFO, "12 dangling edges": logging.WARNING}


def test_an_instance_made_before_the_setting_gets_it_and_an_owners_choice_is_kept(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "old"))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "dagster.yaml").write_text("# mine\ntelemetry:\n  enabled: false\n")
    assert cli.dagster_home() == tmp_path / "old"
    text = (tmp_path / "old" / "dagster.yaml").read_text()
    assert text.startswith("# mine\ntelemetry:\n  enabled: false\n")
    assert yaml.safe_load(text) == {"telemetry": {"enabled": False}, "python_logs": project_python_logs()}
    assert "hir: added python_logs" in capsys.readouterr().out
    cli.dagster_home()  # once added, never again
    assert (tmp_path / "old" / "dagster.yaml").read_text() == text

    own = "python_logs:\n  python_log_level: WARNING\n"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "dagster.yaml").write_text(own)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "mine"))
    cli.dagster_home()
    assert (tmp_path / "mine" / "dagster.yaml").read_text() == own


def test_hir_materialize_runs_write_project_records_to_their_log_file(tmp_path, monkeypatch):
    """``hir materialize``'s path: the instance of ``DAGSTER_HOME`` (installed by ``dagster_home``) and the run
    log of ``with_run_log``."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    cli.dagster_home()
    job = dg.Definitions(assets=[chatty], jobs=[dg.define_asset_job("one_step")]).resolve_job_def("one_step")
    log_path = tmp_path / "run.log"
    job, run_config = cli.with_run_log(job, {}, log_path, verbose=False)
    instance = dg.DagsterInstance.get()
    try:
        assert list(instance.managed_python_loggers) == list(project_python_logs()["managed_python_loggers"])
        result = job.execute_in_process(run_config=run_config, instance=instance)
        assert result.success
        stored = {e.user_message for e in instance.all_logs(result.run_id)}
    finally:
        instance.dispose()
    logged = log_path.read_text()
    # Dagster prefixes the message with job, run ID and step: "INFO one_step - <run> - chatty - epoch 0 ..."
    assert re.search(r" INFO one_step - [-\w]+ - chatty - epoch 0 step 1/3 loss 0\.5$", logged, flags=re.M), logged
    assert re.search(r" WARNING one_step - [-\w]+ - chatty - 12 dangling edges$", logged, flags=re.M), logged
    assert "below the configured level" not in logged and "not one of the project's loggers" not in logged
    assert {"epoch 0 step 1/3 loss 0.5", "12 dangling edges"} <= stored
