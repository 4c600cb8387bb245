"""A Postgres-backed Dagster instance: ``deploy/dagster.postgres.yaml`` against Debian's PostgreSQL.

A throwaway PostgreSQL cluster runs on loopback; the documented variant is copied to ``$DAGSTER_HOME/dagster.yaml``
with its ``DAGSTER_PG_*`` settings in the environment. ``hir materialize`` runs the ingestion assets against it
in its own process; the run, its events and the materialized partition must then be in Postgres (not in SQLite
files beside dagster.yaml) and be served by a webserver, before and after restarting the webserver and the
database server.

Starting PostgreSQL and Dagster is slow; that the documented file is a valid instance config taking its connection
from the ``DAGSTER_PG_*`` variables is checked fast, without a server.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.operations.conftest import RUN_DATE
from tests.operations.services import REPO, VENV_BIN, DagsterUI, Postgres, dagster_env, log_tail

HISTORY = """
query History($runId: ID!, $partition: String!) {
  runOrError(runId: $runId) { __typename ... on Run { status tags { key value } } }
  assetOrError(assetKey: { path: ["events"] }) {
    ... on Asset { assetMaterializations(partitions: [$partition]) { runId partition } }
  }
}
"""


def test_documented_instance_file_is_valid_and_reads_the_connection_from_the_environment(tmp_path):
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config

    shutil.copy(REPO / "deploy" / "dagster.postgres.yaml", tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))
    db = config["storage"]["postgres"]["postgres_db"]
    assert {field: db[field] for field in ("hostname", "port", "username", "password", "db_name")} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"}}  # the variables the README documents; no secret in the file
    (tmp_path / "dagster.yaml").write_text((tmp_path / "dagster.yaml").read_text().replace("hostname:", "host:"))
    with pytest.raises(DagsterInvalidConfigError):  # the check can fail
        dagster_instance_config(str(tmp_path))


@pytest.fixture
def postgres():
    # Not under pytest's tmp folders: they are private to root, and the server runs as the postgres user.
    root = Path(tempfile.mkdtemp(prefix="hir-pg-", dir="/tmp"))
    server = None
    try:
        server = Postgres(root)
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _served_history(ui: DagsterUI, run_id: str) -> tuple[str, list[str]]:
    data = ui.graphql(HISTORY, {"runId": run_id, "partition": RUN_DATE})
    assert data["runOrError"]["__typename"] == "Run", data
    return data["runOrError"]["status"], [m["runId"] for m in data["assetOrError"]["assetMaterializations"]]


@pytest.mark.slow
def test_postgres_instance_runs_a_materialization_and_keeps_history_across_restarts(postgres, ops_source, tmp_path):
    import psycopg2

    postgres.create_database("dagster")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
    env = dagster_env(home, lake=tmp_path / "lake", source=ops_source, state=tmp_path / "state",
                      **postgres.env("dagster"))

    proc = subprocess.run([str(VENV_BIN / "hir"), "materialize", "--select", "group:ingestion"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_id = re.search(r"hir: run ([0-9a-f-]{36}) succeeded for (\S+)\.", proc.stdout)
    assert run_id and run_id.group(2) == RUN_DATE, proc.stdout[-2000:]
    run_id = run_id.group(1)

    # The history lives in Postgres, not in SQLite files beside dagster.yaml.
    assert not list(home.rglob("*.db")), list(home.rglob("*.db"))
    conn = psycopg2.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password=postgres.password,
                            dbname="dagster")
    with conn, conn.cursor() as cur:
        cur.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,))
        assert cur.fetchone() == ("SUCCESS",)
        cur.execute("SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = "
                    "'ASSET_MATERIALIZATION'", (run_id,))
        assert cur.fetchone()[0] == 4  # entities, relations, events, quarantine
    conn.close()

    for attempt in ("first start", "after restarting the webserver and PostgreSQL"):
        ui = DagsterUI(env, tmp_path / "webserver.log", daemon=False)
        try:
            ui.wait_ready()
            status, materialized_by = _served_history(ui, run_id)
        finally:
            ui.stop()
        assert status == "SUCCESS", attempt
        assert materialized_by == [run_id], f"{attempt}: events/{RUN_DATE} materialized by the CLI run"
        if attempt == "first start":
            postgres.stop()
            postgres.start()
    assert "Serving dagster-webserver" in (tmp_path / "webserver.log").read_text(), log_tail(tmp_path / "webserver.log")
