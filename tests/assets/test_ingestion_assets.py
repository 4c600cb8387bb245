"""Real ``materialize`` of the ingestion assets on a tiny synthetic source (slow), and a failing bronze suite on a
small frame (fast)."""

from __future__ import annotations

import re

import dagster as dg
import pytest
from pyspark.sql import functions as F

from assets.ingestion import ACCOUNTING_CHECK, SUITE_CHECK, bronze_tables
from resources import LakeResource
from spark_jobs.delta_io import latest_version, read_table
from tests.assets.conftest import RUN_DATE, ingestion_run_config


def _private_copy(spark, ingested_lake: dict, root) -> dict:
    """Resources on a copy, under ``root``, of the session's ``ingested_lake`` for tests that write: the shared lake is
    never changed, so the tests reading it see the same Delta versions in any order (Delta logs hold relative
    paths)."""
    import shutil

    from tests.assets.conftest import make_resources

    shutil.copytree(ingested_lake["lake"].root, root / "lake")
    return make_resources(spark, root / "lake", ingested_lake["source"].location, root / "mlflow")


@pytest.fixture
def own_lake(spark, ingested_lake, tmp_path) -> dict:
    """A private copy of ``ingested_lake`` for one test."""
    return _private_copy(spark, ingested_lake, tmp_path)


@pytest.fixture(scope="module")
def day_rerun(spark, ingested_lake, tmp_path_factory) -> dict:
    """One re-run of the run date's day window on a private copy of ``ingested_lake``, with its own instance: the
    resources, the result and the instance (its event log), read by the tests of the run log and the GX suites."""
    resources = _private_copy(spark, ingested_lake, tmp_path_factory.mktemp("day-rerun"))
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([bronze_tables], partition_key=RUN_DATE, resources=resources,
                            run_config=ingestion_run_config("day"), instance=instance)
    assert result.success
    return {"resources": resources, "result": result, "instance": instance}


def _counts(spark, resources) -> dict[str, int]:
    lake = resources["lake"]
    return {t: read_table(spark, lake.path(t)).count() for t in ("entities", "relations", "events", "quarantine")}


@pytest.mark.slow
def test_a_second_source_is_refused_before_anything_is_written(spark, own_lake, tiny_source, tmp_path):
    import shutil

    from spark_jobs.ingestion.lake_source import lake_source
    from tests.assets.conftest import make_resources

    lake = own_lake["lake"]
    recorded = lake_source(spark, lake.path("events"))
    assert recorded.source == own_lake["source"].spec().identity  # the lake's first ingestion recorded it
    other = shutil.copytree(tiny_source, tmp_path / "another-export")  # same rows, another source
    versions = {t: latest_version(spark, lake.path(t)) for t in ("entities", "relations", "events", "quarantine")}
    result = dg.materialize([bronze_tables], partition_key=RUN_DATE, raise_on_error=False,
                            resources=make_resources(spark, tmp_path / "lake", other, tmp_path / "mlflow"),
                            run_config=ingestion_run_config("all"))
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.cause.message
    assert "LakeSourceMismatch: " in message and f"built from source {recorded.source}" in message
    assert f"this run reads {other.as_uri()}" in message
    assert {t: latest_version(spark, lake.path(t)) for t in versions} == versions


@pytest.mark.slow
def test_backfill_writes_every_bronze_table_and_accounting_passes(spark, ingested_lake, tiny_source):
    counts = _counts(spark, ingested_lake)
    assert counts["entities"] > 0 and counts["relations"] > 0 and counts["events"] > 0
    source_events = spark.read.parquet(str(tiny_source / "events")).count()
    assert counts["events"] + counts["quarantine"] >= source_events  # nothing lost


