"""Publish, I/O: read a run date's inputs from the lake, write the four tables and the manifest, one publish run.

Every table is replaced for the run date in one Delta commit; the ``publications`` manifest row that records the
four tables' Delta versions is written last (:func:`write_publications_row`), so readers resolving a publication
through it never see one that was cut short.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hir_pipeline.contracts import MANIFEST_TABLE, OUTPUT_TABLES, PUBLICATIONS_DDL
from spark_jobs.delta_io import MissingInput, read_run_date, read_table, replace_run_date, table_exists
from spark_jobs.publish.matching import next_cluster_ids, previous_run_date
from spark_jobs.publish.transform import PublicationFrames, PublishInputs, PublishSettings, build_publication

#: The four tables, in the order a publish run writes them; the manifest (:data:`MANIFEST_TABLE`) follows them.
WRITE_ORDER = ("cluster_assignments", "interest_supergraph", "cluster_profiles", "node_embeddings")


def write_publication_table(df: DataFrame, path: str, day: dt.date, model_version: str) -> None:
    """Replace the ``run_date = day`` partition of one published table in a single Delta commit.

    The commit's ``userMetadata`` records ``{"run_date", "model_version"}`` (``DESCRIBE HISTORY``).
    """
    replace_run_date(df, path, day, {"model_version": model_version})


def write_publications_row(spark: SparkSession, path: str, run_date: dt.date, model_version: str,
                           versions: Mapping[str, int]) -> int:
    """Record a publication in the manifest: replace ``run_date``'s row in one Delta commit.

    Written after the four tables, it is what makes their rows a publication: readers resolve through it and read
    each table at the version recorded here, so nothing written after it (a re-run cut short) is seen.

    Args:
        spark: the session.
        path: the manifest's Delta path (table :data:`MANIFEST_TABLE`).
        run_date: the publication's run date.
        model_version: the published model version.
        versions: output table -> Delta version holding the publication's rows (all four tables).

    Returns:
        The manifest's Delta version after the write.
    """
    row = (run_date, model_version, *(int(versions[t]) for t in OUTPUT_TABLES), dt.datetime.now(dt.UTC))
    replace_run_date(spark.createDataFrame([row], PUBLICATIONS_DDL), path, run_date, {"model_version": model_version})
    return last_commit(spark, path)[0]


def last_commit(spark: SparkSession, path: str) -> tuple[int, int]:
    """(version, rows written) of the table's latest commit, from the Delta history (no re-read of the data)."""
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(1).select("version", "operationMetrics").first()
    return int(row["version"]), int((row["operationMetrics"] or {}).get("numOutputRows", 0))


# --- one publish run: read the lake, build, write in order ----------------------------------------


def read_inputs(spark: SparkSession, path: Callable[[str], str], run_date: dt.date) -> PublishInputs:
    """Read what :func:`build_publication` needs from the lake.

    Args:
        spark: the session.
        path: table name -> Delta path (``LakeResource.path``).
        run_date: the run date being published.

    Raises:
        MissingInput: the model did not run for ``run_date``, or there is no graph snapshot on or before it.
    """

    def on(df: DataFrame, day: dt.date) -> DataFrame:
        return df.where(F.col("run_date") == F.lit(day))

    model: dict[str, DataFrame] = {}
    for table in ("model_outputs", "model_hierarchy"):
        if not table_exists(spark, path(table)):
            raise MissingInput(f"{table} does not exist: materialize interest_model for {run_date} first")
        model[table] = on(read_table(spark, path(table)), run_date)
    top = model["model_hierarchy"].agg(F.max("level")).first()[0]
    if top is None or model["model_outputs"].isEmpty():
        raise MissingInput(f"model_outputs has no rows for run date {run_date}: "
                           f"materialize interest_model for {run_date} first")
    n_levels = int(top) + 1
    if not table_exists(spark, path("graph_edges")):
        raise MissingInput(f"graph_edges does not exist: materialize graph_edges for {run_date} first")
    edges = read_table(spark, path("graph_edges"))
    edges_date = edges.where(F.col("run_date") <= F.lit(run_date)).agg(F.max("run_date")).first()[0]
    if edges_date is None:
        raise MissingInput(f"graph_edges has no snapshot on or before {run_date}")
    prev_a = prev_p = prev_date = None
    next_ids = [0] * n_levels
    if table_exists(spark, path("cluster_assignments")) and table_exists(spark, path("cluster_profiles")):
        profiles = read_table(spark, path("cluster_profiles"))
        prev_date = previous_run_date(profiles, run_date)
        next_ids = next_cluster_ids(profiles, run_date, n_levels)
        if prev_date is not None:
            prev_a = on(read_table(spark, path("cluster_assignments")), prev_date)
            prev_p = on(profiles, prev_date)
    return PublishInputs(model_outputs=model["model_outputs"], model_hierarchy=model["model_hierarchy"],
                         entities=read_table(spark, path("entities")), edges=on(edges, edges_date),
                         previous_assignments=prev_a, previous_profiles=prev_p, previous_date=prev_date,
                         next_ids=next_ids, n_levels=n_levels, edges_date=edges_date)


