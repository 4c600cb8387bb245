"""The pipeline on a real Spark standalone cluster instead of ``local[*]``.

A master and one worker run on loopback (pyspark's own ``sbin/spark-daemon.sh``); the ingestion, graph and content
embedding assets are materialized with the Dagster CLI in another process whose ``SparkResource`` points at
``spark://127.0.0.1:PORT`` (``HIR_SPARK_MASTER``). Executors are separate JVMs with their own Python workers,
started by the worker in its own folder with an environment that has none of the driver's ``HIR_*`` variables,
and receive the Delta jars from the driver (``spark.jars``): code that relied on driver-local state (a relative
path, a global set on the driver, a jar only on the driver's classpath) fails here. ``spark.driver.maxResultSize``
is kept small so that collecting table-sized data to the driver fails too.

Starting the cluster is slow; that the test still selects all three stages from the code location (a renamed
group would silently shrink it) is checked fast.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.assets.conftest import SMALL_STRUCTURE
from tests.operations.conftest import RUN_DATE
from tests.operations.services import REPO, VENV_BIN, SparkStandalone, dagster_env, log_tail

GROUPS = ("ingestion", "graph", "knowledge")


@pytest.fixture
def cluster(tmp_path):
    spark = SparkStandalone(tmp_path / "spark")
    try:
        yield spark
    finally:
        spark.stop()


def _selection() -> tuple[str, list[str]]:
    """Asset selection over the groups above that the code location has, and the asset names it covers."""
    from hir_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    names = {k.to_user_string(): graph.get(k).group_name for k in graph.get_all_asset_keys()}
    present = [g for g in GROUPS if g in names.values()]
    return " or ".join(f"group:{g}" for g in present), sorted(n for n, g in names.items() if g in present)


def test_selection_covers_ingestion_graph_and_content_embeddings():
    selection, names = _selection()
    assert selection == " or ".join(f"group:{g}" for g in GROUPS)
    assert {"entities", "events", "graph_edges", "graph_views", "content_embeddings"} <= set(names)


@pytest.mark.slow
def test_ingestion_graph_and_embeddings_run_on_a_standalone_cluster(cluster, ops_source, tmp_path):
    from deltalake import DeltaTable

    from tests.tiny_models import build_tiny_image_model, build_tiny_text_model

    selection, names = _selection()
    # The test-sized structure embedding runs the same Spark jobs and driver-side collects (each a small Gram
    # matrix, whatever its width) as the default one, in fewer rounds.
    config = {"ops": {"bronze_tables": {"config": {"window": "all"}}},
              "resources": {"graph_settings": {"config": SMALL_STRUCTURE}}}
    if "content_embeddings" in names:
        config["ops"]["content_embeddings"] = {"config": {
            "text_model": str(build_tiny_text_model(tmp_path / "models" / "text")),
            "image_model": str(build_tiny_image_model(tmp_path / "models" / "image")),
        }}
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    lake = tmp_path / "lake"
    env = dagster_env(
        home, lake=lake, source=ops_source, state=tmp_path / "state", HIR_SPARK_MASTER=cluster.url,
        # small executors on a 2-core box; collecting more than 1 MB of results to the driver is an error
        PYSPARK_SUBMIT_ARGS="--conf spark.executor.memory=1g --conf spark.executor.cores=2 "
                            "--conf spark.driver.maxResultSize=1m pyspark-shell",
    )
    log = tmp_path / "materialize.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [str(VENV_BIN / "dagster"), "asset", "materialize", "-m", "hir_pipeline.definitions",
             "--select", selection, "--partition", RUN_DATE, "--config-json", json.dumps(config)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1500,  # away from the .env
        )
    assert proc.returncode == 0, log_tail(log, 60)
    # The instance's record of the run (the console shows INFO and above: python_log_level in dagster.yaml).
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS], log_tail(log, 60)

    # The application ran on the cluster: registered with the master, given the worker's cores ...
    state = cluster.state()
    apps = [a for a in state["completedapps"] + state["activeapps"] if a["name"] == "hir-pipeline"]
    assert len(apps) == 1 and apps[0]["cores"] >= 1, state
    # ... and its executor, in the worker's own folder, fetched the Delta jars from the driver and ran the tasks.
    executor_dirs = list(cluster.work_dir.glob(f"{apps[0]['id']}/*"))
    assert executor_dirs, f"no executor folder under {cluster.work_dir}"
    fetched = [j for d in executor_dirs for j in d.glob("io.delta_delta-spark_*.jar")]
    assert fetched, f"no Delta jar fetched into {executor_dirs}"
    stderr = "\n".join((d / "stderr").read_text(errors="replace") for d in executor_dirs)
    assert "Finished task" in stderr and "Running task" in stderr

    # Every selected table was written, with rows for the run date where the table is dated.
    for name in names:
        table = DeltaTable(str(lake / name)).to_pyarrow_table()
        if name == "quarantine":
            continue  # a clean source quarantines nothing
        assert table.num_rows > 0, name
        if "run_date" in table.column_names and name.startswith("graph_"):
            assert {str(d) for d in table.column("run_date").to_pylist()} == {RUN_DATE}, name
