"""The inner validation split that ALS's grid and HIR's settings are tuned on, with and without cold items."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.evaluation.data import COLD, VALIDATION, WARM, validation_split


def _pairs(m) -> set[tuple[int, int]]:
    coo = m.tocoo()
    return set(zip(coo.row.tolist(), coo.col.tolist(), strict=True))


def test_cold_items_leave_train_and_the_warm_hold_out_stays_als(planted):
    data, _, _ = planted
    als = validation_split(data, 0.25, seed=1)
    inner = validation_split(data, 0.25, seed=1, cold_fraction=0.2)
    assert set(als.targets) == {VALIDATION} and set(inner.targets) == {VALIDATION, COLD}
    cold = inner.candidates[COLD]
    kept_items = np.asarray(als.train.getnnz(axis=0) > 0)
    assert cold.sum() == round(kept_items.sum() * 0.2) and not (cold & ~kept_items).any()
    assert not (cold & inner.candidates[VALIDATION]).any()
    # every pair on a cold item, trained or held out, is a cold target; none is left in train
    original = _pairs(data.train)
    assert _pairs(inner.targets[COLD]) == {(u, i) for u, i in original if cold[i]}
    assert inner.train[:, cold].nnz == 0
    # the warm validation pairs are ALS's, less those on the new cold items
    assert _pairs(inner.targets[VALIDATION]) == {(u, i) for u, i in _pairs(als.targets[VALIDATION]) if not cold[i]}
    assert _pairs(inner.train) == {(u, i) for u, i in _pairs(als.train) if not cold[i]}
    np.testing.assert_array_equal(inner.train[inner.train.nonzero()], data.train[inner.train.nonzero()])
    # seeded
    again = validation_split(data, 0.25, seed=1, cold_fraction=0.2)
    np.testing.assert_array_equal(again.candidates[COLD], cold)
    assert not np.array_equal(validation_split(data, 0.25, seed=2, cold_fraction=0.2).candidates[COLD], cold)
    with pytest.raises(ValueError, match="cold_fraction"):
        validation_split(data, 0.25, cold_fraction=1.0)


def test_renamed_splits(planted):
    data, _, _ = planted
    inner = validation_split(data, 0.25, seed=1, cold_fraction=0.2).renamed({VALIDATION: WARM})
    assert inner.splits == [WARM, COLD]
    assert inner.candidates[WARM].sum() > 0 and inner.targets[WARM].nnz > 0
