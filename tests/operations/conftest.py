"""Fixtures of the operations tests: a very small synthetic source and the services' set-up.

The operations tests start real services (Dagster webserver and daemon, Chromium, PostgreSQL, a Spark standalone
cluster); each of them runs the pipeline in other processes, so the source is kept to a few thousand rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source

#: Every entity type and funnel stage, in seconds-long Spark jobs: 64 fine interests need 64 products and
#: 16 advertisers x 4 campaigns.
OPS_SOURCE = SyntheticConfig(seed=5, n_events=1_500, n_products=64, n_advertisers=16, days=3,
                             end_date=dt.date(2024, 6, 30))
RUN_DATE = OPS_SOURCE.end_date.isoformat()


@pytest.fixture(scope="session")
def ops_source(spark, tmp_path_factory) -> Path:
    """A synthetic source folder following the source contract (no images)."""
    out = tmp_path_factory.mktemp("ops-source") / "source"
    write_synthetic_source(spark, OPS_SOURCE, out)
    return out
