"""The champion promotion gate: a new model may not be much worse than the current champion."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GateDecision:
    """Outcome of :func:`promotion_gate`.

    Args:
        passed: whether the candidate may become the champion.
        reasons: one line per compared split (or why nothing was compared).
        candidate: the candidate's metric per split.
        champion: the champion's metric per split, or ``None`` when there is no champion.
    """

    passed: bool
    reasons: list[str] = field(default_factory=list)
    candidate: dict[str, float] = field(default_factory=dict)
    champion: dict[str, float] | None = None


def promotion_gate(
    candidate: Mapping[str, float],
    champion: Mapping[str, float] | None,
    tolerance: float = 0.05,
    splits: Sequence[str] = ("warm", "cold"),
) -> GateDecision:
    """Decide whether a candidate's metrics are within ``tolerance`` of the champion's on every split.

    A split passes when ``candidate >= champion * (1 - tolerance)`` (relative tolerance: 0.05 lets the
    candidate be up to 5% worse). With no champion the candidate passes. A split the champion has no
    finite value for is skipped; a split where the champion has a value and the candidate does not fails.

    Args:
        candidate: metric (e.g. Recall@20) per split of the new model.
        champion: same for the current champion, or ``None``.
        tolerance: allowed relative shortfall, in ``[0, 1]``.
        splits: splits that must pass.
    """
    if not 0.0 <= tolerance <= 1.0:
        raise ValueError(f"tolerance must be in [0, 1], got {tolerance}")
    cand = {s: float(candidate[s]) for s in splits if s in candidate}
    if champion is None:
        return GateDecision(True, ["no champion yet: the candidate becomes the first champion"], cand, None)
    champ = {s: float(champion[s]) for s in splits if s in champion}
    passed, reasons = True, []
    for s in splits:
        ref = champ.get(s)
        if ref is None or not math.isfinite(ref):
            reasons.append(f"{s}: champion has no value, not compared")
            continue
        got = cand.get(s)
        if got is None or not math.isfinite(got):
            passed = False
            reasons.append(f"{s}: candidate has no value (champion {ref:.4f})")
            continue
        floor = ref * (1.0 - tolerance)
        ok = got >= floor
        passed &= ok
        reasons.append(f"{s}: candidate {got:.4f} {'>=' if ok else '<'} {floor:.4f} "
                       f"(champion {ref:.4f}, tolerance {tolerance:.0%})")
    return GateDecision(passed, reasons, cand, champ)
