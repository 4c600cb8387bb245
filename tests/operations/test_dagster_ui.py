"""The Dagster UI as a data engineer uses it: ``dg dev`` in the project root, on loopback, opened in headless
Chromium.

One ``dg dev`` (webserver + daemon) serves the project's definitions over a temporary instance that uses the
committed ``dagster.yaml`` (SQLite storage, QueuedRunCoordinator, run_retries). Its resources point at temporary
folders through ``HIR_LAKE`` / ``HIR_STATE_DIR`` / ``HIR_SOURCE``. A run launched through the webserver's GraphQL
API (what the UI's "Materialize" button calls) is queued, then launched by the daemon in a separate process with
the default run launcher: the daemon is needed because of the QueuedRunCoordinator, and it is also what retries
failed runs per ``run_retries``.

Starting the services is slow; the GraphQL documents these tests send are checked fast against the schema of the
installed dagster-webserver.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from assets.publish import DESCRIPTIONS
from hir_pipeline.contracts import OUTPUT_SCHEMAS
from tests.operations.conftest import RUN_DATE
from tests.operations.services import (
    REPO,
    TERMINAL,
    DagsterUI,
    browser,
    dagster_env,
    project_root_copy,
    run_status,
    wait_for,
    wait_run,
)

INGESTION = ("entities", "relations", "events", "quarantine")

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { id status } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}
"""

ASSETS = "{ assetNodes { assetKey { path } groupName hasAssetChecks isPartitioned } }"

SENSORS = """
query Sensors($selector: RepositorySelector!) {
  repositoryOrError(repositorySelector: $selector) {
    ... on Repository { sensors { name sensorState { id status } } }
  }
}
"""

STOP_SENSOR = "mutation Stop($id: String!) { stopSensor(id: $id) { __typename } }"

RUNS_BY_TAG = """
query Runs($key: String!, $value: String!) {
  runsOrError(filter: { tags: [{ key: $key, value: $value }] }) { ... on Runs { results { id status } } }
}
"""

