"""ModelInputs: the optional structure embedding (shape check, features, fingerprint, summary)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from hir_pipeline.training.inputs import ModelInputs, engagement_arrays


def _inputs(structure: np.ndarray | None = None) -> ModelInputs:
    n = 4
    return ModelInputs(
        entity_ids=np.asarray([f"e{i}" for i in range(n)], dtype=object),
        entity_types=np.asarray(["user", "user", "ad", "ad"], dtype=object),
        node_type=np.asarray([0, 0, 1, 1]), degree_bucket=np.zeros(n, dtype=np.int64),
        has_history=np.ones(n, dtype=bool), content=np.zeros((n, 2), dtype=np.float32),
        has_content=np.zeros(n, dtype=bool), broad_views=[], narrow_views=[],
        engagement=engagement_arrays([0, 1], [2, 3], [1.0, 2.0]), structure=structure,
    )


def test_structure_rows_reach_the_features_and_the_fingerprint():
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    with_rows, without = _inputs(rows), _inputs()
    assert (with_rows.structure_dim, without.structure_dim) == (3, 0)
    assert with_rows.summary()["structure_dim"] == 3 and with_rows.nbytes() == without.nbytes() + rows.nbytes
    np.testing.assert_array_equal(with_rows.features(16).structure.numpy(), rows)
    assert without.features(16).structure.shape == (4, 0)
    assert with_rows.fingerprint() != without.fingerprint()
    moved = rows.copy()
    moved[0, 0] += 1.0
    assert _inputs(moved).fingerprint() != with_rows.fingerprint()
    assert _inputs().fingerprint() == without.fingerprint()


def test_structure_shape_is_checked():
    with pytest.raises(ValueError, match="structure"):
        _inputs(np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="structure"):
        _inputs(np.zeros(4, dtype=np.float32))


def test_inputs_pickled_before_the_field_existed_still_load():
    """Prepared splits cached by benchmarks before this field existed unpickle without it: no structure."""
    old = _inputs()
    state = {k: v for k, v in old.__dict__.items() if k != "structure"}
    restored = object.__new__(ModelInputs)
    restored.__dict__.update(pickle.loads(pickle.dumps(state)))
    assert restored.structure_dim == 0 and restored.features(16).structure.shape == (4, 0)
    assert restored.fingerprint() == old.fingerprint()
    assert dataclasses.replace(restored).structure is None
