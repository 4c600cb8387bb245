"""Publishing: the model's internal tables -> the four versioned output tables of the contract.

``node_embeddings``, ``cluster_assignments``, ``interest_supergraph`` and ``cluster_profiles`` are written
for the run date (Delta ``replaceWhere`` on ``run_date``: a re-run replaces only that date), with cluster IDs
kept stable across model versions (:mod:`hir_pipeline.publish.stable_ids`). The training MLflow run
(tags ``hir.run_date`` / ``hir.model_version``) gets the published Delta versions, the stability per level
and two pictures (MLflow images keyed ``publish/cluster_hierarchy`` and ``publish/embedding_map`` whose step is the
run date, :func:`run_date_step`, so the nights form one series); the registered model version gets the same tags.

Reading, building and writing are :func:`spark_jobs.publish.io.read_inputs`,
:func:`spark_jobs.publish.transform.build_publication` and :func:`spark_jobs.publish.io.write_publication`;
this module adds Dagster metadata, pictures and MLflow.

What may be published: a registered model version of the run date (registration follows the blocking output
checks of ``interest_model``) whose promotion gate (``evaluation_report``'s blocking check) passed or was overridden
by the operator. Anything else fails the asset with the reason before a table is touched, so the previous
publication stays current. After the tables are written the ``champion`` alias moves to the published version,
unless it names the model of a later run date (re-running an old date never moves it back).

Crash safety: each table is replaced in one Delta commit (data files first, then one atomic log entry), so a
run killed mid-write leaves every table at its previous version. The ``publications`` manifest is written *last*:
one row per run date with the model version and the Delta version of each of the four tables. Readers
(:mod:`hir_pipeline.query`, the one-join SQL of docs/querying.md) resolve a publication through it, so a
half-finished publication is never read, and since the manifest is only reached past the gates above, neither is
an unchecked model.
"""

import base64
import datetime as dt
import hashlib
import io
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import dagster as dg
import numpy as np
from pydantic import Field
from pyspark.sql import SparkSession

from assets.evaluation_tracking import move_champion, publish_refusal
from assets.partitions import daily_partitions, run_date
from assets.progress import spark_stages
from hir_pipeline.contracts import OUTPUT_SCHEMAS
from hir_pipeline.publish.pictures import ClusterNode, embedding_map_png, hierarchy_sunburst_png
from resources import LakeResource, MLflowResource, SparkResource
from resources.config_schema import config_class
from spark_jobs.publish import (
    MANIFEST_TABLE,
    WRITE_ORDER,
    MissingInput,
    MixedModelVersions,
    PublicationFrames,
    PublishSettings,
    build_publication,
    model_version_of,
    read_inputs,
    read_picture_data,
    write_publication,
)

if TYPE_CHECKING:  # mlflow takes seconds to import: only when the asset talks to MLflow
    from mlflow import MlflowClient

GROUP = "publish"
#: evaluation_report: a model is published only once the promotion gate let it through (its blocking check).
UPSTREAM = [dg.AssetKey(k) for k in ("interest_model", "evaluation_report", "graph_edges", "entities")]
#: MLflow tags that identify the training run of a run date and model version.
TAG_RUN_DATE, TAG_MODEL_VERSION = "hir.run_date", "hir.model_version"

DESCRIPTIONS = {
    "node_embeddings": "One L2-normalised embedding per entity (one space for every type), per run date.",
    "cluster_assignments": "Every entity at every level: stable published cluster ID and confidence.",
    "interest_supergraph": "Cluster-to-cluster edge weights per level, summed over graph edges between members.",
    "cluster_profiles": "Per cluster with members: parent, size, label (its most distinctive terms), top members, "
                        "prototype, how its ID was matched.",
    MANIFEST_TABLE: "One row per published run date, written last: model version and the Delta version of each of "
                    "the four tables (readers resolve a publication through it).",
}


def column_schema(table: str) -> dg.TableSchema:
    """The published table's columns (:data:`hir_pipeline.contracts.OUTPUT_SCHEMAS`), shown in the UI's catalog."""
    return dg.TableSchema(columns=[dg.TableColumn(c.name, c.ddl, c.description) for c in OUTPUT_SCHEMAS[table]])


class PublishConfig(config_class(PublishSettings, name="PublishFields")):
    """How a publication is built (the fields of :class:`spark_jobs.publish.PublishSettings`, derived from it) and
    how its pictures are drawn."""

    map_points: int = Field(5000, description="Most embeddings drawn on the 2-D map (a deterministic hash sample).")
    picture_dpi: int = Field(80, description="Resolution of the pictures.")
    legend_clusters: int = Field(20, description="Most coarse clusters named (by label and size) in the legends of "
                                                 "the pictures; the embedding map greys out the rest.")


# --- pictures ------------------------------------------------------------------------------------


