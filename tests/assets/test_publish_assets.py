"""The publish multi-asset, materialized for real on the tiny lake with hand-written model tables.

Sequence (one module-scoped lake): publish D1 (model v1); publish D2 with model v2 = v1 with every level's
clusters renumbered (a permutation) -> the published IDs do not move and stability is 1.0; re-run D1 (an old
date, with D2 already published) -> D1's rows are replaced by the same ones, D2's are untouched.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from assets.publish import publish_tables, run_date_step
from hir_pipeline.contracts import OUTPUT_TABLES
from hir_pipeline.query import Publication
from resources import LakeResource
from spark_jobs.delta_io import latest_version, read_table, replace_run_date
from spark_jobs.publish import MANIFEST_TABLE, WRITE_ORDER, publish
from tests.assets.conftest import RUN_DATE, make_resources
from tests.assets.publish_fixtures import (
    copy_inputs,
    ground_truth,
    kill_when,
    logged_images,
    spawn,
    tag_training_run,
    write_model_tables,
)

D1 = dt.date.fromisoformat(RUN_DATE)
D2 = D1 + dt.timedelta(days=1)


def _materialize(resources, day: dt.date, **kwargs):
    return dg.materialize([publish_tables], partition_key=str(day), resources=resources, **kwargs)


def _metadata(result) -> dict[str, dict]:
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: v.value for k, v in mat.metadata.items()}
    return out


def _assignments(spark, lake: LakeResource, day: dt.date) -> dict[tuple[str, int], int]:
    rows = read_table(spark, lake.path("cluster_assignments")).where(F.col("run_date") == F.lit(day)).collect()
    return {(r.entity_id, r.level): r.cluster_id for r in rows}


@pytest.fixture(scope="module")
def runs(spark, ingested_lake, tiny_source, tmp_path_factory):
    """Materialize D1, D2 (permuted model), then re-run D1; snapshot what each step left behind."""
    root = tmp_path_factory.mktemp("publish") / "lake"
    resources = make_resources(spark, root, tiny_source)
    lake: LakeResource = resources["lake"]
    copy_inputs(spark, ingested_lake["lake"], lake, D1)
    truth = ground_truth(spark, tiny_source)
    state = {"resources": resources, "lake": lake, "truth": truth}
    for key, day, version, permute in (("first", D1, "1", None), ("second", D2, "2", 5)):
        write_model_tables(spark, lake, truth, day, version, permute=permute)
        state[f"run{version}"] = tag_training_run(resources["mlflow"], day, version)
        result = _materialize(resources, day)
        assert result.success
        state[key] = _metadata(result)
    state["a1"], state["a2"] = _assignments(spark, lake, D1), _assignments(spark, lake, D2)
    rerun = _materialize(resources, D1)
    assert rerun.success
    state["rerun"] = _metadata(rerun)
    state["a1_rerun"], state["a2_after"] = _assignments(spark, lake, D1), _assignments(spark, lake, D2)
    return state


@pytest.mark.slow
def test_first_publication_writes_the_four_tables(spark, runs):
    lake, truth, meta = runs["lake"], runs["truth"], runs["first"]
    n = len(truth)
    assert set(meta) == {*OUTPUT_TABLES, MANIFEST_TABLE}
    assert meta[MANIFEST_TABLE]["dagster/row_count"] == 1
    assert meta[MANIFEST_TABLE]["table_versions"] == dict.fromkeys(WRITE_ORDER, 0)
    assert meta["node_embeddings"]["dagster/row_count"] == n
    assert meta["cluster_assignments"]["dagster/row_count"] == 3 * n
    for table in OUTPUT_TABLES:
        assert meta[table]["delta_version"] == 0
        assert meta[table]["model_version"] == "1" and meta[table]["run_date"] == str(D1)
    assert meta["cluster_profiles"]["hierarchy"].startswith("![cluster hierarchy](data:image/png;base64,")
    assert meta["node_embeddings"]["embedding_map"].startswith("![embedding map](data:image/png;base64,")
    assert meta["cluster_assignments"]["previous_run_date"] == "none"

    profiles = read_table(spark, lake.path("cluster_profiles"), version=0).collect()
    by_key = {(r.level, r.cluster_id): r for r in profiles}
    assert [sum(1 for r in profiles if r.level == lvl) for lvl in range(3)] == [4, 16, 64]
    for r in profiles:  # the hierarchy is consistent: every parent is a published cluster one level up
        assert (r.parent_cluster_id is None) == (r.level == 0)
        assert r.level == 0 or (r.level - 1, r.parent_cluster_id) in by_key
    assert all(sum(r.size for r in profiles if r.level == lvl) == n for lvl in range(3))
    # every coarse interest has content members, so a real TF-IDF label and content-only top members
    coarse = [r for r in profiles if r.level == 0]
    assert all(not r.label.startswith("L0-") and len(r.label_terms) == 3 for r in coarse)
    assert all(r.top_members and not any(m.startswith("user") for m in r.top_members) for r in coarse)
    assert len({r.label for r in coarse}) == 4

    # super-graph: each level redistributes exactly the graph's total edge weight
    edges = read_table(spark, lake.path("graph_edges"))
    total = edges.agg(F.sum("weight")).first()[0]
    sg = read_table(spark, lake.path("interest_supergraph"), version=0).groupBy("level").agg(F.sum("weight").alias("w"))
    assert {r.level: pytest.approx(r.w) for r in sg.collect()} == {0: pytest.approx(total),
                                                                   1: pytest.approx(total),
                                                                   2: pytest.approx(total)}
    emb = read_table(spark, lake.path("node_embeddings"), version=0).select(F.aggregate(
        F.transform("embedding", lambda x: x * x), F.lit(0.0).cast("float"), lambda a, b: a + b).alias("n2"))
    assert emb.agg(F.min("n2"), F.max("n2")).first() == pytest.approx((1.0, 1.0), abs=1e-5)


@pytest.mark.slow
def test_rerun_replaces_that_date_only(spark, runs):
    first, second, rerun, lake = runs["first"], runs["second"], runs["rerun"], runs["lake"]
    for table in OUTPUT_TABLES:
        assert rerun[table]["delta_version"] == second[table]["delta_version"] + 1 == 2
        assert rerun[table]["dagster/row_count"] == first[table]["dagster/row_count"]
    # same inputs, same IDs: fresh IDs count only earlier dates, so D2 being published changes nothing for D1
    assert runs["a1_rerun"] == runs["a1"]
    assert runs["a2_after"] == runs["a2"]  # D2's rows are untouched
    for table in OUTPUT_TABLES:  # both dates exactly once
        counts = {r.run_date: r["count"] for r in read_table(spark, lake.path(table)).groupBy("run_date").count()
                  .collect()}
        assert counts == {D1: first[table]["dagster/row_count"], D2: second[table]["dagster/row_count"]}


@pytest.mark.slow
def test_permuted_model_keeps_cluster_ids(spark, runs):
    second, lake = runs["second"], runs["lake"]
    assert runs["a2"] == runs["a1"]
    for table in ("cluster_assignments", "cluster_profiles"):
        assert second[table]["stability"] == {"0": 1.0, "1": 1.0, "2": 1.0}
        assert second[table]["stability_level_2"] == 1.0
        assert second[table]["previous_run_date"] == str(D1)
    assert second["cluster_profiles"]["id_matches"] == {"0": {"overlap": 4}, "1": {"overlap": 16},
                                                        "2": {"overlap": 64}}
    profiles = read_table(spark, lake.path("cluster_profiles"))
    by_day = {d: {(r.level, r.cluster_id): (r.parent_cluster_id, r.label, r.size)
                  for r in profiles.where(F.col("run_date") == F.lit(d)).collect()} for d in (D1, D2)}
    assert by_day[D1] == by_day[D2]
    model_ids = read_table(spark, lake.path("model_outputs")).where(F.col("run_date") == F.lit(D2)) \
        .where(F.col("entity_id") == F.lit(runs["truth"][0][0])).first().cluster_ids
    published = [runs["a2"][(runs["truth"][0][0], lvl)] for lvl in range(3)]
    assert model_ids != published  # the model renumbered its clusters; the publication did not


@pytest.mark.slow
def test_mlflow_lineage(runs):
    from mlflow import MlflowClient

    resources = runs["resources"]
    resources["mlflow"].activate()
    client = MlflowClient()
    run = client.get_run(runs["run2"])
    versions = {t: runs["second"][t]["delta_version"] for t in OUTPUT_TABLES}
    for table in OUTPUT_TABLES:
        assert run.data.tags[f"hir.published.{table}.delta_version"] == str(versions[table])
    assert run.data.tags["hir.published.run_date"] == str(D2)
    assert {run.data.metrics[f"publish.stability.level_{lvl}"] for lvl in range(3)} == {1.0}
    assert run.data.metrics["publish.rows.node_embeddings"] == len(runs["truth"])
    step = run_date_step(D2)
    assert set(logged_images(client, runs["run2"])) == {("publish/cluster_hierarchy", step),
                                                         ("publish/embedding_map", step)}
    inputs = {d.dataset.name: {t.key: t.value for t in d.tags} for d in run.inputs.dataset_inputs}
    assert {f"{t}@v{versions[t]}" for t in OUTPUT_TABLES} <= set(inputs)
    assert all(tags["mlflow.data.context"] == "published" for tags in inputs.values())
    model_version = client.get_model_version(resources["mlflow"].registered_model, "2")
    assert model_version.tags["hir.published.node_embeddings.delta_version"] == str(versions["node_embeddings"])
    # the first training run has the D1 re-run's versions and no stability (nothing earlier to compare with)
    run1 = client.get_run(runs["run1"])
    assert run1.data.tags["hir.published.cluster_profiles.delta_version"] == "2"
    assert not any(k.startswith("publish.stability") for k in run1.data.metrics)


@pytest.mark.slow
def test_query_reads_the_spark_written_publication(runs):
    lake = runs["resources"]["lake"].root
    pub = Publication(lake)
    assert (pub.snapshot.run_date, pub.snapshot.model_version) == (D2, "2")
    assert Publication(lake, as_of=D1).snapshot.model_version == "1"
    product = next(e for e, t, _ in runs["truth"] if t == "product")
    hits = pub.similar(product, type="product", k=5)
    assert len(hits) == 5 and all(h.entity_type == "product" for h in hits)
    # planted structure (coarse centres dominate the embeddings): nearest products share the coarse interest
    coarse = {e: lv[0] for e, _, lv in runs["truth"]}
    assert all(coarse[h.entity_id] == coarse[product] for h in hits)
    view = pub.cluster(0, runs["a2"][(product, 0)])
    assert view.size > 0 and len(view.children) == 4 and view.neighbours


@pytest.mark.slow
def test_missing_model_outputs_fail_clearly(runs):
    result = _materialize(runs["resources"], D2 + dt.timedelta(days=1), raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("publish_tables")
    assert "model_outputs has no rows for run date" in failure.error.message


def test_write_order_is_the_four_tables_and_the_manifest_follows_them():
    assert sorted(WRITE_ORDER) == sorted(OUTPUT_TABLES) and MANIFEST_TABLE not in WRITE_ORDER


@pytest.mark.slow
def test_champion_names_the_published_model_and_an_old_date_never_moves_it_back(runs):
    from mlflow import MlflowClient

    from assets.evaluation_tracking import CHAMPION_ALIAS

    runs["resources"]["mlflow"].activate()
    name = runs["resources"]["mlflow"].registered_model
    # D1 (v1) then D2 (v2) were published, then D1 again: the alias stayed on D2's model
    assert str(MlflowClient().get_model_version_by_alias(name, CHAMPION_ALIAS).version) == "2"
    assert runs["second"]["node_embeddings"]["champion_moved"] is True
    assert runs["rerun"]["node_embeddings"]["champion_moved"] is False


@pytest.mark.slow
def test_publish_refuses_what_is_not_checked_and_gated(spark, runs):
    """Each refusal fails the asset before a table is touched: the previous publication stays current."""
    from mlflow import MlflowClient

    resources, lake = runs["resources"], runs["lake"]
    day = D2 + dt.timedelta(days=7)
    published = (*OUTPUT_TABLES, MANIFEST_TABLE)
    before = {t: latest_version(spark, lake.path(t)) for t in published}

    def refused(message: str) -> None:
        result = _materialize(resources, day, raise_on_error=False)
        assert not result.success and not result.get_asset_materialization_events()
        assert message in result.failure_data_for_node("publish_tables").error.message
        assert {t: latest_version(spark, lake.path(t)) for t in published} == before

    client = MlflowClient()
    name = resources["mlflow"].registered_model
    version = str(max(int(v.version) for v in client.search_model_versions(f"name = '{name}'")) + 1)
    write_model_tables(spark, lake, runs["truth"], day, version)
    refused(f"model version {version} is not registered")  # outputs written, the model never registered
    tag_training_run(resources["mlflow"], day, version, gate=None)
    refused("has not been through the promotion gate: materialize evaluation_report")
    client.set_model_version_tag(name, version, "hir.gate", "failed")
    refused("failed the promotion gate")
    client.set_model_version_tag(name, version, "hir.gate", "passed")
    hierarchy = read_table(spark, lake.path("model_hierarchy")).where(F.col("run_date") == F.lit(day))
    replace_run_date(hierarchy.withColumn("model_version", F.lit("999")).localCheckpoint(),
                     lake.path("model_hierarchy"), day)
    refused("expected one model version shared by the run date's model tables")


@pytest.mark.slow
def test_overridden_gate_may_be_published_and_another_dates_model_is_refused(runs):
    from mlflow import MlflowClient

    from assets.evaluation_tracking import publish_refusal

    resources = runs["resources"]
    resources["mlflow"].activate()
    client, name = MlflowClient(), resources["mlflow"].registered_model
    client.set_model_version_tag(name, "1", "hir.gate", "overridden")
    try:
        assert publish_refusal(client, name, "1", str(D1)) is None
        assert f"was trained for run date {D1}, not {D2}" in publish_refusal(client, name, "1", str(D2))
    finally:
        client.set_model_version_tag(name, "1", "hir.gate", "passed")


#: Child process: the publish run (spark_jobs.publish.publish, the asset's read-build-write) with its own Spark.
PUBLISH_CHILD = """
import datetime as dt, sys
from hir_pipeline.settings import cache_dir
from spark_jobs.publish import publish
from spark_jobs.session import build_spark_session, ensure_delta_jars

