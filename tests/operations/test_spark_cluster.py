"""The pipeline on a real Spark standalone cluster instead of ``local[*]``.

A master and one worker run on loopback (pyspark's own ``sbin/spark-daemon.sh``); the ingestion, graph and content
embedding assets are materialized with the Dagster CLI in another process whose ``SparkResource`` points at
``spark://127.0.0.1:PORT`` (``HIR_SPARK_MASTER``). Executors are separate JVMs with their own Python workers,
started by the worker in its own folder with an environment that has none of the driver's ``HIR_*`` variables,
and receive the Delta jars from the driver (``spark.jars``): code that relied on driver-local state (a relative
path, a global set on the driver, a jar only on the driver's classpath) fails here. ``spark.driver.maxResultSize``
is kept small so that collecting table-sized data to the driver fails too.

The interest model's data-parallel training runs there too: ``TorchDistributor`` with ``local_mode=False`` (the
choice for a ``spark://`` master) trains the two ranks as barrier tasks on the executor, and the model is the one
two ranks launched directly train, bit for bit.

Starting the cluster is slow; that the test still selects all three stages from the code location (a renamed
group would silently shrink it) is checked fast.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from tests.assets.conftest import SMALL_STRUCTURE
from tests.operations.conftest import RUN_DATE
from tests.operations.services import REPO, VENV_BIN, SparkStandalone, dagster_env, log_tail

GROUPS = ("ingestion", "graph", "knowledge")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module's tests (starting it is the slow part); each test finds its own application by
    name."""
    spark = SparkStandalone(tmp_path_factory.mktemp("cluster") / "spark")
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


def _application(cluster: SparkStandalone, name: str) -> tuple[dict, str]:
    """The master's record of the one application called ``name`` and its executors' stderr."""
    state = cluster.state()
    apps = [a for a in state["completedapps"] + state["activeapps"] if a["name"] == name]
    assert len(apps) == 1 and apps[0]["cores"] >= 1, state
    executor_dirs = list(cluster.work_dir.glob(f"{apps[0]['id']}/*"))
    assert executor_dirs, f"no executor folder under {cluster.work_dir}"
    return apps[0], "\n".join((d / "stderr").read_text(errors="replace") for d in executor_dirs)


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

    # The application ran on the cluster: registered with the master, given the worker's cores, and its executor,
    # in the worker's own folder, fetched the Delta jars from the driver and ran the tasks.
    app, stderr = _application(cluster, "hir-pipeline")
    fetched = list(cluster.work_dir.glob(f"{app['id']}/*/io.delta_delta-spark_*.jar"))
    assert fetched, f"no Delta jar fetched into {cluster.work_dir / app['id']}"
    assert "Finished task" in stderr and "Running task" in stderr

    # Every selected table was written, with rows for the run date where the table is dated.
    for name in names:
        table = DeltaTable(str(lake / name)).to_pyarrow_table()
        if name == "quarantine":
            continue  # a clean source quarantines nothing
        assert table.num_rows > 0, name
        if "run_date" in table.column_names and name.startswith("graph_"):
            assert {str(d) for d in table.column("run_date").to_pylist()} == {RUN_DATE}, name


@pytest.mark.slow
def test_torch_distributor_trains_the_ranks_on_the_executors_like_two_direct_ranks(cluster, tmp_path):
    from hir_pipeline.training.distributed import save_inputs
    from tests.hir_pipeline.training.test_data_parallel import MODEL, _run_ranks, toy_inputs

    out = tmp_path / "distributor"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_SUBMIT_ARGS", "HIR_"))}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(VENV_BIN / "python"), PYTHONUNBUFFERED="1")
    log = tmp_path / "distributor.log"
    with log.open("w") as stdout:
        proc = subprocess.run([str(VENV_BIN / "python"), "-m", "tests.operations.distributor_job",
                               "--master", cluster.url, "--out", str(out)],
                              cwd=REPO, env=env, stdout=stdout, stderr=subprocess.STDOUT, timeout=600)
    assert proc.returncode == 0, log_tail(log, 60)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["local_mode"] is False and summary["use_gpu"] is False

    # The ranks ran on the cluster's executor as one barrier stage of two tasks, not on the driver.
    _, stderr = _application(cluster, "hir-distributor")
    for task in (0, 1):
        assert f"BarrierTaskContext: Task {task} from Stage" in stderr, stderr[-4000:]
        assert f"Finished task {task}.0" in stderr, stderr[-4000:]

    # Same seed, same model: the losses and every trained parameter equal those of two ranks launched directly
    # (prototypes are refined after training from the published embeddings, so they are compared there).
    direct = _run_ranks(2, str(save_inputs(toy_inputs(), tmp_path / "inputs.pkl")), MODEL, tmp_path / "ranks")
    assert summary["losses"] == [m["loss"] for m in direct[0]["history"]]
    assert summary["fingerprint"] == direct[0]["fingerprint"]
    state = torch.load(direct[0]["checkpoint"], map_location="cpu", weights_only=True)["student"]
    published = torch.load(out / "published.pt", map_location="cpu", weights_only=True)
    trained = {k for k in published if not k.startswith("hierarchy.prototypes.")}
    assert trained and all(torch.equal(published[k], state[k]) for k in trained)
    assert summary["num_embeddings"] == toy_inputs().num_nodes
