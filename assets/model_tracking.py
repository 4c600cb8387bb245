"""MLflow side of the ``interest_model`` asset: one resumable run per training, datasets, the logged model.

A training that crashed (or stopped at its time budget) is resumed from its epoch checkpoint by the next
materialization of the same date; it also continues the *same* MLflow run, so the run shows every epoch once.
The run id is remembered next to the checkpoints (``mlflow_run.json``, keyed by the run fingerprint).
"""

from __future__ import annotations  # no Dagster config classes here; lets FitResult (torch) stay type-only

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

if TYPE_CHECKING:  # torch takes seconds to import: only when the model asset runs
    from hir_pipeline.training.fit import FitResult

TAG_RUN_DATE, TAG_MODEL_VERSION = "hir.run_date", "hir.model_version"
RUN_FILE = "mlflow_run.json"
#: Metrics of an epoch that are counters, not measurements.
_NOT_METRICS = frozenset({"epoch", "steps"})


def resumable_run_id(checkpoint_dir: Path, fingerprint: str) -> str | None:
    """The unfinished MLflow run of this training (same fingerprint), if there is one in the store."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    path = checkpoint_dir / RUN_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    if saved.get("fingerprint") != fingerprint:
        return None
    try:
        run = MlflowClient().get_run(saved["run_id"])
    except MlflowException:  # another tracking store, or the run was deleted
        return None
    return None if run.info.status == "FINISHED" or run.info.lifecycle_stage != "active" else run.info.run_id


def remember_run(checkpoint_dir: Path, fingerprint: str, run_id: str) -> None:
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    (checkpoint_dir / RUN_FILE).write_text(json.dumps({"fingerprint": fingerprint, "run_id": run_id}))


def epoch_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric, loggable part of one epoch's metrics."""
    return {k: float(v) for k, v in metrics.items() if k not in _NOT_METRICS and isinstance(v, int | float)}


def flat_params(prefix: str, values: dict[str, Any]) -> dict[str, str]:
    """``{prefix.key: str(value)}`` (MLflow params are strings; tuples become lists)."""
    return {f"{prefix}.{k}": json.dumps(list(v)) if isinstance(v, tuple | list) else str(v)
            for k, v in values.items()}


def log_input_tables(frames: dict[str, tuple[DataFrame, str, int]], day: dt.date,
                     counts: dict[str, int] | None = None) -> None:
    """Log every input table as an MLflow dataset (Delta source with its explicit version, context ``training``).

    The dataset profile is given (``counts``: rows the training used per table) instead of letting
    ``SparkDataset`` compute one: its default profile runs a Python-RDD count over the whole table, which on
    ``graph_views`` would re-read every view just to log it.

    Args:
        frames: ``{table: (the rows read, table path, Delta version)}``.
        day: the run date (part of the dataset name, since only that date's rows were read).
        counts: ``{table: rows used}`` for the profile.
    """
    import mlflow
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.spark_dataset import SparkDataset

    class _ProfiledSparkDataset(SparkDataset):
        def __init__(self, *args, given_profile: dict | None = None, **kwargs) -> None:
            self._given_profile = given_profile
            super().__init__(*args, **kwargs)

        @property
        def profile(self) -> dict | None:
            return self._given_profile

    for table, (df, path, version) in frames.items():
        # the version goes in as a string: DeltaDatasetSource drops a falsy version 0 from what it logs
        profile = {"run_date": str(day), "delta_version": version}
        if counts and table in counts:
            profile["rows_used"] = int(counts[table])
        dataset = _ProfiledSparkDataset(
            df=df, source=DeltaDatasetSource(path=path, delta_table_version=str(version)),
            name=f"{table}@v{version}/{day}", given_profile=profile,
        )
        mlflow.log_input(dataset, context="training")