root, day = sys.argv[1], dt.date.fromisoformat(sys.argv[2])
spark = build_spark_session(jars=ensure_delta_jars(cache_dir()), master="local[1]", app_name="publish-child",
                            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
publish(spark, lambda table: f"{root}/{table}", day)
"""


@pytest.mark.slow
def test_publish_killed_between_tables_keeps_the_previous_publication(spark, runs, tmp_path):
    """Runs last: re-publish D2 with model v3 in a child process, SIGKILL it right after its first table
    commit, check every table and the query layer, then re-run to completion."""
    lake = runs["lake"]
    before = Publication(lake.root)
    before_versions = {t: latest_version(spark, lake.path(t)) for t in (*OUTPUT_TABLES, MANIFEST_TABLE)}
    some = runs["truth"][0][0]
    before_similar = before.similar(some, k=5)
    write_model_tables(spark, lake, runs["truth"], D2, "3", permute=9)
    first_commit = Path(lake.path(WRITE_ORDER[0])) / "_delta_log" / f"{before_versions[WRITE_ORDER[0]] + 1:020d}.json"
    proc = spawn(["-c", PUBLISH_CHILD, lake.root, str(D2)], tmp_path / "child.log")
    kill_when(proc, first_commit.exists)

    after_versions = {t: latest_version(spark, lake.path(t)) for t in (*OUTPUT_TABLES, MANIFEST_TABLE)}
    assert after_versions[WRITE_ORDER[0]] == before_versions[WRITE_ORDER[0]] + 1  # committed before the kill
    assert after_versions[MANIFEST_TABLE] == before_versions[MANIFEST_TABLE]  # the manifest row was not
    for table in OUTPUT_TABLES:  # every table is whole and readable by both engines at its latest version
        n = read_table(spark, lake.path(table)).count()
        assert n == DeltaTable(lake.path(table)).to_pyarrow_table().num_rows > 0
    # readers still see the previous publication, consistently across tables
    now = Publication(lake.root)
    assert now.snapshot == before.snapshot and now.snapshot.model_version == "2"
    assert now.similar(some, k=5) == before_similar

    publication, written = publish(spark, lake.path, D2)  # the re-run completes
    spark.catalog.clearCache()
    assert {t: v for t, (v, _) in written.items()} == {t: v + 1 for t, v in after_versions.items()}
    done = Publication(lake.root)
    assert done.snapshot.model_version == "3" and done.snapshot.run_date == D2
    assert publication.stable.stability() == {0: 1.0, 1: 1.0, 2: 1.0}
    assert _assignments(spark, lake, D2) == runs["a1"]  # stable IDs through the crash and the re-run
    for table in OUTPUT_TABLES:  # one set of rows per date: the half-done commit was replaced, not added to
        per_day = {r.run_date: r["count"] for r in read_table(spark, lake.path(table)).groupBy("run_date").count()
                   .collect()}
        assert per_day == {D1: runs["first"][table]["dagster/row_count"],
                           D2: runs["second"][table]["dagster/row_count"]}
