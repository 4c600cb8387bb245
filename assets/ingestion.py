"""Ingestion: a source following the contract -> bronze Delta tables + quarantine.

One Spark pass labels every row; accepted rows land in ``entities`` / ``relations`` (merged by key; a row last
changed by a later run date than this run's is kept, so re-running an old date never brings back an older row)
and ``events`` (daily Delta partitions by ``event_date``, replaced on re-run); everything else lands
in ``quarantine`` with its reason and raw row, so nothing is lost and nothing is fatal.

The run log names, per table, the run date, the rows written and the Delta version written; every Spark step
(labelling and writing each table, the accounting re-count, each Great Expectations suite) logs its progress.
"""


import datetime as dt
from typing import Literal

import dagster as dg
from pydantic import Field
from pyspark.sql import DataFrame

from assets.bronze_suites import bronze_suites
from assets.partitions import daily_partitions, run_date
from assets.progress import spark_progress
from assets.quality import validate
from assets.write_audit import WriteAudit
from hir_pipeline.contracts import EVENT_DATE_COLUMN
from resources import GraphSettingsResource, LakeResource, SourceResource, SparkResource
from resources.config_schema import config_class
from spark_jobs.delta_io import read_table, replace_run_date, replace_where, table_exists, upsert
from spark_jobs.ingestion import labels
from spark_jobs.ingestion.lake_source import record_source, refuse_other_source
from spark_jobs.ingestion.reader import read_source

GROUP = "ingestion"
BRONZE = ("entities", "relations", "events")
ACCOUNTING_CHECK = "accepted_plus_quarantined_equals_read"
SUITE_CHECK = "great_expectations_suite"


class IngestionConfig(config_class(labels.IngestConfig, name="IngestFields")):
    """How much of the source a run ingests, and what it accepts (the fields of
    :class:`spark_jobs.ingestion.labels.IngestConfig`; the accepted event types are the funnel of the ``graph_settings``
    resource, shared with every later stage)."""

    window: Literal["day", "all"] = Field("day", description="`day` reads the partition's day of events (the "
                                          "nightly increment); `all` reads every event up to the partition date "
                                          "(a backfill; `hir materialize` without `--partition` uses it).")
    progress_every_s: float = Field(10.0, description="Interval of the Spark progress lines in the run log.")