@pytest.mark.slow
def test_rerun_of_a_partition_replaces_it_and_check_passes(spark, own_lake):
    before = _counts(spark, own_lake)
    version_before = latest_version(spark, own_lake["lake"].path("events"))
    result = dg.materialize([bronze_tables], partition_key=RUN_DATE, resources=own_lake,
                            run_config=ingestion_run_config("all"))
    assert result.success
    checks = {(e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()}
    assert checks[("quarantine", ACCOUNTING_CHECK)] and all(checks.values())
    assert _counts(spark, own_lake) == before
    assert latest_version(spark, own_lake["lake"].path("events")) > version_before


@pytest.mark.slow
def test_day_window_replaces_only_that_day(spark, ingested_lake, tiny_source, tmp_path):
    """On a copy of the lake, with a source that gained events on the run date, on an earlier day and after the
    run date: only the run date's rows change, and nothing after it is written (the shared lake stays as it is)."""
    import datetime as dt
    import shutil

    from tests.assets.conftest import make_resources

    lake_root = tmp_path / "lake"
    shutil.copytree(ingested_lake["lake"].root, lake_root)
    source = tmp_path / "source"
    shutil.copytree(tiny_source, source)
    run = dt.date.fromisoformat(RUN_DATE)
    events = spark.read.parquet(str(tiny_source / "events"))
    seed = events.where(F.to_date("event_ts") == F.lit(run)).limit(3)
    shifted = [seed.withColumn("event_id", F.concat(F.lit(f"added-{days}-"), F.col("event_id")))
               .withColumn("event_ts", F.col("event_ts") + F.expr(f"INTERVAL {days} DAYS")) for days in (0, -2, 1)]
    shifted[0].unionByName(shifted[1]).unionByName(shifted[2]).write.mode("append").parquet(str(source / "events"))

    # the same source's next export, in another folder: it names the source the lake was built from
    resources = make_resources(spark, lake_root, source, source_id=ingested_lake["source"].spec().identity)
    events_path = resources["lake"].path("events")
    per_day = dict(read_table(spark, events_path).groupBy("event_date").count().collect())
    result = dg.materialize([bronze_tables], partition_key=RUN_DATE, resources=resources,
                            run_config=ingestion_run_config("day"))
    assert result.success
    after = dict(read_table(spark, events_path).groupBy("event_date").count().collect())
    assert after[run] == per_day[run] + 3  # the run date's rows replaced, with the new ones
    assert {d: n for d, n in after.items() if d != run} == {d: n for d, n in per_day.items() if d != run}
    assert read_table(spark, events_path).where(F.col("event_date") > F.lit(RUN_DATE)).count() == 0
    materialized = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("bronze_tables")}
    assert set(materialized) == {"entities", "relations", "events", "quarantine"}
    assert materialized["events"]["unread_after_window"].value == 3
    assert materialized["events"]["unread_before_window"].value == events.where(
        F.to_date("event_ts") < F.lit(run)).count() + 3


def _source_copy(spark, tiny_source, out, entities, relations):
    """A copy of ``tiny_source`` whose entities and relations tables are the frames given."""
    import shutil

    shutil.copytree(tiny_source, out)
    for table, df in (("entities", entities), ("relations", relations)):
        df.write.mode("overwrite").parquet(str(out / table))
    return out


