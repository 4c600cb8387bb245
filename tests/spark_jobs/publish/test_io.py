"""The publications manifest written by a publish run: last commit, the four versions, one row per run date, and
the one-join Spark SQL reader of docs/querying.md (run from the document's own text)."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

import spark_jobs.publish.io as publish_io
from hir_pipeline.contracts import OUTPUT_SCHEMAS
from hir_pipeline.settings import project_root
from spark_jobs.delta_io import read_run_date, read_table
from spark_jobs.publish import MANIFEST_TABLE, WRITE_ORDER, write_publication
from tests.publications import D1, D2, frames, publish

#: The manifest's schema as the output contract fixes it (deltalake's names for the types).
SCHEMA = [("run_date", "date"), ("model_version", "string"), ("node_embeddings_version", "long"),
          ("cluster_assignments_version", "long"), ("interest_supergraph_version", "long"),
          ("cluster_profiles_version", "long"), ("published_at", "timestamp")]


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """Publish D1 (model 1), D2 (model 2), then re-publish D1 (model 3); what each run wrote, in which order."""
    lake = tmp_path_factory.mktemp("manifest") / "lake"
    state: dict = {"lake": lake, "order": [], "written": [], "started": dt.datetime.now(dt.UTC)}
    for day, version in ((D1, "1"), (D2, "2"), (D1, "3")):
        state["written"].append(write_publication(spark, frames(spark, day, version), lambda t: str(lake / t), day,
                                                  lambda t, v, n: state["order"].append(t)))
    state["finished"] = dt.datetime.now(dt.UTC)
    return state


def _manifest(lake) -> list[dict]:
    return sorted(DeltaTable(str(lake / MANIFEST_TABLE)).to_pyarrow_table().to_pylist(), key=lambda r: r["run_date"])


def _commit_ms(path) -> int:
    return DeltaTable(str(path)).history(1)[0]["timestamp"]


@pytest.mark.slow
def test_the_manifest_is_the_last_commit_and_records_the_four_versions(spark, runs):
    lake, first = runs["lake"], runs["written"][0]
    assert runs["order"] == [*WRITE_ORDER, MANIFEST_TABLE] * 3
    assert {t: v for t, (v, _) in first.items()} == {t: 0 for t in (*WRITE_ORDER, MANIFEST_TABLE)}
    assert first["node_embeddings"][1] == 7 and first[MANIFEST_TABLE][1] == 1  # (version, rows written)
    manifest = DeltaTable(str(lake / MANIFEST_TABLE))
    assert [(f.name, f.type.type) for f in manifest.schema().fields] == SCHEMA
    assert manifest.metadata().partition_columns == ["run_date"]
    # after the last run: its manifest commit is the newest commit of the whole publication
    assert _commit_ms(lake / MANIFEST_TABLE) >= max(_commit_ms(lake / t) for t in WRITE_ORDER)
    rows = {r["run_date"]: r for r in _manifest(lake)}
    assert {t: rows[D2][f"{t}_version"] for t in WRITE_ORDER} == {t: v for t, (v, _) in runs["written"][1].items()
                                                                  if t != MANIFEST_TABLE}
    assert all(runs["started"] <= r["published_at"] <= runs["finished"] for r in rows.values())  # UTC wall clock
    assert read_table(spark, str(lake / MANIFEST_TABLE)).count() == 2  # and Spark reads what deltalake reads


@pytest.mark.slow
def test_republishing_a_date_replaces_its_row_in_one_commit(runs):
    lake, rerun = runs["lake"], runs["written"][2]
    assert rerun[MANIFEST_TABLE][0] == 2 and DeltaTable(str(lake / MANIFEST_TABLE)).version() == 2
    rows = _manifest(lake)
    assert [(r["run_date"], r["model_version"]) for r in rows] == [(D1, "3"), (D2, "2")]  # one row per date
    assert {t: rows[0][f"{t}_version"] for t in WRITE_ORDER} == {t: 2 for t in WRITE_ORDER}
    assert {t: rows[1][f"{t}_version"] for t in WRITE_ORDER} == {t: 1 for t in WRITE_ORDER}


def documented_sql(first_line: str) -> str:
    """The ```sql block of docs/querying.md that starts with ``first_line`` (so the test runs what the doc says)."""
    blocks = re.findall(r"```sql\n(.*?)```", (project_root() / "docs" / "querying.md").read_text(), re.S)
    return next(b for b in blocks if b.startswith(first_line))


def one_join(spark, lake: Path) -> dict:
    sql = documented_sql("-- node_embeddings of the latest publication").replace("/data/lake", str(lake))
    return {r.entity_id: r for r in spark.sql(sql).collect()}


def test_the_documented_one_join_reads_tables_and_columns_the_contract_fixes():
    """What the slow tests run from docs/querying.md names the manifest and a published table by their contract
    names and joins on columns both have, and the manifest's contract is the schema checked above."""
    sql = documented_sql("-- node_embeddings of the latest publication")
    assert set(re.findall(r"delta\.`/data/lake/(\w+)`", sql)) == {"node_embeddings", MANIFEST_TABLE}
    columns = {t: {c.name for c in OUTPUT_SCHEMAS[t]} for t in ("node_embeddings", MANIFEST_TABLE)}
    (manifest_columns,) = re.findall(rf"SELECT ([\w, ]+) FROM delta\.`/data/lake/{MANIFEST_TABLE}`", sql)
    p_columns = {c.strip() for c in manifest_columns.split(",")}
    assert p_columns <= columns[MANIFEST_TABLE]
    joined = re.findall(r"\b([ep])\.(\w+)\b", sql)
    assert {c for a, c in joined if a == "e"} <= columns["node_embeddings"]
    assert {c for a, c in joined if a == "p"} <= p_columns and len(joined) == 4
    assert [(c.name, c.ddl) for c in OUTPUT_SCHEMAS[MANIFEST_TABLE]] == [
        (n, {"long": "bigint"}.get(t, t)) for n, t in SCHEMA]
    assert set(WRITE_ORDER) | {MANIFEST_TABLE} == set(OUTPUT_SCHEMAS)


@pytest.mark.slow
def test_the_documented_one_join_reads_exactly_the_latest_publication(spark, runs):
    """D1 was re-published last, but D2 is the latest run date: the join returns D2's rows by model 2."""
    expected = {r.entity_id: r for r in read_run_date(spark, str(runs["lake"] / "node_embeddings"), D2).collect()}
    assert {(r.run_date, r.model_version) for r in expected.values()} == {(D2, "2")} and len(expected) == 7
    assert one_join(spark, runs["lake"]) == expected


@pytest.mark.slow
def test_the_one_join_ignores_a_publish_killed_before_its_manifest_row(spark, runs, tmp_path, monkeypatch):
    lake = shutil.copytree(runs["lake"], tmp_path / "lake")
    before = one_join(spark, lake)

    def killed(*args, **kwargs):
        raise RuntimeError("killed before the manifest write")

    monkeypatch.setattr(publish_io, "write_publications_row", killed)
    later = D2 + dt.timedelta(days=1)
    with pytest.raises(RuntimeError, match="killed before the manifest"):
        publish(spark, lake, later, "4")
    assert read_run_date(spark, str(lake / "node_embeddings"), later).count() == 7  # the tables were written
    assert one_join(spark, lake) == before