def output_cluster_stats(result: FitResult) -> dict[str, float]:
    """Per level over all nodes: perplexity of the mean assignment, clusters holding a node, mean top probability,
    hierarchy consistency (share of nodes whose coarse cluster is their fine cluster's published parent)."""
    import torch

    from hir_pipeline.evaluation.metrics import mean_top_probability
    from hir_pipeline.model.hierarchy import cluster_perplexity, hierarchy_consistency

    probs = result.inference.probs
    out: dict[str, float] = {}
    for lvl, p in enumerate(probs):
        out[f"output_perplexity_level_{lvl}"] = cluster_perplexity(torch.from_numpy(p))
        out[f"output_clusters_used_level_{lvl}"] = float(len(np.unique(p.argmax(axis=1))))
        out[f"output_mean_top_probability_level_{lvl}"] = mean_top_probability(p)
    consistency = hierarchy_consistency([torch.from_numpy(p) for p in probs],
                                        [torch.from_numpy(m) for m in result.inference.parent_maps])
    for lvl, value in enumerate(consistency, start=1):
        out[f"hierarchy_consistency_level_{lvl}"] = value
    return out


def log_model(result: FitResult, day: dt.date) -> str:
    """Log the published encoder with MLflow 3 (``name="model"``) to the active run, *not* registered yet;
    returns its model URI (``models:/<model id>``).

    The logged module is ``result.model``: the network that produced the published embeddings and cluster
    probabilities (``train_cfg.published_encoder``: the student or the EMA teacher). It is pickled (its forward
    takes packed views, which the ``pt2`` export format cannot express) with the ``hir_pipeline`` package bundled
    as code, so it loads without this checkout. Config, which encoder it is, the temperature and centers of its
    cluster softmax (``centers`` null for the student and for refined prototypes), the kind of views it embeds
    (``views``: narrow for the student, broad for the teacher) and the parent maps go beside it as ``model_meta.json``
    (they are needed to reproduce the cluster probabilities).
    """
    import dataclasses
    from importlib.metadata import version as dist_version

    import mlflow

    import hir_pipeline

    encoder = result.train_cfg.published_encoder
    info = mlflow.pytorch.log_model(
        result.model.cpu(),
        name="model",
        serialization_format="pickle",
        code_paths=[str(Path(hir_pipeline.__file__).parent)],
        pip_requirements=[f"torch=={dist_version('torch')}", f"numpy=={dist_version('numpy')}"],
        metadata={"hir.run_date": str(day), "fingerprint": result.fingerprint, "hir.published_encoder": encoder},
    )
    mlflow.log_dict({
        "model_config": dataclasses.asdict(result.model_cfg),
        "train_config": dataclasses.asdict(result.train_cfg),
        "published_encoder": encoder,
        "views": result.views,
        "temperature": result.temperature,
        "centers": None if result.centers is None else [c.tolist() for c in result.centers],
        "parent_maps": [m.tolist() for m in result.inference.parent_maps],
        "fingerprint": result.fingerprint,
    }, "model_meta.json")
    return info.model_uri


def next_model_version(registered_model: str) -> str:
    """The version number the registry gives the next registration of ``registered_model`` (its highest + 1).

    The model's outputs carry their version and are written *before* the model is registered (a registered
    version always has checked, written outputs), so the number is taken in advance and
    :func:`register_model` confirms it.
    """
    from mlflow import MlflowClient

    found = MlflowClient().search_model_versions(f"name = '{registered_model}'",
                                                 order_by=["version_number DESC"], max_results=1)
    return str(int(found[0].version) + 1 if found else 1)


def register_model(model_uri: str, registered_model: str, day: dt.date, fingerprint: str, encoder: str) -> str:
    """Register the logged model; tag the version with its run date, fingerprint and encoder and the active run
    with the version. Returns the version."""
    import mlflow

    version = str(mlflow.register_model(model_uri, registered_model, tags={
        TAG_RUN_DATE: str(day), "hir.fingerprint": fingerprint, "hir.published_encoder": encoder}).version)
    mlflow.set_tag(TAG_MODEL_VERSION, version)
    return version
