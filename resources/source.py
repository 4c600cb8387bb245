"""Which source the pipeline reads: a folder following the source contract, or a built-in one.

The resource only carries the settings; what differs between sources is
:class:`spark_jobs.ingestion.sources.spec.SourceSpec`.
"""

from __future__ import annotations

import dagster as dg
from pyspark.sql import SparkSession

from hir_pipeline.evaluation.label_purity import InterestVocabulary
from resources.config_schema import config_class
from spark_jobs.ingestion.sources.spec import BUILTIN_SOURCES, SourceSpec

__all__ = ["BUILTIN_SOURCES", "SourceResource"]


class SourceResource(config_class(SourceSpec, base=dg.ConfigurableResource, name="SourceSettings")):
    """The activity source: the fields of :class:`spark_jobs.ingestion.sources.spec.SourceSpec`, derived from it
    (defaults, descriptions and validation are that class's)."""

    def spec(self) -> SourceSpec:
        """The source these settings name."""
        return self.to_dataclass()

    @property
    def name(self) -> str:
        return self.spec().name

    def prepare(self, spark: SparkSession) -> str:
        """Return the folder to read, writing a built-in source into the cache the first time."""
        return self.spec().prepare(spark)

    def ground_truth(self, spark: SparkSession) -> dict[str, dict[str, int | None]] | None:
        """The planted hierarchy the source was generated from, or ``None`` (:meth:`SourceSpec.ground_truth`)."""
        return self.spec().ground_truth(spark)

    def interest_vocabularies(self, spark: SparkSession) -> dict[int, InterestVocabulary] | None:
        """The planted fine interests' vocabularies, or ``None`` (:meth:`SourceSpec.interest_vocabularies`)."""
        return self.spec().interest_vocabularies(spark)
