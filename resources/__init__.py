"""Dagster resources: the only place that knows where Spark, the lake, MLflow and the source are."""

from resources.lake import LakeResource
from resources.mlflow import MLflowResource
from resources.source import SourceResource
from resources.spark import SparkResource

__all__ = ["LakeResource", "MLflowResource", "SourceResource", "SparkResource"]
