"""Which source a run reads: a built-in one (written into the cache the first time) or a folder.

Everything that differs between sources is decided here, so no stage of the pipeline branches on a source's
name: where its contract folder is (:meth:`SourceSpec.prepare`) and whether it carries the planted interest
hierarchy it was generated from, to score clusters against (:meth:`SourceSpec.ground_truth`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from hir_pipeline.evaluation.label_purity import InterestVocabulary
from hir_pipeline.settings import cache_dir

log = logging.getLogger(__name__)

#: Names of the built-in sources; any other location is a folder (or URI) following the source contract.
BUILTIN_SOURCES = ("movielens", "synthetic")
#: Built-in sources generated from a planted hierarchy (written beside their tables as ``ground_truth``).
PLANTED_HIERARCHY = {"movielens": False, "synthetic": True}
#: The optional table of a source folder that holds the planted hierarchy.
GROUND_TRUTH_TABLE = "ground_truth"


@dataclass(frozen=True)
class SourceSpec:
    """The activity source.

    Args:
        location: ``movielens`` (MovieLens-100k, fetched once into the cache), ``synthetic`` (the seeded
            ad-ecosystem generator) or a folder / URI holding ``entities``, ``relations`` and ``events``.
        synthetic_events: approximate number of impressions the synthetic generator emits.
        synthetic_seed: seed of the synthetic generator.
        synthetic_images: give synthetic products real Fashion-MNIST images (Debian package).
        source_id: the name a lake records this source under (``spark_jobs.ingestion.lake_source``); ``None``: the
            built-in source's name, or the folder's absolute URI. Successive exports of one source delivered in
            different folders (``/exports/2024-06-30``, ``/exports/2024-07-01``) share one ``source_id``, so the
            lake takes them as the same source.
    """

    location: str = "movielens"
    synthetic_events: int = 100_000
    synthetic_seed: int = 7
    synthetic_images: bool = True
    source_id: str | None = None

    @property
    def name(self) -> str:
        """The built-in source's name, or ``folder``."""
        return self.location if self.location in BUILTIN_SOURCES else "folder"

    @property
    def identity(self) -> str:
        """What a lake records of the source it was built from (``spark_jobs.ingestion.lake_source``): a built-in
        source's name (with the synthetic generator's seed and size), or the folder as an absolute URI, unless
        ``source_id`` names it."""
        if self.source_id:
            return self.source_id
        if self.location == "synthetic":
            return f"synthetic(seed={self.synthetic_seed}, events={self.synthetic_events})"
        if self.location in BUILTIN_SOURCES:
            return self.location
        if "://" in self.location:
            return self.location.rstrip("/")
        return Path(self.location).expanduser().resolve().as_uri()

    def prepare(self, spark: SparkSession) -> str:
        """The folder to read, writing a built-in source into the cache the first time."""
        if self.location == "movielens":
            return str(self._movielens(spark))
        if self.location == "synthetic":
            return str(self._synthetic(spark))
        return self.location

    def ground_truth(self, spark: SparkSession) -> dict[str, dict[str, int | None]] | None:
        """The planted hierarchy the source was generated from, or ``None`` when it has none.

        A built-in source without one is not even prepared for the question; a folder has one when it holds a
        ``ground_truth`` table.

        Returns:
            ``entity_id -> {"level0": .., "level1": .., "level2": ..}`` (``None`` where a level does not apply).
        """
        if not PLANTED_HIERARCHY.get(self.name, True):
            return None
        return read_ground_truth(spark, self.prepare(spark))

    def interest_vocabularies(self, spark: SparkSession) -> dict[int, InterestVocabulary] | None:
        """The planted fine interests' vocabularies (to score cluster labels against), or ``None`` when unknown.

        Known for a source made by the synthetic generator (built in, or a folder it wrote): derived from the
        generator settings in the folder's marker
        (:func:`~spark_jobs.ingestion.sources.synthetic.interest_vocabularies`).

        Args:
            spark: the session (prepares a built-in source the first time).
        """
        if not PLANTED_HIERARCHY.get(self.name, True):
            return None
        from spark_jobs.ingestion.sources.synthetic import read_interest_vocabularies

        return read_interest_vocabularies(self.prepare(spark))

    def _movielens(self, spark: SparkSession) -> Path:
        from hir_pipeline.data.fetch import movielens_files
        from spark_jobs.ingestion.sources.movielens import write_movielens_source

        out = cache_dir() / "sources" / "movielens"
        write_movielens_source(spark, movielens_files(cache_dir()), out)
        return out

    def _synthetic(self, spark: SparkSession) -> Path:
        from hir_pipeline.data.fetch import fetch_fashion_mnist
        from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source

        config = SyntheticConfig(seed=self.synthetic_seed, n_events=self.synthetic_events)
        images = None
        if self.synthetic_images:
            try:
                images = fetch_fashion_mnist(cache_dir())
            except Exception as exc:  # the generator still works without pictures
                log.warning("Fashion-MNIST images unavailable (%s); synthetic products get no image_uri", exc)
        suffix = ("img" if images is not None else "noimg") + ("-video" if config.video_share > 0 else "")
        out = cache_dir() / "sources" / f"synthetic-{self.synthetic_seed}-{self.synthetic_events}-{suffix}"
        write_synthetic_source(spark, config, out, images)
        return out


def read_ground_truth(spark: SparkSession, folder: str | None) -> dict[str, dict[str, int | None]] | None:
    """The planted hierarchy beside a source (``<folder>/ground_truth``), or ``None`` when absent.

    Args:
        spark: the session.
        folder: the source folder (:meth:`SourceSpec.prepare`), or ``None``.

    Returns:
        ``entity_id -> {"level0": .., "level1": .., "level2": ..}`` (``None`` where a level does not apply).
    """
    if folder is None:
        return None
    try:
        df = spark.read.parquet(f"{str(folder).rstrip('/')}/{GROUND_TRUTH_TABLE}")
    except Exception:  # no planted hierarchy to score against
        return None
    levels = [c for c in ("level0", "level1", "level2") if c in df.columns]
    table = df.select("entity_id", *levels).toArrow()
    ids = table.column("entity_id").to_pylist()
    cols = {c: table.column(c).to_pylist() for c in levels}
    return {e: {c: cols[c][i] for c in levels} for i, e in enumerate(ids)}
