"""Offline evaluation of interest representations (torch / numpy / scipy only; no Spark, no Dagster).

* :mod:`~hir_pipeline.evaluation.data` - the user x item evaluation data of one split;
* :mod:`~hir_pipeline.evaluation.metrics` - Recall@K, NDCG@K, NMI, cluster usage;
* :mod:`~hir_pipeline.evaluation.scoring` - the scorer interface, the embedding (HIR) scorer, ranking;
* :mod:`~hir_pipeline.evaluation.baselines` - popularity, ALS, LightGCN, content-only;
* :mod:`~hir_pipeline.evaluation.gate` - the champion promotion gate;
* :mod:`~hir_pipeline.evaluation.report` - comparison table, plot, metric rows.
"""

from hir_pipeline.evaluation.data import EvalData
from hir_pipeline.evaluation.gate import GateDecision, promotion_gate
from hir_pipeline.evaluation.metrics import cluster_usage, ndcg_at_k, nmi, recall_at_k
from hir_pipeline.evaluation.scoring import EmbeddingScorer, Scorer, evaluate_scorer

__all__ = ["EmbeddingScorer", "EvalData", "GateDecision", "Scorer", "cluster_usage", "evaluate_scorer",
           "ndcg_at_k", "nmi", "promotion_gate", "recall_at_k"]
