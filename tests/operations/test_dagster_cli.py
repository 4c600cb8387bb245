"""Dagster's own command-line tools in the project root, as a data engineer types them: no ``DAGSTER_HOME`` set.

``dg check defs``, ``dg list defs`` and ``dagster definitions validate`` load the code location from
``pyproject.toml`` (``[tool.dg]``, ``[tool.dagster]``); ``dagster instance info`` and ``dagster-daemon run`` open the
instance that the root's ``.env`` (written by ``hir setup``) names, which is the one ``hir`` uses. Each tool runs
with the environment stripped of ``DAGSTER_*`` variables. ``dg dev`` itself is what the UI tests start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.operations.services import REPO, VENV_BIN, Service, project_root_copy, wait_for


def test_the_project_is_a_dg_project_and_its_instance_file_needs_no_variable():
    import tomllib

    import yaml

    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    assert tool["dg"]["directory_type"] == "project"
    assert tool["dg"]["project"]["code_location_target_module"] == tool["dagster"]["module_name"]
    assert tool["dg"]["project"]["code_location_name"] == tool["dagster"]["code_location_name"]

    def env_refs(node) -> list:
        if isinstance(node, dict):
            return (["env"] if "env" in node else []) + [r for v in node.values() for r in env_refs(v)]
        return [r for v in node for r in env_refs(v)] if isinstance(node, list) else []

    assert env_refs(yaml.safe_load((REPO / "dagster.yaml").read_text())) == []
    assert env_refs({"a": [{"env": "X"}]}) == ["env"]  # the walk finds one


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(VENV_BIN / args[0]), *args[1:]], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_dg_and_dagster_validate_the_definitions_in_the_checkout_root():
    out = _run(["dg", "check", "defs"], REPO)
    assert "All definitions loaded successfully" in out.stdout + out.stderr
    assert "virtual environment does not match" not in out.stdout + out.stderr  # README calls .venv/bin/dg
    out = _run(["dagster", "definitions", "validate"], REPO)
    assert "Validation successful for code location hir_pipeline" in out.stdout + out.stderr


@pytest.mark.slow
def test_a_fresh_root_without_env_file_lists_and_validates(tmp_path):
    """Before ``hir setup``: the committed dagster.yaml requires no variable (Dagster uses a temporary instance)."""
    project = project_root_copy(tmp_path / "project")
    out = _run(["dagster", "definitions", "validate"], project)
    assert "Validation successful for code location hir_pipeline" in out.stdout + out.stderr
    assert "Using temporary directory" in out.stdout + out.stderr
    listed = json.loads(_run(["dg", "list", "defs", "--json"], project).stdout)
    keys = {a["asset_key"] for a in listed["assets"]}
    assert {"node_embeddings", "cluster_assignments", "evaluation_report"} <= keys, keys


@pytest.mark.slow
def test_the_env_file_names_the_instance_for_the_daemon_and_hir(tmp_path, monkeypatch):
    home = tmp_path / "instance"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    project = project_root_copy(tmp_path / "project", dagster_home=home)

    out = _run(["dagster", "instance", "info"], project)
    assert f"$DAGSTER_HOME: {home}" in out.stdout, out.stdout[:2000]

    daemon = Service([str(VENV_BIN / "dagster-daemon"), "run"], tmp_path / "daemon.log", _env(), cwd=project)
    try:
        wait_for(lambda: "Instance is configured with the following daemons" in daemon.log.read_text(), 300,
                 "dagster-daemon to start", every_s=2, proc=daemon.proc, log=daemon.log)
        wait_for(lambda: (home / "history" / "runs.db").exists(), 60, "the daemon's heartbeat in the instance")
    finally:
        daemon.stop()

    # hir, started in that root without DAGSTER_HOME, opens the same instance
    import hir_pipeline.cli as cli

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr(cli, "project_root", lambda: project)
    assert cli.dagster_home() == home.resolve()
    assert cli.ui_command() == f"cd {project} && .venv/bin/dg dev"