def write_publication(spark: SparkSession, publication: PublicationFrames, path: Callable[[str], str],
                      run_date: dt.date, on_written: Callable[[str, int, int], None] | None = None
                      ) -> dict[str, tuple[int, int]]:
    """Write the four tables in :data:`WRITE_ORDER`, one Delta commit each, then the manifest row recording them.

    Args:
        spark: the session.
        publication: from :func:`build_publication`.
        path: table name -> Delta path.
        run_date: the partition replaced.
        on_written: called with ``(table, delta_version, rows)`` after each commit (progress logging).

    Returns:
        table -> (Delta version, rows written), for the four tables and :data:`MANIFEST_TABLE` (one row).
    """
    written: dict[str, tuple[int, int]] = {}

    def done(table: str, version_rows: tuple[int, int]) -> None:
        written[table] = version_rows
        if on_written is not None:
            on_written(table, *version_rows)

    for table in WRITE_ORDER:
        write_publication_table(publication.tables[table], path(table), run_date, publication.model_version)
        done(table, last_commit(spark, path(table)))
    versions = {t: v for t, (v, _) in written.items()}
    done(MANIFEST_TABLE, (write_publications_row(spark, path(MANIFEST_TABLE), run_date, publication.model_version,
                                                 versions), 1))
    return written


def publish(spark: SparkSession, path: Callable[[str], str], run_date: dt.date,
            settings: PublishSettings | None = None) -> tuple[PublicationFrames, dict[str, tuple[int, int]]]:
    """One publish run without Dagster or MLflow: read, build, write (what the publish asset does first)."""
    publication = build_publication(spark, read_inputs(spark, path, run_date), run_date, settings)
    return publication, write_publication(spark, publication, path, run_date)


def read_picture_data(spark: SparkSession, path: Callable[[str], str], run_date: dt.date, map_points: int
                      ) -> tuple[list, list]:
    """What the publication's pictures are drawn from, read back from the tables just written.

    Args:
        spark: the session.
        path: table name -> Delta path.
        run_date: the publication's run date.
        map_points: most embeddings sampled for the 2-D map (a deterministic hash sample).

    Returns:
        ``(profiles, sample)``: ``cluster_profiles`` rows (``level, cluster_id, parent_cluster_id, size, label``)
        and up to ``map_points`` rows ``entity_id, embedding, cluster_id`` (coarsest-level cluster).
    """
    profiles = read_run_date(spark, path("cluster_profiles"), run_date) \
        .select("level", "cluster_id", "parent_cluster_id", "size", "label").collect()
    coarse = read_run_date(spark, path("cluster_assignments"), run_date).where(F.col("level") == 0) \
        .select("entity_id", "cluster_id")
    sample = (
        read_run_date(spark, path("node_embeddings"), run_date).select("entity_id", "embedding")
        .join(coarse, "entity_id").orderBy(F.xxhash64("entity_id"), "entity_id").limit(map_points).collect()
    )
    return profiles, sample
