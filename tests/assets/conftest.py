"""Fixtures for asset tests: a tiny synthetic source, a temporary lake and real Dagster resources.

``ingested_lake`` materializes the real ingestion assets once per test session (window ``all``, as a
backfill does) so that downstream asset tests start from real bronze Delta tables.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from resources import (
    GraphSettingsResource,
    LakeResource,
    MLflowResource,
    ModelSettingsResource,
    SourceResource,
    SparkResource,
)
from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source

#: Small enough for seconds-long Spark jobs, big enough for every entity type and funnel stage.
TINY_SOURCE = SyntheticConfig(seed=11, n_events=6_000, n_products=160, n_advertisers=16, days=6,
                              end_date=dt.date(2024, 6, 30))
RUN_DATE = TINY_SOURCE.end_date.isoformat()


@pytest.fixture(scope="session")
def tiny_source(spark, tmp_path_factory) -> Path:
    """A synthetic source folder (no images: asset tests that need them build their own)."""
    out = tmp_path_factory.mktemp("sources") / "tiny"
    write_synthetic_source(spark, TINY_SOURCE, out)
    return out


#: A small spectral structure embedding (8 dimensions, 3 power iterations): the defaults' code path at a fraction of
#: their Spark jobs on test-sized graphs (tests/spark_jobs/graph/test_spectral.py tests the algorithm itself).
SMALL_STRUCTURE = {"structure_dim": 8, "structure_power_iterations": 3}


def make_resources(spark, lake_root: Path, source: str | Path, mlflow_dir: Path | None = None,
                   graph: GraphSettingsResource | None = None, model: ModelSettingsResource | None = None,
                   source_id: str | None = None) -> dict:
    """Real resources over a temporary lake; the Spark resource reuses the test session.

    ``graph`` / ``model``: the graph / model settings (default: the production defaults, with the
    :data:`SMALL_STRUCTURE` embedding). ``source_id``: the source's name in the lake (a later export of a source in
    another folder names the first one's).
    """
    mlflow_dir = mlflow_dir or lake_root.parent / "mlflow"
    mlflow_dir.mkdir(parents=True, exist_ok=True)
    return {
        "spark": SparkResource(master=spark.sparkContext.master),
        "lake": LakeResource(root=str(lake_root)),
        "mlflow": MLflowResource(tracking_uri=f"sqlite:///{mlflow_dir / 'mlflow.db'}",
                                 artifact_location=(mlflow_dir / "artifacts").as_uri()),
        "source": SourceResource(location=str(source), source_id=source_id),
        "graph_settings": graph or GraphSettingsResource(**SMALL_STRUCTURE),
        "model_settings": model or ModelSettingsResource(),
    }


def ingestion_run_config(window: str = "all") -> dg.RunConfig:
    return dg.RunConfig(ops={"bronze_tables": {"config": {"window": window}}})


@pytest.fixture(scope="session")
def ingested_lake(spark, tiny_source, tmp_path_factory) -> dict:
    """A lake holding the bronze tables of ``tiny_source`` as of :data:`RUN_DATE`; returns resources."""
    from assets.ingestion import bronze_tables

    root = tmp_path_factory.mktemp("lake") / "lake"
    resources = make_resources(spark, root, tiny_source)
    result = dg.materialize([bronze_tables], partition_key=RUN_DATE, resources=resources,
                            run_config=ingestion_run_config("all"))
    assert result.success
    return resources
