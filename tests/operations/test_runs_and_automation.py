"""Runs as operations sees them, on a persistent temporary Dagster instance (in-process, real Spark and Delta).

One "nightly" run materializes the ingestion, knowledge and graph assets of the run date with the tiny test
models. Then:

* its run log names the partition, the row counts and the Delta versions, and each Spark step ends with a line
  summarising its Spark jobs;
* a later run that fails half-way through a Spark job (the text model got corrupted) leaves every table at the
  version and rows the nightly run wrote;
* the automation conditions of :mod:`assets.automation` request, for that date only, exactly the assets
  downstream of what changed: nothing after the nightly run for what it ran itself, everything downstream of
  ingestion after ingestion alone is re-run, and nothing twice.

The nightly schedule's partition key is tested in tests/hir_pipeline/test_definitions.py. The runs are slow; that
the code location puts the refresh condition on exactly the assets that have an upstream is checked fast.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from tests.assets.conftest import SMALL_STRUCTURE
from tests.operations.conftest import RUN_DATE

NIGHTLY_GROUPS = ("ingestion", "knowledge", "graph")
#: The line that ends every Spark step (assets.progress.spark_progress); the lines while a stage runs depend on a
#: poll catching it, so they are tested with a scripted status source (tests/spark_jobs/test_progress.py).
SPARK_JOBS = re.compile(r": \d+s, \d+ Spark jobs? \(\d+ succeeded\), [\d,]+ tasks$")


@dataclass
class Nightly:
    """What the module fixture built: definitions, instance, the nightly run and automation state."""

    root: Path
    lake: Path
    defs: dg.Definitions
    auto_defs: dg.Definitions
    instance: dg.DagsterInstance
    selection: set[dg.AssetKey]
    run_config: dict
    result: dg.ExecuteInProcessResult
    cursor_before: object  # automation cursor of the tick before the nightly run
    text_model: Path


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, keys: set[dg.AssetKey], run_config: dict):
    """Execute the nightly job restricted to ``keys`` for :data:`RUN_DATE`, as ``hir materialize`` does."""
    from hir_pipeline.definitions import NIGHTLY_JOB

    job = defs.resolve_job_def(NIGHTLY_JOB).get_subset(asset_selection=keys)
    ops = {name for name in run_config.get("ops", {}) if name in job.graph.node_dict}
    config = {"ops": {name: run_config["ops"][name] for name in ops}}
    return job.execute_in_process(partition_key=RUN_DATE, instance=instance, run_config=config,
                                  raise_on_error=False)


def _keys(defs: dg.Definitions, groups: tuple[str, ...]) -> set[dg.AssetKey]:
    graph = defs.resolve_asset_graph()
    return {k for k in graph.get_all_asset_keys() if graph.get(k).group_name in groups}


@pytest.fixture(scope="module")
def nightly(spark, ops_source, tmp_path_factory) -> Nightly:
    from assets import ASSET_MODULES
    from assets.automation import upstream_refresh_sensor, with_upstream_refresh
    from hir_pipeline.definitions import build_definitions
    from tests.tiny_models import build_tiny_image_model, build_tiny_text_model

    root = tmp_path_factory.mktemp("ops-runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIR_STATE_DIR", str(root / "state"))  # MLflow and checkpoints of any asset stay in here
        lake = root / "lake"
        defs = build_definitions(lake_root=str(lake), source=str(ops_source))
        auto_defs = dg.Definitions(assets=with_upstream_refresh(dg.load_assets_from_modules(ASSET_MODULES)),
                                   sensors=[upstream_refresh_sensor], resources=defs.resources)
        (root / "dagster_home").mkdir()
        instance = dg.DagsterInstance.local_temp(str(root / "dagster_home"))
        text_model = build_tiny_text_model(root / "models" / "text")
        run_config = {"ops": {
            "bronze_tables": {"config": {"window": "all"}},
            "content_embeddings": {"config": {"text_model": str(text_model),
                                              "image_model": str(build_tiny_image_model(root / "models" / "image"))}},
        }, "resources": {"graph_settings": {"config": SMALL_STRUCTURE}}}
        # the sensor's first tick happens before the nightly run
        before = dg.evaluate_automation_conditions(defs=auto_defs, instance=instance)
        assert before.total_requested == 0
        selection = _keys(defs, NIGHTLY_GROUPS)
        result = _run(defs, instance, selection, run_config)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        yield Nightly(root, lake, defs, auto_defs, instance, selection, run_config, result, before.cursor,
                      text_model)
        instance.dispose()


def _delta_state(lake: Path) -> dict[str, tuple[int, int]]:
    """(latest version, row count) of every Delta table in the lake."""
    from deltalake import DeltaTable

    state = {}
    for path in sorted(p for p in lake.iterdir() if (p / "_delta_log").is_dir()):
        table = DeltaTable(str(path))
        state[path.name] = (table.version(), table.to_pyarrow_table().num_rows)
    return state


@pytest.mark.slow
def test_run_log_names_partition_row_counts_and_delta_versions(nightly: Nightly):
    from deltalake import DeltaTable

    materializations = nightly.result.get_asset_materialization_events()
    by_key = {e.asset_key: e for e in materializations}
    assert set(by_key) == nightly.selection
    for key, event in by_key.items():
        materialization = event.event_specific_data.materialization
        meta = {k: v.value for k, v in materialization.metadata.items()}
        assert event.partition == RUN_DATE, key
        assert isinstance(meta.get("dagster/row_count"), int), f"{key.to_user_string()}: no row count"
        table = DeltaTable(str(nightly.lake / key.to_user_string()))
        assert meta.get("delta_version") == table.version(), f"{key.to_user_string()}: Delta version"
    messages = [e.user_message for e in nightly.instance.all_logs(nightly.result.run_id) if e.user_message]
    assert any(RUN_DATE in m for m in messages), "the log names the run date"
    assert any(re.search(r"accepted [\d,]+, quarantined [\d,]+", m) for m in messages), "row counts in the log"


@pytest.mark.slow
def test_spark_steps_log_their_spark_jobs(nightly: Nightly):
    """Every Spark step's run log says how its Spark jobs went, whatever the timing of its stages."""
    logs = [e for e in nightly.instance.all_logs(nightly.result.run_id) if e.user_message]
    steps_with_progress = {e.step_key for e in logs if SPARK_JOBS.search(e.user_message)}
    spark_steps = {"graph_edges", "graph_nodes", "graph_views", "content_embeddings"}
    present = {e.step_key for e in logs} & spark_steps
    assert present and present <= steps_with_progress, f"no progress lines from {present - steps_with_progress}"


