"""Which source the pipeline reads: a folder following the source contract, or a built-in one."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from hir_pipeline.settings import cache_dir

log = logging.getLogger(__name__)

BUILTIN_SOURCES = ("movielens", "synthetic")


class SourceResource(dg.ConfigurableResource):
    """The activity source.

    Args:
        location: ``movielens`` (MovieLens-100k, fetched once into the cache), ``synthetic`` (the seeded
            ad-ecosystem generator) or a folder / URI holding ``entities``, ``relations`` and ``events``.
        synthetic_events: approximate number of impressions the synthetic generator emits.
        synthetic_seed: seed of the synthetic generator.
        synthetic_images: give synthetic products real Fashion-MNIST images (Debian package).
    """

    location: str = "movielens"
    synthetic_events: int = 100_000
    synthetic_seed: int = 7
    synthetic_images: bool = True

    @property
    def name(self) -> str:
        return self.location if self.location in BUILTIN_SOURCES else "folder"

    def prepare(self, spark: SparkSession) -> str:
        """Return the folder to read, writing a built-in source into the cache the first time."""
        if self.location == "movielens":
            return str(self._movielens(spark))
        if self.location == "synthetic":
            return str(self._synthetic(spark))
        return self.location

    def _movielens(self, spark: SparkSession) -> Path:
        from hir_pipeline.data.fetch import movielens_files
        from spark_jobs.sources.movielens import write_movielens_source

        out = cache_dir() / "sources" / "movielens"
        write_movielens_source(spark, movielens_files(cache_dir()), out)
        return out

    def _synthetic(self, spark: SparkSession) -> Path:
        from hir_pipeline.data.fetch import fetch_fashion_mnist
        from spark_jobs.sources.synthetic import SyntheticConfig, write_synthetic_source

        config = SyntheticConfig(seed=self.synthetic_seed, n_events=self.synthetic_events)
        images = None
        if self.synthetic_images:
            try:
                images = fetch_fashion_mnist(cache_dir())
            except Exception as exc:  # the generator still works without pictures
                log.warning("Fashion-MNIST images unavailable (%s); synthetic products get no image_uri", exc)
        suffix = "img" if images is not None else "noimg"
        out = cache_dir() / "sources" / f"synthetic-{self.synthetic_seed}-{self.synthetic_events}-{suffix}"
        write_synthetic_source(spark, config, out, images)
        return out
