"""MLflow side of the ``evaluation_report`` asset: find the run date's training run, log the evaluation on it,
read the champion's figures, record the promotion gate's verdict on the model version, and decide what publishing
may publish and where the ``champion`` alias goes.

The evaluation figures live on the *training* run of the model they vouch for (metrics
``eval.<method>.<split>.<metric>``), so the champion's figures are found from the champion model version's run.
When the run date has no training run (``hir evaluate`` without a nightly run) the evaluation gets a run of its
own, tagged ``hir.kind = evaluation``; such a run never counts as a training run.
"""

from __future__ import annotations  # no Dagster config classes here; lets mlflow types stay type-only

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from assets.model_tracking import TAG_MODEL_VERSION, TAG_RUN_DATE

if TYPE_CHECKING:  # mlflow takes seconds to import: only when an asset actually talks to MLflow
    from mlflow import MlflowClient
    from mlflow.entities import Run

CHAMPION_ALIAS = "champion"
TAG_KIND = "hir.kind"
NO_MODEL_VERSION = "none"
#: Model-version tag holding the promotion gate's verdict: one of :data:`GATE_VERDICTS`.
TAG_GATE = "hir.gate"
GATE_PASSED, GATE_FAILED, GATE_OVERRIDDEN = "passed", "failed", "overridden"
GATE_VERDICTS = (GATE_PASSED, GATE_FAILED, GATE_OVERRIDDEN)


def metric_name(method: str, split: str, metric: str) -> str:
    """MLflow metric name of one evaluation row."""
    return f"eval.{method}.{split}.{metric}"


def training_run(client: MlflowClient, experiment_id: str, day: str) -> Run | None:
    """The latest run of ``day`` that registered a model (tag ``hir.model_version``), or ``None``."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_RUN_DATE}` = '{day}'",
                              order_by=["attributes.start_time DESC"], max_results=50)
    return next((r for r in runs if r.data.tags.get(TAG_MODEL_VERSION)), None)


def evaluation_run(client: MlflowClient, experiment_id: str, day: str) -> Run:
    """A run of its own for an evaluation without a training run (reused when the date is evaluated again)."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_RUN_DATE}` = '{day}' and "
                              f"tags.`{TAG_KIND}` = 'evaluation'", max_results=1)
    if runs:
        return runs[0]
    run = client.create_run(experiment_id, run_name=f"evaluation {day}",
                            tags={TAG_RUN_DATE: day, TAG_KIND: "evaluation"})
    client.set_terminated(run.info.run_id)
    return client.get_run(run.info.run_id)


def production_configs(client: MlflowClient, run: Run) -> tuple[dict, dict] | None:
    """``(model_config, train_config)`` dicts the training run logged in ``model_meta.json``, or ``None``."""
    import mlflow

    try:
        meta = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/model_meta.json")
    except Exception:  # an older run, or artifacts out of reach: the asset falls back to its own config
        return None
    if "model_config" not in meta or "train_config" not in meta:
        return None
    return meta["model_config"], meta["train_config"]


def log_evaluation(client: MlflowClient, run_id: str, rows: Sequence[tuple[str, str, str, float]],
                   table_md: str, plot_png: bytes, details: dict, timestamp_ms: int) -> int:
    """Log every finite metric row, the comparison table, the plot and the details on ``run_id``.

    Returns:
        How many metrics were logged.
    """
    from mlflow.entities import Metric

    metrics = [Metric(metric_name(m, s, name), float(v), timestamp_ms, 0) for m, s, name, v in rows
               if math.isfinite(v)]
    for start in range(0, len(metrics), 500):  # log_batch takes at most 1000 metrics
        client.log_batch(run_id, metrics=metrics[start:start + 500])
    client.log_text(run_id, table_md, "evaluation/comparison.md")
    client.log_text(run_id, json.dumps(details, indent=2, default=str), "evaluation/details.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "comparison.png"
        path.write_bytes(plot_png)
        client.log_artifact(run_id, str(path), "evaluation")
    return len(metrics)


def champion(client: MlflowClient, registered_model: str, metric: str,
             splits: Sequence[str]) -> tuple[str, dict[str, float]] | None:
    """``(version, {split: value})`` of the current champion (its run's ``eval.hir.<split>.<metric>``), or None."""
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(registered_model, CHAMPION_ALIAS)
    except MlflowException:
        return None
    values = client.get_run(version.run_id).data.metrics if version.run_id else {}
    return str(version.version), {s: values.get(metric_name("hir", s, metric), float("nan")) for s in splits}


def record_gate(client: MlflowClient, registered_model: str, version: str, verdict: str, reasons: Sequence[str]
                ) -> None:
    """Tag the model version with the gate's verdict (:data:`TAG_GATE`) and its reasons."""
    if verdict not in GATE_VERDICTS:
        raise ValueError(f"gate verdict {verdict!r} is not one of {GATE_VERDICTS}")
    client.set_model_version_tag(registered_model, version, TAG_GATE, verdict)
    client.set_model_version_tag(registered_model, version, "hir.gate.reasons", "\n".join(reasons)[:5000])


def publish_refusal(client: MlflowClient, registered_model: str, version: str, day: str) -> str | None:
    """Why model version ``version`` may not be published for run date ``day``, or ``None`` when it may.

    Publishable: a registered version of that run date (registration happens only after its outputs passed the
    output checks) whose promotion gate passed or was overridden.
    """
    from mlflow.exceptions import MlflowException

    try:
        mv = client.get_model_version(registered_model, version)
    except MlflowException:
        return (f"model version {version} is not registered in {registered_model!r}: its outputs were never checked "
                f"(re-materialize interest_model for {day})")
    if mv.tags.get(TAG_RUN_DATE) != day:
        return f"model version {version} was trained for run date {mv.tags.get(TAG_RUN_DATE)}, not {day}"
    verdict = mv.tags.get(TAG_GATE)
    if verdict is None:
        return (f"model version {version} has not been through the promotion gate: materialize evaluation_report "
                f"for {day}")
    if verdict == GATE_FAILED:
        return (f"model version {version} failed the promotion gate ({mv.tags.get('hir.gate.reasons', '')}); the "
                f"previous publication stays current. To publish it anyway, re-run evaluation_report for {day} with "
                "publish_despite_gate: true")
    return None


def champion_run_date(client: MlflowClient, registered_model: str) -> str | None:
    """Run date (``YYYY-MM-DD``) of the model version the ``champion`` alias names, or ``None``."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(registered_model, CHAMPION_ALIAS).tags.get(TAG_RUN_DATE)
    except MlflowException:
        return None


def move_champion(client: MlflowClient, registered_model: str, version: str, day: str) -> bool:
    """Point ``champion`` at the version just published, unless it names a model of a later run date (re-running
    an old date never moves it back). Returns whether it moved."""
    current = champion_run_date(client, registered_model)
    if current is not None and current > day:  # ISO dates compare as strings
        return False
    client.set_registered_model_alias(registered_model, CHAMPION_ALIAS, version)
    return True