@pytest.mark.slow
def test_rerunning_an_old_date_never_replaces_a_newer_catalog_row(spark, tiny_source, tmp_path):
    """Day D2 renames an entity and reweights a relation; re-running D1 afterwards, from the catalog as it was on D1
    (old title and weight, plus an entity that only D1's catalog has), keeps D2's rows and inserts the new one."""
    import datetime as dt

    from spark_jobs.ingestion.labels import INGESTED_FOR
    from tests.assets.conftest import make_resources

    day2 = dt.date.fromisoformat(RUN_DATE)
    day1 = day2 - dt.timedelta(days=1)
    entities = spark.read.parquet(str(tiny_source / "entities"))
    relations = spark.read.parquet(str(tiny_source / "relations"))
    renamed = entities.where(F.col("entity_type") == "product").orderBy("entity_id").first()["entity_id"]
    edge = relations.orderBy("src_id", "dst_id", "relation").first()
    is_edge = (F.col("src_id") == edge["src_id"]) & (F.col("dst_id") == edge["dst_id"]) & (
        F.col("relation") == edge["relation"])
    on_day2 = _source_copy(
        spark, tiny_source, tmp_path / "day2",
        entities.withColumn("title", F.when(F.col("entity_id") == renamed, F.lit("renamed on day 2"))
                            .otherwise(F.col("title"))),
        relations.withColumn("weight", F.when(is_edge, F.lit(7.0)).otherwise(F.col("weight"))))
    added = entities.where(F.col("entity_id") == renamed).withColumn("entity_id", F.lit("product:only-on-day-1"))
    on_day1 = _source_copy(spark, tiny_source, tmp_path / "day1", entities.unionByName(added), relations)

    lake_root = tmp_path / "lake"
    for day, source in ((day2, on_day2), (day1, on_day1)):
        result = dg.materialize([bronze_tables], partition_key=day.isoformat(),
                                resources=make_resources(spark, lake_root, source, source_id="tiny-exports"),
                                run_config=ingestion_run_config("day"))  # one source's exports of two days
        assert result.success, day

    lake = LakeResource(root=str(lake_root))
    stored = {r.entity_id: r for r in read_table(spark, lake.path("entities")).collect()}
    assert (stored[renamed].title, stored[renamed][INGESTED_FOR]) == ("renamed on day 2", day2)
    assert stored["product:only-on-day-1"][INGESTED_FOR] == day1
    assert len(stored) == entities.count() + 1
    weight = read_table(spark, lake.path("relations")).where(is_edge).first()
    assert (weight.weight, weight[INGESTED_FOR]) == (7.0, day2)


@pytest.mark.slow
def test_run_log_names_run_date_rows_and_delta_versions_and_reports_progress(spark, day_rerun):
    """The run's own event log (not the metadata alone) names, per table, the run date, the rows written and the
    Delta version written, and each Spark step ends with its Spark jobs (a line that never depends on a stage being
    caught running at a poll)."""
    result, instance, lake = day_rerun["result"], day_rerun["instance"], day_rerun["resources"]["lake"]
    messages = [e.user_message for e in instance.all_logs(result.run_id)
                if e.step_key == "bronze_tables" and e.user_message]
    materialized = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("bronze_tables")}
    for table in ("entities", "relations", "events", "quarantine"):
        version = latest_version(spark, lake.path(table))
        rows = materialized[table]["dagster/row_count"].value
        lines = [m for m in messages if m.startswith(f"{table} for run date {RUN_DATE}: ")]
        assert len(lines) == 1, (table, messages)
        assert re.search(rf": {rows:,} rows .*, Delta version {version}$", lines[0]), lines[0]
        assert materialized[table]["delta_version"].value == version
        assert materialized[table]["run_date"].value == RUN_DATE
    progress = [m for m in messages if re.fullmatch(r"bronze_tables: [\w ]+: \d+s, \d+ Spark jobs? \(\d+ succeeded\), "
                                                    r"[\d,]+ tasks", m)]
    assert progress, messages


@pytest.mark.slow
def test_great_expectations_suites_run_as_blocking_checks(day_rerun):
    evaluations = {(e.asset_key.path[-1], e.check_name): e for e in day_rerun["result"].get_asset_check_evaluations()}
    for table in ("entities", "relations", "events"):
        evaluation = evaluations[(table, SUITE_CHECK)]
        assert evaluation.passed, evaluation.metadata
        assert evaluation.metadata["evaluated"].value >= 4
    specs = {s.key.name: s.blocking for s in bronze_tables.check_specs}
    assert specs[SUITE_CHECK] and specs[ACCOUNTING_CHECK]


def test_failed_suite_blocks_and_names_the_expectation(spark, tmp_path):
    from assets.bronze_suites import bronze_suites
    from assets.quality import validate

    df = spark.createDataFrame([("u1", "user"), ("u1", "user"), ("x", "alien")], "entity_id string, entity_type string")
    result = validate(df, "bronze_entities_bad", bronze_suites()["entities"])
    assert not result.passed
    failed = {f["expectation"] for f in result.metadata["failed_expectations"].value}
    assert failed == {"expect_column_values_to_be_unique", "expect_column_values_to_be_in_set"}