LOGS = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message stepKey }
        ... on ExecutionStepFailureEvent { error { message cause { message } } }
        ... on MaterializationEvent {
          assetKey { path }
          partition
          metadataEntries { label ... on IntMetadataEntry { intValue } }
        }
        ... on AssetCheckEvaluationEvent { evaluation { checkName success } }
      }
    }
  }
}
"""


def test_graphql_documents_are_valid_for_the_installed_webserver():
    import graphql
    from dagster_graphql.schema import create_schema

    from tests.operations.services import RUN_QUERY

    schema = create_schema().graphql_schema
    documents = {"LAUNCH": LAUNCH, "ASSETS": ASSETS, "SENSORS": SENSORS, "STOP_SENSOR": STOP_SENSOR,
                 "RUNS_BY_TAG": RUNS_BY_TAG, "LOGS": LOGS, "RUN_QUERY": RUN_QUERY}
    errors = {name: graphql.validate(schema, graphql.parse(doc)) for name, doc in documents.items()}
    assert errors == dict.fromkeys(documents, []), errors
    assert graphql.validate(schema, graphql.parse("{ assetNodes { notAField } }"))  # the check can fail


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory, ops_source):
    """``dg dev`` started as the README says: in the project root, no ``DAGSTER_HOME`` set, the instance named by
    the ``.env`` that ``hir setup`` writes (here a temporary one, with the committed dagster.yaml)."""
    root = tmp_path_factory.mktemp("dagster-ui")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    project = project_root_copy(root / "project", dagster_home=home)
    env = dagster_env(home, lake=root / "lake", source=ops_source, state=root / "state")
    del env["DAGSTER_HOME"]
    ui = DagsterUI(env, root / "dagster-dev.log", project=project, root=root)
    try:
        ui.wait_ready()
        _stop_sensors(ui)
        yield ui
    finally:
        ui.stop()


def _stop_sensors(ui: DagsterUI) -> None:
    """Pause the automation sensors, as an engineer would in the Automation tab, so that only this test's runs
    use the one-run-at-a-time queue (their own behaviour is tested in test_automation.py)."""
    selector = {"repositoryLocationName": ui.location_name(), "repositoryName": "__repository__"}
    for sensor in ui.graphql(SENSORS, {"selector": selector})["repositoryOrError"].get("sensors", []):
        if sensor["sensorState"]["status"] == "RUNNING":
            ui.graphql(STOP_SENSOR, {"id": sensor["sensorState"]["id"]})


def _dismiss_dialogs(page) -> None:
    """Close the first-visit "Join the Dagster community" dialog if it shows."""
    page.evaluate("Array.from(document.querySelectorAll('button')).filter(b => b.innerText.trim() === 'Skip')"
                  ".forEach(b => b.click())")


@pytest.mark.slow
def test_asset_graph_renders_every_group_asset_check_and_partitions(dagster_dev, tmp_path):
    import dagster as dg

    from assets.partitions import FALLBACK_START
    from hir_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    expected = {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    served = {"/".join(n["assetKey"]["path"]): n for n in dagster_dev.graphql(ASSETS)["assetNodes"]}
    assert set(served) == set(expected), "the webserver serves exactly the code location's assets"
    # every asset is partitioned by run date except the lake-wide housekeeping
    partitioned = {k for k, n in served.items() if n["isPartitioned"]}
    assert partitioned == {k for k, group in expected.items() if group != "maintenance"}
    checks = {name: len(spec_keys) for name, spec_keys in _checks_by_asset(defs).items()}
    assert set(checks) == {k for k, n in served.items() if n["hasAssetChecks"]}
    groups: dict[str, list[str]] = {}
    for name, group in sorted(expected.items()):
        groups.setdefault(group, []).append(name)
    # "10,928 partitions": the daily calendar up to today, as the UI formats it; the served lake is new, so its
    # calendar starts at the fallback date (assets.partitions.partitions_start)
    served_calendar = dg.DailyPartitionsDefinition(start_date=FALLBACK_START, timezone="UTC")
    n_partitions = f"{len(served_calendar.get_partition_keys()):,} partitions"
    location = dagster_dev.location_name()

    with browser(tmp_path) as page:
        # The global lineage: one box per group (one group: its assets directly); how many assets a box holds is
        # not checked here (the boxes show their counts only when the graph is zoomed in far enough), each group's
        # own graph below shows every one of its assets.
        page.goto(f"{dagster_dev.url}/asset-groups")
        page.wait_text(["Global asset lineage"], 120, "lineage page")
        _dismiss_dialogs(page)
        needles = [*groups] if len(groups) > 1 else [*expected]
        page.wait_text(needles, 180, "global asset graph")
        wait_for(lambda: "fetching statuses" not in page.text(), 120, "asset statuses in the graph")
        _dismiss_dialogs(page)  # it may have opened after the first try
        shot = page.screenshot(tmp_path / "ui-asset-graph.png")
        assert shot.stat().st_size > 20_000, "a real rendering, not a blank page"
        if os.environ.get("HIR_WRITE_DOCS_SCREENSHOT"):  # refresh the README's picture on demand
            (REPO / "docs").mkdir(exist_ok=True)
            shutil.copyfile(shot, REPO / "docs" / "ui-asset-graph.png")

        # Each group's graph: every asset node, with its checks row and partition count. The graph draws only the
        # nodes in the viewport and a group's assets stack vertically: a viewport tall enough for the largest group.
        page.resize(1600, max(1000, 420 * max(len(names) for names in groups.values())))
        for group, names in groups.items():
            page.goto(f"{dagster_dev.url}/locations/{location}/asset-groups/{group}")
            passed = sorted({f"/ {checks[n]} Passed" for n in names if n in checks})
            daily = [n for n in names if n in partitioned]
            text = page.wait_text([*names, *([n_partitions] if daily else []), *passed], 180,
                                  f"asset graph of group {group}")
            node_text = text[text.index("View lineage"):]
            assert node_text.count("Asset checks") >= len(names), f"{group}: a checks row on every asset node"
            assert node_text.count(n_partitions) >= len(daily), f"{group}: a partition count on every daily asset"
            page.screenshot(tmp_path / f"ui-group-{group}.png")

        # The catalog names every asset with its group.
        page.goto(f"{dagster_dev.url}/assets")
        page.wait_text([*expected, *groups], 120, "asset catalog with groups")

        # An asset's checks and its partitions, on its own pages.
        page.goto(f"{dagster_dev.url}/assets/events?view=checks")
        page.wait_text(["great_expectations_suite", "This is a blocking asset check."], 120, "checks of events")
        page.goto(f"{dagster_dev.url}/assets/quarantine?view=checks")
        page.wait_text(["accepted_plus_quarantined_equals_read"], 120, "checks of quarantine")

        # Each published table's columns, with their types and descriptions, before anything was materialized.
        for table, columns in OUTPUT_SCHEMAS.items():
            page.goto(f"{dagster_dev.url}/assets/{table}")
            page.wait_text([DESCRIPTIONS[table], *(c.name for c in columns), *{c.description for c in columns}], 120,
                           f"columns of {table}")
        page.screenshot(tmp_path / "ui-published-columns.png")
        page.goto(f"{dagster_dev.url}/assets/events?view=partitions")
        text = page.wait_text(["Missing", served_calendar.get_last_partition_key()], 120, "partitions of events")
        assert re.search(r"[\d,]+ Partitions Selected", text), text[:2000]
        page.screenshot(tmp_path / "ui-events-partitions.png")


def _checks_by_asset(defs) -> dict[str, set]:
    """Asset name -> names of its checks, from the definitions."""
    graph = defs.resolve_asset_graph()
    out: dict[str, set] = {}
    for check_key in graph.asset_check_keys:
        out.setdefault(check_key.asset_key.to_user_string(), set()).add(check_key.name)
    return out


def _launch_ingestion(ui: DagsterUI, source: Path, partition: str) -> str:
    """What the UI's "Materialize" on the ingestion assets of one partition sends: a launchRun of the nightly job
    restricted to them, with run config (backfill window, the source folder) and the partition tag."""
    params = {
        "selector": {"repositoryLocationName": ui.location_name(), "repositoryName": "__repository__",
                     "jobName": "hir_nightly", "assetSelection": [{"path": [k]} for k in INGESTION]},
        "runConfigData": {"ops": {"bronze_tables": {"config": {"window": "all"}}},
                          "resources": {"source": {"config": {"location": str(source)}}}},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    result = ui.graphql(LAUNCH, {"params": params})["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", result
    assert result["run"]["status"] in {"QUEUED", "NOT_STARTED", "STARTING", "STARTED"}
    return result["run"]["id"]


@pytest.mark.slow
def test_run_from_ui_is_retried_per_dagster_yaml_and_materializes_the_partition(dagster_dev, ops_source):
    """The source lands late: the first run fails, the daemon retries it once (run_retries in dagster.yaml), the
    retry succeeds; the run log names the partition, row counts and Delta versions."""
    import deltalake

    late = dagster_dev.root / "late-source"  # does not exist yet
    first = _launch_ingestion(dagster_dev, late, RUN_DATE)
    # The daemon dequeues and launches the run, then is held: it cannot retry the run before the export arrives
    # below, however fast the run fails. Held at STARTING (dequeued, not yet handed to the code server) the run
    # would never start, so the hold waits for the worker's own STARTED (or its end): the run then goes on by
    # itself, its worker is the code server's child.
    wait_for(lambda: run_status(dagster_dev, first)[0] in {"STARTED"} | TERMINAL, 300,
             "the run's worker to start", every_s=0.2, proc=dagster_dev.service.proc, log=dagster_dev.service.log)
    with dagster_dev.daemon_held():
        # A retry the daemon queued before it was held waits too (dequeuing is the daemon's); one already
        # launched would have read the source before it arrived.
        early = dagster_dev.graphql(RUNS_BY_TAG, {"key": "dagster/parent_run_id", "value": first})
        assert all(r["status"] == "QUEUED" for r in early["runsOrError"]["results"]), early
        assert wait_run(dagster_dev, first, timeout_s=600) == "FAILURE"
        failures = [e for e in dagster_dev.graphql(LOGS, {"runId": first})["logsForRun"]["events"]
                    if e["__typename"] == "ExecutionStepFailureEvent"]
        assert failures and str(late) in str(failures[0]["error"]), failures  # the cause names the missing folder
        os.symlink(ops_source, late)  # the export arrives, whole at once, before the daemon may retry
    retries = wait_for(
        lambda: dagster_dev.graphql(RUNS_BY_TAG, {"key": "dagster/parent_run_id", "value": first})
        ["runsOrError"]["results"], 180, "the daemon to launch a retry of the failed run",
        every_s=2, proc=dagster_dev.service.proc, log=dagster_dev.service.log)
    assert len(retries) == 1, "max_retries: 1"
    retry = retries[0]["id"]
    if (status := wait_run(dagster_dev, retry, timeout_s=900)) != "SUCCESS":
        events = dagster_dev.graphql(LOGS, {"runId": retry})["logsForRun"]["events"]
        errors = [str(e["error"]) for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
        pytest.fail(f"retry {status}: {errors}")
    _, tags = run_status(dagster_dev, retry)
    assert tags["dagster/retry_number"] == "1" and tags["dagster/root_run_id"] == first
    assert tags["dagster/partition"] == RUN_DATE

    events = dagster_dev.graphql(LOGS, {"runId": retry})["logsForRun"]["events"]
    materialized = {e["assetKey"]["path"][0]: e for e in events if e["__typename"] == "MaterializationEvent"}
    assert set(materialized) == set(INGESTION)
    lake = dagster_dev.root / "lake"
    for table, event in materialized.items():
        meta = {m["label"]: m.get("intValue") for m in event["metadataEntries"]}
        assert event["partition"] == RUN_DATE
        assert meta["delta_version"] == deltalake.DeltaTable(str(lake / table)).version(), table
        assert meta["dagster/row_count"] is not None
    events_rows = deltalake.DeltaTable(str(lake / "events")).to_pyarrow_table().num_rows
    assert materialized["events"]["metadataEntries"] and events_rows == next(
        m["intValue"] for m in materialized["events"]["metadataEntries"] if m["label"] == "dagster/row_count")
    messages = [e["message"] for e in events if e["__typename"] == "LogMessageEvent"]
    assert any(RUN_DATE in m for m in messages), "the run log names the run date"
    assert any(re.search(r"events: read [\d,]+, accepted [\d,]+", m) for m in messages), "row counts in the log"
    checks = [e["evaluation"] for e in events if e["__typename"] == "AssetCheckEvaluationEvent"]
    assert checks and all(c["success"] for c in checks), checks