def _pictures(session: SparkSession, lake: LakeResource, day: dt.date, config: PublishConfig) -> dict[str, bytes]:
    """The hierarchy sunburst and the 2-D embedding map, drawn from the tables just written."""
    profiles, sample = read_picture_data(session, lake.path, day, config.map_points)
    nodes = [ClusterNode(r.level, r.cluster_id, r.parent_cluster_id, r.size, r.label) for r in profiles]
    labels = {n.cluster_id: n.label for n in nodes if n.level == 0}
    pictures = {"cluster_hierarchy.png": hierarchy_sunburst_png(nodes, f"Interest hierarchy, {day}",
                                                                dpi=config.picture_dpi,
                                                                max_legend=config.legend_clusters)}
    if sample:
        emb = np.asarray([r.embedding for r in sample], dtype=np.float32)
        pictures["embedding_map.png"] = embedding_map_png(
            emb, np.asarray([r.cluster_id for r in sample]), labels,
            f"Embeddings by coarse cluster (PCA, {len(sample):,} entities), {day}", dpi=config.picture_dpi,
            max_legend=config.legend_clusters)
    return pictures


def _markdown_image(name: str, png: bytes) -> dg.MetadataValue:
    return dg.MetadataValue.md(f"![{name}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})")


# --- MLflow --------------------------------------------------------------------------------------

#: MLflow image key prefix of the publication's pictures (``publish/cluster_hierarchy``, ``publish/embedding_map``).
PICTURE_KEY_PREFIX = "publish"


def run_date_step(day: dt.date) -> int:
    """The MLflow step of everything a run date logs over the nights (metrics and pictures): the date as the
    integer ``YYYYMMDD`` (2024-01-05 -> 20240105). Steps increase with the date and read as it in MLflow's charts
    and image slider; one night is one step, whichever day the run happened to be made on.

    Args:
        day: the run date.
    """
    return int(day.strftime("%Y%m%d"))


def log_pictures(client: "MlflowClient", run_id: str, pictures: dict[str, bytes], day: dt.date) -> None:
    """Log each picture as an MLflow image keyed ``publish/<name>`` at step :func:`run_date_step` of ``day``, so
    the UI shows the pictures of successive nights as one series per key.

    Args:
        client: a client of the tracking store.
        run_id: the MLflow run to log to.
        pictures: PNG bytes by file name (``cluster_hierarchy.png`` -> key ``publish/cluster_hierarchy``).
        day: the run date.
    """
    from PIL import Image

    for name, png in pictures.items():
        with Image.open(io.BytesIO(png)) as image:
            # synchronous: the images are stored when this returns, before the asset reports its run ID.
            client.log_image(run_id, image.copy(), key=f"{PICTURE_KEY_PREFIX}/{PurePosixPath(name).stem}",
                             step=run_date_step(day), synchronous=True)



