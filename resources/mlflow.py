"""MLflow tracking, by default a local SQLite store."""

from __future__ import annotations

import dagster as dg


class MLflowResource(dg.ConfigurableResource):
    """MLflow tracking.

    Args:
        tracking_uri: e.g. ``sqlite:///.hir/mlflow.db`` or ``http://mlflow:5000``.
        experiment: experiment every run of the pipeline is logged under.
        artifact_location: where a newly created experiment stores artifacts (None: server default).
        registered_model: name of the model in the MLflow registry.
    """

    tracking_uri: str
    experiment: str = "hir-pipeline"
    artifact_location: str | None = None
    registered_model: str = "hir-interest-model"

    def activate(self) -> str:
        """Point the mlflow client at this store and experiment; returns the experiment id."""
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        experiment = mlflow.get_experiment_by_name(self.experiment)
        experiment_id = (
            mlflow.create_experiment(self.experiment, artifact_location=self.artifact_location)
            if experiment is None
            else experiment.experiment_id
        )
        mlflow.set_experiment(experiment_id=experiment_id)  # runs started next land here, not in Default
        return experiment_id
