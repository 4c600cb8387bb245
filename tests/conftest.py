"""Shared fixtures: one real local SparkSession with Delta for the whole test session."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hir_pipeline.settings import cache_dir
from tests.shuffle_order import SHUFFLE_ENV, shuffle_seed, shuffled

#: Measured seconds per test file (scripts/update_test_durations.py); files not listed count as this.
DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_FILE_SECONDS = 30.0


def pytest_addoption(parser):
    parser.addoption("--shuffle-seed", type=int, default=None, metavar="N",
                     help=f"run modules, and the tests inside each, in an order drawn from seed N (or {SHUFFLE_ENV}); "
                          "each module's tests stay together. Replays exactly with -n 0.")


def _seed(config) -> int | None:
    return shuffle_seed(config.getoption("shuffle_seed"))


def pytest_report_header(config) -> str:
    seed = _seed(config)
    if seed is None:
        return f"test order: longest files first (shuffle with --shuffle-seed N or {SHUFFLE_ENV}=N)"
    return f"test order: shuffled, seed {seed} (replay: --shuffle-seed {seed} -n 0)"


def pytest_collection_modifyitems(config, items):
    """Longest test files first (stable otherwise), so the two xdist workers (``--dist loadfile
    --no-loadscope-reorder`` in scripts/test.sh) do not end with one of them running a 2-minute file alone.

    With a shuffle seed, a seeded order instead (tests/shuffle_order.py), to catch tests that depend on others."""
    seed = _seed(config)
    if seed is not None:
        items[:] = shuffled(items, seed, nodeid=lambda item: item.nodeid)
        return
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    root = Path(str(config.rootpath))

    def cost(item) -> float:
        rel = Path(str(item.path)).relative_to(root).as_posix()
        return seconds.get(rel, UNKNOWN_FILE_SECONDS)

    items[:] = sorted(items, key=lambda item: -cost(item))  # sorted() is stable: file and test order kept


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A real Delta-enabled local SparkSession (2 cores, small shuffles: unit-test sized data)."""
    from spark_jobs.session import build_spark_session, ensure_delta_jars

    warehouse = tmp_path_factory.mktemp("warehouse")
    # Python workers (the ``mapInPandas`` of graph views, graph checks, content embeddings) must run this
    # interpreter, which has numpy: PySpark reads PYSPARK_PYTHON once, when the SparkContext starts, so it is set
    # here, for the session, rather than by whichever test module happens to be imported (a module run alone, or
    # first, would otherwise get the system ``python3``).
    env = pytest.MonkeyPatch()
    env.setenv("PYSPARK_PYTHON", sys.executable)
    session = build_spark_session(
        jars=ensure_delta_jars(cache_dir()),
        master=os.environ.get("HIR_TEST_SPARK_MASTER", "local[2]"),
        app_name="hir-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "3g",
            "spark.ui.enabled": "false",
            # Delta rebuilds table state with 50 tasks per read by default: far too many for test-sized tables.
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.warehouse.dir": str(warehouse),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    env.undo()
