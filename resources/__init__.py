"""Dagster resources: the only place that knows where Spark, the lake, MLflow and the source are, and how the
graph is built."""

from resources.graph_settings import GraphSettingsResource
from resources.lake import LakeResource
from resources.mlflow import MLflowResource
from resources.source import SourceResource
from resources.spark import SparkResource

__all__ = ["GraphSettingsResource", "LakeResource", "MLflowResource", "SourceResource", "SparkResource"]