def find_training_run(mlflow: MLflowResource, day: dt.date, model_version: str) -> str | None:
    """ID of the newest run tagged with this run date and model version, in the resource's experiment."""
    from mlflow import MlflowClient

    experiment_id = mlflow.activate()
    runs = MlflowClient().search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_RUN_DATE}` = '{day}' AND tags.`{TAG_MODEL_VERSION}` = '{model_version}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def mlflow_client(mlflow: MLflowResource):
    """A client of the resource's tracking store (activated)."""
    from mlflow import MlflowClient

    mlflow.activate()
    return MlflowClient()


def publishable(mlflow: MLflowResource, version: str, day: dt.date) -> str | None:
    """Why ``version`` may not be published for ``day`` (not registered, not of this date, gate failed or not
    run), or ``None``: see :func:`assets.evaluation_tracking.publish_refusal`."""
    return publish_refusal(mlflow_client(mlflow), mlflow.registered_model, version, str(day))


def log_publication(
    context: dg.AssetExecutionContext,
    mlflow: MLflowResource,
    lake: LakeResource,
    day: dt.date,
    publication: PublicationFrames,
    versions: dict[str, int],
    counts: dict[str, int],
    pictures: dict[str, bytes],
) -> str:
    """Log versions, stability and pictures to the training run (created if missing); returns its ID."""
    from mlflow import MlflowClient
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    version = publication.model_version
    run_id = find_training_run(mlflow, day, version)
    if run_id is None:
        context.log.warning(f"No MLflow run tagged {TAG_RUN_DATE}={day} {TAG_MODEL_VERSION}={version}; "
                            "logging the publication to a new run")
        experiment_id = mlflow.activate()
        run = client.create_run(experiment_id, run_name=f"publish-{day}",
                                tags={TAG_RUN_DATE: str(day), TAG_MODEL_VERSION: version, "hir.stage": "publish"})
        run_id = run.info.run_id
        client.set_terminated(run_id)
    tags = {f"hir.published.{t}.delta_version": str(v) for t, v in versions.items()}
    tags["hir.published.run_date"] = str(day)
    if publication.previous_run_date is not None:
        tags["hir.published.previous_run_date"] = str(publication.previous_run_date)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    step = run_date_step(day)
    for level, value in publication.stable.stability().items():
        if value is not None:
            client.log_metric(run_id, f"publish.stability.level_{level}", value, step=step)
    for table, n in counts.items():
        client.log_metric(run_id, f"publish.rows.{table}", n, step=step)
    datasets = []
    for table, v in versions.items():
        # A metadata-only dataset: the Delta path and version are the lineage; no Spark job to profile it.
        path = lake.path(table)
        ds = MetaDataset(source=DeltaDatasetSource(path=path, delta_table_version=v), name=f"{table}@v{v}",
                         digest=hashlib.md5(f"{path}@{v}".encode()).hexdigest()[:16])
        datasets.append(DatasetInput(dataset=ds._to_mlflow_entity(),
                                     tags=[InputTag(key="mlflow.data.context", value="published")]))
    client.log_inputs(run_id, datasets=datasets)
    log_pictures(client, run_id, pictures, day)
    try:  # tie the registered model version to what it published
        for key, value in tags.items():
            client.set_model_version_tag(mlflow.registered_model, version, key, value)
    except MlflowException as exc:
        context.log.info(f"Registered model {mlflow.registered_model!r} v{version} not tagged: {exc.message}")
    return run_id


# --- the asset -----------------------------------------------------------------------------------


@dg.multi_asset(
    name="publish_tables",
    specs=[dg.AssetSpec(t, group_name=GROUP, deps=UPSTREAM, description=DESCRIPTIONS[t],
                        metadata={"dagster/column_schema": column_schema(t)})
           for t in (*WRITE_ORDER, MANIFEST_TABLE)],
    partitions_def=daily_partitions,
    compute_kind="spark",
)
def publish_tables(
    context: dg.AssetExecutionContext,
    config: PublishConfig,
    spark: SparkResource,
    lake: LakeResource,
    mlflow: MLflowResource,
):
    day = run_date(context)
    session = spark.get_session()
    stages = spark_stages(context, session, "publish")
    with stages("read inputs"):
        try:
            inputs = read_inputs(session, lake.path, day)
            version = model_version_of(inputs.model_outputs, inputs.model_hierarchy)
        except (MissingInput, MixedModelVersions) as exc:
            raise dg.Failure(str(exc)) from exc
    refusal = publishable(mlflow, version, day)
    if refusal is not None:
        raise dg.Failure(f"not publishing run date {day}: {refusal}", metadata={"model_version": version})
    prev_date = inputs.previous_date
    context.log.info(f"Publishing run date {day}: {inputs.n_levels} levels, graph_edges of {inputs.edges_date}, "
                     f"matching IDs to the publication of {prev_date or '(none: first publication)'}")
    with stages("stable IDs and labels"):
        pub = build_publication(session, inputs, day, config.to_dataclass())
    with stages("write"):
        written = write_publication(session, pub, lake.path, day, lambda t, v, n: context.log.info(
            f"{t}: {n:,} rows for {day}, Delta version {v}"))
    versions = {t: v for t, (v, _) in written.items()}
    counts = {t: n for t, (_, n) in written.items()}
    session.catalog.clearCache()

    with stages("pictures"):
        pictures = _pictures(session, lake, day, config)
    with stages("mlflow"):
        run_id = log_publication(context, mlflow, lake, day, pub, versions, counts, pictures)
        moved = move_champion(mlflow_client(mlflow), mlflow.registered_model, pub.model_version, str(day))
    context.log.info(f"Published model version {pub.model_version} for {day}; champion alias "
                     + ("moved to it" if moved else "left on the model of a later run date"))
    stability = {str(lvl): v for lvl, v in pub.stable.stability().items()}
    methods = {str(lvl): {m: list(match.method.values()).count(m) for m in sorted(set(match.method.values()))}
               for lvl, match in enumerate(pub.stable.levels)}
    common = {"run_date": str(day), "model_version": pub.model_version, "mlflow_run_id": run_id,
              "champion_moved": moved}
    stab_meta = {"stability": dg.MetadataValue.json(stability),
                 **{f"stability_level_{lvl}": float(v) for lvl, v in stability.items() if v is not None},
                 "previous_run_date": str(prev_date) if prev_date else "none"}
    extra = {
        "node_embeddings": {"stage_seconds": dg.MetadataValue.json(stages.seconds),
                            **({"embedding_map": _markdown_image("embedding map", pictures["embedding_map.png"])}
                               if "embedding_map.png" in pictures else {})},
        "cluster_assignments": stab_meta,
        "interest_supergraph": {"graph_edges_run_date": str(inputs.edges_date)},
        "cluster_profiles": {**stab_meta, "id_matches": dg.MetadataValue.json(methods),
                             "hierarchy": _markdown_image("cluster hierarchy", pictures["cluster_hierarchy.png"])},
        MANIFEST_TABLE: {"table_versions": dg.MetadataValue.json({t: versions[t] for t in WRITE_ORDER})},
    }
    for table in (*WRITE_ORDER, MANIFEST_TABLE):
        yield dg.MaterializeResult(
            asset_key=table,
            metadata={
                "dagster/row_count": counts[table],
                "delta_version": versions[table],
                "path": dg.MetadataValue.path(lake.path(table)),
                **common,
                **extra[table],
            },
        )
