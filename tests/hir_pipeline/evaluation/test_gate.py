"""The champion promotion gate."""

from __future__ import annotations

import math

import pytest

from hir_pipeline.evaluation.gate import promotion_gate


def test_first_model_becomes_champion():
    d = promotion_gate({"warm": 0.1, "cold": 0.05}, None)
    assert d.passed and d.champion is None and "no champion" in d.reasons[0]


def test_within_tolerance_passes_and_beyond_fails():
    champ = {"warm": 0.20, "cold": 0.10}
    assert promotion_gate({"warm": 0.19, "cold": 0.096}, champ, tolerance=0.05).passed
    assert promotion_gate({"warm": 0.30, "cold": 0.20}, champ, tolerance=0.0).passed
    worse_cold = promotion_gate({"warm": 0.25, "cold": 0.094}, champ, tolerance=0.05)
    assert not worse_cold.passed
    assert worse_cold.reasons[0].startswith("warm: candidate 0.2500 >=")
    assert worse_cold.reasons[1].startswith("cold: candidate 0.0940 <")
    assert not promotion_gate({"warm": 0.189, "cold": 0.2}, champ, tolerance=0.05).passed


def test_missing_values():
    # the champion lacks cold: only warm is compared; the candidate lacks cold: fails
    assert promotion_gate({"warm": 0.2}, {"warm": 0.2, "cold": math.nan}).passed
    assert not promotion_gate({"warm": 0.2}, {"warm": 0.2, "cold": 0.1}).passed
    with pytest.raises(ValueError):
        promotion_gate({"warm": 0.2}, None, tolerance=1.5)
