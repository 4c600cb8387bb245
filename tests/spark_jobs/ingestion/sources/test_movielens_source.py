"""MovieLens-100k written as a source-contract folder and read back by the generic reader."""

from __future__ import annotations

import csv

import pytest
from pyspark.sql import functions as F

from hir_pipeline.contracts import ENTITY_TYPES, SOURCE_TABLES
from hir_pipeline.data import movielens_files
from hir_pipeline.settings import cache_dir
from spark_jobs.ingestion.reader import read_source
from spark_jobs.ingestion.sources import SUCCESS_MARKER, read_marker
from spark_jobs.ingestion.sources.movielens import write_movielens_source


@pytest.fixture(scope="module")
def ml_files():
    return movielens_files(cache_dir())


@pytest.fixture(scope="module")
def ml_source(spark, ml_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("ml") / "movielens"
    counts = write_movielens_source(spark, ml_files, out)
    return out, counts


def test_counts_match_the_raw_files(ml_source, ml_files):
    out, counts = ml_source
    with open(ml_files["inter"]) as fh:
        ratings = [float(r[2]) for r in list(csv.reader(fh, delimiter="\t"))[1:]]
    assert len(ratings) == 100_000
    assert counts["entities.user"] == 943
    assert counts["entities.product"] == 1682
    assert counts["entities.category"] == 19  # the 18 genres + "unknown"
    assert counts["entities.advertiser"] > 200
    assert counts["events.click"] == 100_000
    assert counts["events.add_to_cart"] == sum(r >= 4 for r in ratings)
    assert counts["events.conversion"] == sum(r == 5 for r in ratings)
    assert counts["events"] == 100_000 + sum(r >= 4 for r in ratings) + sum(r == 5 for r in ratings)
    assert read_marker(out)["counts"] == counts


def test_schema_is_exactly_the_contract(spark, ml_source):
    out, _ = ml_source
    for table, columns in SOURCE_TABLES.items():
        df = spark.read.parquet(str(out / table))
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            (c.name, c.ddl) for c in columns
        ]
    tables = read_source(spark, str(out))  # the lead's generic reader accepts it
    assert set(tables) >= {"entities", "relations", "events"}


def test_references_resolve_and_values_are_sane(spark, ml_source):
    out, _ = ml_source
    ent = spark.read.parquet(str(out / "entities"))
    rel = spark.read.parquet(str(out / "relations"))
    ev = spark.read.parquet(str(out / "events"))
    assert ent.count() == ent.select("entity_id").distinct().count()
    assert ent.where(~F.col("entity_type").isin(*ENTITY_TYPES)).count() == 0
    ids = ent.select("entity_id")
    for col in ("src_id", "dst_id"):
        assert rel.join(ids, rel[col] == ids["entity_id"], "left_anti").count() == 0
    assert {r.relation for r in rel.select("relation").distinct().collect()} == {
        "product_in_category", "advertiser_produces_product"}
    for col in ("user_id", "entity_id"):
        assert ev.join(ids, ev[col] == ids["entity_id"], "left_anti").count() == 0
    assert ev.select("event_id").distinct().count() == ev.count()
    bounds = ev.agg(F.min("event_ts").alias("lo"), F.max("event_ts").alias("hi"),
                    F.min("value").alias("vlo"), F.max("value").alias("vhi")).first()
    assert bounds.lo.year == 1997 and bounds.hi.year == 1998  # ML-100k spans Sep 1997 - Apr 1998
    assert (bounds.vlo, bounds.vhi) == (1.0, 5.0)
    toy = ent.where("entity_id = 'movie:1'").first()
    assert toy.title == "Toy Story" and "Animation" in toy.description and toy.created_at.year == 1995
    # deeper stages only for high ratings
    assert ev.where("event_type = 'conversion' and value < 5").count() == 0
    assert ev.where("event_type = 'add_to_cart' and value < 4").count() == 0


def test_complete_folder_is_a_cache_hit(spark, ml_source, ml_files):
    out, counts = ml_source
    marker = out / SUCCESS_MARKER
    before = marker.stat().st_mtime_ns
    assert write_movielens_source(spark, ml_files, out) == counts
    assert marker.stat().st_mtime_ns == before  # nothing rewritten
    assert not list(out.parent.glob(".movielens.tmp-*"))  # the temp folder was renamed away
