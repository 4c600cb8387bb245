"""Whole-source problems stop with one clear line naming the table and column."""

from __future__ import annotations

import pytest

from spark_jobs.source_reader import RAW_COLUMN, SourceError, read_source


def _write(spark, root, entities_ddl="entity_id string, entity_type string",
           entities_rows=(("u1", "user"),)):
    spark.createDataFrame(list(entities_rows), entities_ddl).write.parquet(str(root / "entities"))
    spark.createDataFrame([("u1", "u1", "x")], "src_id string, dst_id string, relation string") \
        .write.parquet(str(root / "relations"))
    spark.createDataFrame(
        [("u1", "p1", "click", "2024-01-01 00:00:00", "extra")],
        "user_id string, entity_id string, event_type string, event_ts string, something string",
    ).write.format("delta").save(str(root / "events"))


def test_reads_parquet_and_delta_with_defaults(spark, tmp_path):
    _write(spark, tmp_path)
    tables = read_source(spark, str(tmp_path))
    assert set(tables) == {"entities", "relations", "events"}
    ev = tables["events"]
    assert "something" not in ev.columns and "value" in ev.columns and "event_id" in ev.columns
    row = ev.first()
    assert row["value"] is None and '"something":"extra"' in row[RAW_COLUMN]


def test_missing_folder(spark, tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        read_source(spark, str(tmp_path / "nope"))


def test_missing_table(spark, tmp_path):
    _write(spark, tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "relations")
    with pytest.raises(SourceError, match="missing table 'relations'"):
        read_source(spark, str(tmp_path))


def test_wrong_type_names_table_and_column(spark, tmp_path):
    _write(spark, tmp_path, "entity_id long, entity_type string", ((1, "user"),))
    with pytest.raises(SourceError, match=r"^entities\.entity_id: expected string, found long$"):
        read_source(spark, str(tmp_path))


def test_missing_required_column(spark, tmp_path):
    _write(spark, tmp_path, "entity_id string", (("u1",),))
    with pytest.raises(SourceError, match=r"entities\.entity_type: required column is missing"):
        read_source(spark, str(tmp_path))
