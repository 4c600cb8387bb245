"""Dagster resources: the only place that knows where Spark, the lake, MLflow and the source are, how the graph
is built and how the model is trained."""

from resources.graph_settings import GraphSettingsResource
from resources.lake import LakeResource
from resources.mlflow import MLflowResource
from resources.model_settings import ModelSettingsResource
from resources.source import SourceResource
from resources.spark import SparkResource

__all__ = ["GraphSettingsResource", "LakeResource", "MLflowResource", "ModelSettingsResource", "SourceResource",
           "SparkResource"]
