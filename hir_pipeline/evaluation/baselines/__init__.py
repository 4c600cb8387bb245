"""Baselines evaluated on the same split as HIR, one module each; all implement ``scoring.Scorer``."""

from hir_pipeline.evaluation.baselines.als import ALSConfig, ALSScorer
from hir_pipeline.evaluation.baselines.content import ContentScorer
from hir_pipeline.evaluation.baselines.lightgcn import LightGCNConfig, LightGCNScorer
from hir_pipeline.evaluation.baselines.popularity import PopularityScorer
from hir_pipeline.evaluation.baselines.random_scores import RandomScorer

__all__ = ["ALSConfig", "ALSScorer", "ContentScorer", "LightGCNConfig", "LightGCNScorer", "PopularityScorer",
           "RandomScorer"]
