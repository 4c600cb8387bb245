"""Lazy package exports resolve on first access, once, and reject unknown names."""

import sys

import pytest


def test_exports_resolve_to_the_submodule_objects_and_are_cached():
    import hir_pipeline.evaluation as evaluation
    from hir_pipeline.evaluation.metrics import nmi

    assert "nmi" in evaluation.__all__
    assert evaluation.nmi is nmi
    assert sys.modules["hir_pipeline.evaluation"].__dict__["nmi"] is nmi  # cached: no second lookup
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        evaluation.missing  # noqa: B018
