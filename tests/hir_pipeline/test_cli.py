"""The ``hir`` command line, run as a real subprocess against a temporary state folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hir_pipeline.cli import build_parser


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


@pytest.mark.slow
def test_missing_source_is_one_clear_line_and_writes_nothing(tmp_path):
    lake = tmp_path / "lake"
    proc = _hir(["materialize", "--source", str(tmp_path / "nope"), "--lake", str(lake)], tmp_path)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hir: error:")]
    assert errors == [f"hir: error: source folder {tmp_path / 'nope'} does not exist"]
    assert not lake.exists()


@pytest.mark.slow
def test_wrong_column_type_names_table_and_column(spark, tmp_path):
    source = tmp_path / "src"
    spark.createDataFrame([("u1", "user")], "entity_id string, entity_type string").write.parquet(
        str(source / "entities"))
    spark.createDataFrame([("u1", "p1", "r")], "src_id string, dst_id string, relation string").write.parquet(
        str(source / "relations"))
    spark.createDataFrame([("u1", "p1", "click", 5)], "user_id string, entity_id string, event_type string, "
                          "event_ts int").write.parquet(str(source / "events"))
    proc = _hir(["materialize", "--source", str(source), "--lake", str(tmp_path / "lake")], tmp_path)
    assert proc.returncode == 2
    assert "events.event_ts" in proc.stderr
    assert not (tmp_path / "lake").exists()


@pytest.mark.slow
def test_materialize_ingestion_backfill_as_of_latest_event(spark, tmp_path):
    from spark_jobs.sources.synthetic import SyntheticConfig, write_synthetic_source

    config = SyntheticConfig(seed=3, n_events=2_000, n_products=80, n_advertisers=16, days=3)
    write_synthetic_source(spark, config, tmp_path / "src")
    lake = tmp_path / "lake"
    proc = _hir(["materialize", "--source", str(tmp_path / "src"), "--lake", str(lake),
                 "--select", "group:ingestion"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run date={config.end_date}" in proc.stdout and "ingestion window=all" in proc.stdout
    events = spark.read.format("delta").load(str(lake / "events"))
    assert events.count() > 0
    assert (tmp_path / "dagster" / "dagster.yaml").exists()  # the committed instance config was installed