@dg.multi_asset(
    name="bronze_tables",
    specs=[
        dg.AssetSpec("entities", group_name=GROUP, description="Accepted entities, merged by entity_id."),
        dg.AssetSpec("relations", group_name=GROUP, description="Accepted catalog edges, merged by key."),
        dg.AssetSpec("events", group_name=GROUP, description="Accepted events, Delta-partitioned by event_date."),
        dg.AssetSpec("quarantine", group_name=GROUP, description="Rejected rows: table, reason, detail, raw JSON."),
    ],
    check_specs=[
        dg.AssetCheckSpec(ACCOUNTING_CHECK, asset="quarantine", blocking=True,
                          description="For every source table, accepted + quarantined = read."),
        *[
            dg.AssetCheckSpec(SUITE_CHECK, asset=table, blocking=True,
                              description=f"Great Expectations suite of {table} (events: the run's window).")
            for table in BRONZE
        ],
    ],
    partitions_def=daily_partitions,
    compute_kind="spark",
)
def bronze_tables(
    context: dg.AssetExecutionContext,
    config: IngestionConfig,
    spark: SparkResource,
    lake: LakeResource,
    source: SourceResource,
    graph_settings: GraphSettingsResource,
):
    day = run_date(context)
    accepts, funnel = config.to_dataclass(), graph_settings.graph_config().funnel
    session = spark.get_session()
    identity = source.spec().identity
    recorded = refuse_other_source(session, lake.path("events"), identity, lake.root)  # before any write
    folder = source.prepare(session)
    context.log.info(f"Reading source {source.location!r} from {folder} for run date {day} (window={config.window})")
    raw = read_source(session, folder)
    window = labels.EventWindow.of(config.window, day)
    counts: dict[str, dict[str, int]] = {}
    versions: dict[str, int] = {}
    quarantine_parts: list[DataFrame] = []

    def step(name: str):
        """Spark progress of one ingestion step in the run log."""
        return spark_progress(context, session, f"bronze_tables: {name}", config.progress_every_s)

    def settle(table: str, labelled: DataFrame, read: int) -> DataFrame:
        labelled = labelled.persist()
        ok, bad = labels.split_counts(labelled)
        counts[table] = {"read": read, "accepted": ok, "quarantined": bad}
        context.log.info(f"{table}: read {read:,}, accepted {ok:,}, quarantined {bad:,}")
        quarantine_parts.append(labels.quarantined(labelled, table, day))
        return labelled

    def written(table: str, rows: int, how: str) -> None:
        versions[table] = audit.wrote(table)
        context.log.info(f"{table} for run date {day}: {rows:,} rows {how}, Delta version {versions[table]}")

    audit = WriteAudit.begin(session, lake, [*BRONZE, "quarantine"])
    with step("entities"):
        entities = settle("entities", labels.label_entities(raw["entities"], accepts.entity_types),
                          raw["entities"].count())
        upsert(session, labels.catalog_rows(entities, "entities", day), lake.path("entities"), ["entity_id"],
               newer=labels.INGESTED_FOR)
        known = read_table(session, lake.path("entities")).select("entity_id", "entity_type").persist()
    written("entities", counts["entities"]["accepted"], "merged by entity_id (rows of later run dates kept)")

    with step("relations"):
        relations = settle("relations", labels.label_relations(raw["relations"], known), raw["relations"].count())
        upsert(session, labels.catalog_rows(relations, "relations", day), lake.path("relations"),
               ["src_id", "dst_id", "relation"], newer=labels.INGESTED_FOR)
    written("relations", counts["relations"]["accepted"],
            "merged by (src_id, dst_id, relation) (rows of later run dates kept)")

    with step("events"):
        bounds = accepts.bounds(day)
        outside = labels.events_outside(raw["events"], window, bounds)
        if outside["before"] or outside["after"]:
            context.log.warning(
                f"events: {outside['before']:,} source rows dated before and {outside['after']:,} after this run's "
                f"window ({window.predicate()}) are not read by this run: their own run dates read them")
        events_read = labels.events_read(raw["events"], window, bounds).count()
        earlier = (read_table(session, lake.path("events")).where(f"{EVENT_DATE_COLUMN} < '{window.start}'")
                   if window.start is not None and table_exists(session, lake.path("events")) else None)
        events = settle("events", labels.label_events(raw["events"], known, window, bounds, funnel, earlier),
                        events_read)
        replace_where(labels.accepted(events, "events"), lake.path("events"), window.predicate(),
                      [EVENT_DATE_COLUMN])
        if recorded is None:  # the lake's first ingestion (or its first since lakes record their source)
            recorded = record_source(session, lake.path("events"), identity, EVENT_DATE_COLUMN)
        context.log.info(f"Lake built from source {recorded.source}, first event date {recorded.first_event_date}")
    written("events", counts["events"]["accepted"], f"written in place of {window.predicate()}")

    with step("quarantine"):
        quarantine = quarantine_parts[0].unionByName(quarantine_parts[1]).unionByName(quarantine_parts[2])
        replace_run_date(quarantine, lake.path("quarantine"), day)
    written("quarantine", sum(c["quarantined"] for c in counts.values()), "written")
    for df in (entities, relations, events, known):
        df.unpersist()

    with step("accounting"):
        quarantined_now, events_now = labels.recount(session, lake.path, day, window)
    results = [_accounting_check(counts, quarantined_now, events_now)]
    suites = bronze_suites(accepts.entity_types, funnel)
    for table in BRONZE:
        df = read_table(session, lake.path(table))
        if table == "events":
            df = df.where(window.predicate())
        context.log.info(f"Validating {table} with Great Expectations ({len(suites[table])} expectations)")
        with step(f"validate {table}"):
            results.append(validate(df, f"bronze_{table}", suites[table], asset_key=table, check_name=SUITE_CHECK))
    rolled_back = audit.settle(context, results)
    yield from _materializations(lake, day, counts, versions, quarantined_now, outside, rolled_back)
    yield from results


def _materializations(lake: LakeResource, day: dt.date, counts: dict[str, dict[str, int]], versions: dict[str, int],
                      quarantined_now: dict[str, int], outside: dict[str, int], rolled_back: dict):
    """Materialization metadata of the four tables (``rolled_back``: :meth:`WriteAudit.settle`'s, on each)."""
    for table in BRONZE:
        c = counts[table]
        extra = ({"unread_before_window": outside["before"], "unread_after_window": outside["after"]}
                 if table == "events" else {})
        yield dg.MaterializeResult(
            asset_key=table,
            metadata={
                "dagster/row_count": c["accepted"],
                "read": c["read"],
                "quarantined": c["quarantined"],
                **extra,
                "run_date": str(day),
                "delta_version": versions[table],
                "path": dg.MetadataValue.path(lake.path(table)),
                **rolled_back,
            },
        )
    yield dg.MaterializeResult(
        asset_key="quarantine",
        metadata={
            "dagster/row_count": sum(quarantined_now.values()),
            "by_table": dg.MetadataValue.json(quarantined_now),
            "run_date": str(day),
            "delta_version": versions["quarantine"],
            "path": dg.MetadataValue.path(lake.path("quarantine")),
            **rolled_back,
        },
    )


def _accounting_check(counts: dict[str, dict[str, int]], quarantined_now: dict[str, int],
                      events_now: int) -> dg.AssetCheckResult:
    """Every row read is accepted or quarantined, on the counts re-read from the written tables."""
    problems = []
    for table in BRONZE:
        c = counts[table]
        accepted_now = events_now if table == "events" else c["accepted"]
        if accepted_now + quarantined_now.get(table, 0) != c["read"]:
            problems.append(f"{table}: {accepted_now} + {quarantined_now.get(table, 0)} != {c['read']}")
    return dg.AssetCheckResult(
        check_name=ACCOUNTING_CHECK,
        asset_key="quarantine",
        passed=not problems,
        metadata={"counts": dg.MetadataValue.json(counts), "problems": dg.MetadataValue.json(problems)},
    )
