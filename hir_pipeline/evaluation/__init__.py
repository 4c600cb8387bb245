"""Offline evaluation of interest representations (torch / numpy / scipy only; no Spark, no Dagster).

* :mod:`~hir_pipeline.evaluation.data` - the user x item evaluation data of one split;
* :mod:`~hir_pipeline.evaluation.metrics` - Recall@K, NDCG@K, NMI, cluster usage;
* :mod:`~hir_pipeline.evaluation.scoring` - the scorer interface, the embedding (HIR) scorer, ranking;
* :mod:`~hir_pipeline.evaluation.baselines` - popularity, ALS, LightGCN, content-only;
* :mod:`~hir_pipeline.evaluation.gate` - the champion promotion gate;
* :mod:`~hir_pipeline.evaluation.report` - comparison table, plot, metric rows.
"""

from importlib import import_module

#: Public name -> submodule. Resolved on first access (PEP 562), so that importing one light
#: submodule (e.g. a config) does not import torch through this package.
_EXPORTS = {
    "EmbeddingScorer": "scoring",
    "EvalData": "data",
    "GateDecision": "gate",
    "Scorer": "scoring",
    "cluster_usage": "metrics",
    "evaluate_scorer": "scoring",
    "ndcg_at_k": "metrics",
    "nmi": "metrics",
    "promotion_gate": "gate",
    "recall_at_k": "metrics",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
