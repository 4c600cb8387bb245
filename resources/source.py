"""Which source the pipeline reads: a folder following the source contract, or a built-in one.

The resource only carries the settings; what differs between sources is
:class:`spark_jobs.ingestion.sources.spec.SourceSpec`.
"""

from __future__ import annotations

import dagster as dg
from pyspark.sql import SparkSession

from spark_jobs.ingestion.sources.spec import BUILTIN_SOURCES, SourceSpec

__all__ = ["BUILTIN_SOURCES", "SourceResource"]

_S = SourceSpec()


class SourceResource(dg.ConfigurableResource):
    """The activity source.

    Args:
        location: ``movielens`` (MovieLens-100k, fetched once into the cache), ``synthetic`` (the seeded
            ad-ecosystem generator) or a folder / URI holding ``entities``, ``relations`` and ``events``.
        synthetic_events: approximate number of impressions the synthetic generator emits.
        synthetic_seed: seed of the synthetic generator.
        synthetic_images: give synthetic products real Fashion-MNIST images (Debian package).
    """

    location: str = _S.location
    synthetic_events: int = _S.synthetic_events
    synthetic_seed: int = _S.synthetic_seed
    synthetic_images: bool = _S.synthetic_images

    def spec(self) -> SourceSpec:
        """The source these settings name."""
        return SourceSpec(location=self.location, synthetic_events=self.synthetic_events,
                          synthetic_seed=self.synthetic_seed, synthetic_images=self.synthetic_images)

    @property
    def name(self) -> str:
        return self.spec().name

    def prepare(self, spark: SparkSession) -> str:
        """Return the folder to read, writing a built-in source into the cache the first time."""
        return self.spec().prepare(spark)

    def ground_truth(self, spark: SparkSession) -> dict[str, dict[str, int | None]] | None:
        """The planted hierarchy the source was generated from, or ``None`` (:meth:`SourceSpec.ground_truth`)."""
        return self.spec().ground_truth(spark)