@pytest.mark.slow
def test_failed_run_leaves_earlier_outputs_intact(nightly: Nightly, tmp_path):
    """The text model's weights are truncated: embedding fails inside the Spark job, after the step started."""
    if dg.AssetKey("content_embeddings") not in nightly.selection:
        pytest.fail("the knowledge group (content_embeddings) is not in the code location")
    broken = tmp_path / "text-model"
    shutil.copytree(nightly.text_model, broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # a new fingerprint, so every entity is re-embedded
    before = _delta_state(nightly.lake)

    config = {"ops": {"content_embeddings": {"config": {
        **nightly.run_config["ops"]["content_embeddings"]["config"], "text_model": str(broken),
        "precision": "float32"}}}}  # no calibration: it would load the broken model on the driver, before Spark
    result = _run(nightly.defs, nightly.instance, {dg.AssetKey("content_embeddings")}, config)

    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "content_embeddings"
    assert "Py4JJavaError" in str(failure.step_failure_data.error) or "PythonException" in str(
        failure.step_failure_data.error), "it failed inside Spark, not before the step started working"
    assert not result.get_asset_materialization_events()
    assert _delta_state(nightly.lake) == before, "every table keeps its version and rows"


def automated_keys(assets) -> set[dg.AssetKey]:
    """Keys of the assets that carry an automation condition.

    Args:
        assets: the definitions' assets; anything that is not an ``AssetsDefinition`` is ignored.
    """
    return {spec.key for a in assets if isinstance(a, dg.AssetsDefinition)
            for spec in a.specs if spec.automation_condition is not None}


def test_code_location_automates_every_asset_with_an_upstream_and_no_root():
    from hir_pipeline.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    roots = {key for key in keys if not graph.get(key).parent_keys}
    assert roots and roots != keys
    assert automated_keys(defs.assets) == keys - roots


@pytest.mark.slow
def test_upstream_change_requests_downstream_refresh(nightly: Nightly):
    graph = nightly.auto_defs.resolve_asset_graph()
    automated = automated_keys(list(nightly.auto_defs.assets))
    ingestion = _keys(nightly.defs, ("ingestion",))
    assert automated and not (automated & ingestion), "roots are scheduled, everything downstream is automated"

    def downstream(keys: set[dg.AssetKey]) -> set[dg.AssetKey]:
        return set(dg.AssetSelection.assets(*keys).downstream().resolve(graph)) - keys

    def requested(result) -> dict[dg.AssetKey, set]:
        return {k: set(p) for k in graph.get_all_asset_keys() if (p := result.get_requested_partitions(k))}

    # After the nightly run: only what it did not run itself, downstream of it, is stale.
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance,
                                             cursor=nightly.cursor_before)
    stale = downstream(nightly.selection)
    assert requested(tick) == {k: {RUN_DATE} for k in stale}
    # Requested once: the next tick (a minute later in the daemon) asks for nothing more.
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance, cursor=tick.cursor)
    assert tick.total_requested == 0

    # A data engineer re-ingests the date: everything downstream of ingestion is requested, for that date only.
    rerun = _run(nightly.defs, nightly.instance, ingestion, {"ops": {"bronze_tables": {"config": {"window": "day"}}}})
    assert rerun.success
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance, cursor=tick.cursor)
    assert requested(tick) == {k: {RUN_DATE} for k in downstream(ingestion)}
    assert set(requested(tick)) >= {k for k in nightly.selection if k not in ingestion}

    # And again nothing twice.
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance, cursor=tick.cursor)
    assert tick.total_requested == 0

    # graph_edges re-materialized with weights that overflow (every stage 1e308): its blocking check fails, the
    # write is rolled back, and the next tick requests nothing downstream of it.
    edges = dg.AssetKey("graph_edges")
    rows_before = _edges_of_the_date(nightly.lake)
    settings = nightly.defs.resources["graph_settings"]
    overflowing = type(settings)(**{**settings.model_dump(), "stage_weights": [1e308] * len(settings.funnel)})
    bad_defs = dg.Definitions(assets=nightly.defs.assets, asset_checks=nightly.defs.asset_checks,
                              jobs=nightly.defs.jobs, executor=nightly.defs.executor,
                              resources={**nightly.defs.resources, "graph_settings": overflowing})
    bad = _run(bad_defs, nightly.instance, {edges}, {})
    assert not bad.success
    [evaluation] = [e for e in bad.get_asset_check_evaluations() if e.asset_key == edges]
    assert not evaluation.passed and evaluation.metadata["bad_weights"].value > 0
    [materialization] = [e.materialization for e in bad.get_asset_materialization_events()]
    assert "rolled_back" in materialization.metadata
    assert _edges_of_the_date(nightly.lake) == rows_before, "readers see the rows of before the failed run"
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance, cursor=tick.cursor)
    assert tick.total_requested == 0, requested(tick)

    # Fixed: a passing re-run of the date refreshes everything downstream of it again.
    assert _run(nightly.defs, nightly.instance, {edges}, {}).success
    tick = dg.evaluate_automation_conditions(defs=nightly.auto_defs, instance=nightly.instance, cursor=tick.cursor)
    assert requested(tick) == {k: {RUN_DATE} for k in downstream({edges})}


def _edges_of_the_date(lake: Path) -> list[tuple]:
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "graph_edges")).to_pyarrow_table(
        filters=[("run_date", "=", dt.date.fromisoformat(RUN_DATE))])
    return sorted(zip(*(table.column(c).to_pylist() for c in ("src_idx", "dst_idx", "weight")), strict=True))
