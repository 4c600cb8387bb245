"""What differs between sources is decided by SourceSpec: folder, name and the planted hierarchy."""

from __future__ import annotations

from resources import SourceResource
from spark_jobs.ingestion.sources.spec import SourceSpec


def test_ground_truth_of_a_folder_is_read_when_present(spark, tmp_path):
    with_truth, without = tmp_path / "with", tmp_path / "without"
    spark.createDataFrame([("p1", "product", 0, 1, 5), ("u1", "user", 1, None, None)],
                          "entity_id string, entity_type string, level0 int, level1 int, level2 int") \
        .write.parquet(str(with_truth / "ground_truth"))
    without.mkdir()
    spec = SourceSpec(location=str(with_truth))
    assert spec.name == "folder" and spec.prepare(spark) == str(with_truth)
    assert spec.ground_truth(spark) == {"p1": {"level0": 0, "level1": 1, "level2": 5},
                                        "u1": {"level0": 1, "level1": None, "level2": None}}
    assert SourceSpec(location=str(without)).ground_truth(spark) is None
    assert spec.interest_vocabularies(spark) is None  # no synthetic generator settings in the folder


def test_movielens_has_no_planted_hierarchy_and_is_not_prepared_for_it(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("HIR_CACHE_DIR", str(tmp_path / "empty-cache"))  # preparing MovieLens would fetch into it
    assert SourceSpec(location="movielens").ground_truth(spark) is None
    assert SourceSpec(location="movielens").interest_vocabularies(spark) is None
    assert not (tmp_path / "empty-cache").exists()


def test_resource_names_the_same_source():
    resource = SourceResource(location="synthetic", synthetic_events=500, synthetic_seed=3)
    assert resource.spec() == SourceSpec(location="synthetic", synthetic_events=500, synthetic_seed=3)
    assert resource.name == "synthetic" and SourceResource().spec() == SourceSpec()
