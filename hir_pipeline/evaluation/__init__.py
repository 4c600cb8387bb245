"""Offline evaluation of interest representations (torch / numpy / scipy / scikit-learn; no Spark, no Dagster).

* :mod:`~hir_pipeline.evaluation.data` - the user x item evaluation data of one split;
* :mod:`~hir_pipeline.evaluation.metrics` - Recall@K, NDCG@K, NMI, cluster usage;
* :mod:`~hir_pipeline.evaluation.scoring` - the scorer interface, the embedding (HIR) scorer, ranking;
* :mod:`~hir_pipeline.evaluation.bootstrap` - paired bootstrap intervals over users;
* :mod:`~hir_pipeline.evaluation.baselines` - popularity, ALS, LightGCN, content-only;
* :mod:`~hir_pipeline.evaluation.label_purity` - cluster labels scored on planted interests' vocabularies;
* :mod:`~hir_pipeline.evaluation.gate` - the champion promotion gate;
* :mod:`~hir_pipeline.evaluation.report` - comparison table, plot, metric rows.
"""

from hir_pipeline.lazy import lazy_exports

#: Public name -> submodule, imported on first access (``hir_pipeline.lazy``).
_EXPORTS = {
    "EmbeddingScorer": "scoring",
    "EvalData": "data",
    "GateDecision": "gate",
    "Scorer": "scoring",
    "UserScores": "scoring",
    "cluster_usage": "metrics",
    "evaluate_per_user": "scoring",
    "evaluate_scorer": "scoring",
    "ndcg_at_k": "metrics",
    "nmi": "metrics",
    "paired_bootstrap": "bootstrap",
    "promotion_gate": "gate",
    "recall_at_k": "metrics",
}
__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
