"""ModelInputs: the optional structure embedding (shape check, features, fingerprint, summary) and the recency
weighting of engagement pairs."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from hir_pipeline.model.config import TrainConfig
from hir_pipeline.training.inputs import ModelInputs, engagement_arrays, recency_ranks


def _inputs(structure: np.ndarray | None = None, recency: list[int] | None = None) -> ModelInputs:
    n = 4
    return ModelInputs(
        entity_ids=np.asarray([f"e{i}" for i in range(n)], dtype=object),
        entity_types=np.asarray(["user", "user", "ad", "ad"], dtype=object),
        node_type=np.asarray([0, 0, 1, 1]), degree_bucket=np.zeros(n, dtype=np.int64),
        has_history=np.ones(n, dtype=bool), content=np.zeros((n, 2), dtype=np.float32),
        has_content=np.zeros(n, dtype=bool), broad_views=[], narrow_views=[],
        engagement=engagement_arrays([0, 1], [2, 3], [1.0, 2.0]), structure=structure,
        engagement_recency=None if recency is None else np.asarray(recency, dtype=np.int32),
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


def test_recency_ranks_count_the_users_later_pairs():
    users = np.asarray([7, 7, 7, 3, 3, 7, 3])
    times = np.asarray([50, 90, 90, 10, 30, 20, 30])
    # user 7: 90, 90 (tied: both latest), 50 (two later), 20 (three later); user 3: 30, 30, then 10
    assert recency_ranks(users, times).tolist() == [2, 0, 0, 2, 0, 3, 0]
    perm = np.random.default_rng(0).permutation(len(users))
    assert recency_ranks(users[perm], times[perm]).tolist() == recency_ranks(users, times)[perm].tolist()
    assert recency_ranks(np.empty(0, np.int64), np.empty(0, np.int64)).tolist() == []


def test_with_recency_weighs_pairs_by_rank():
    inputs = _inputs(recency=[0, 4])
    assert inputs.with_recency(None) is inputs and _inputs().with_recency(2.0).engagement[2].tolist() == [1.0, 2.0]
    weighted = inputs.with_recency(2.0)
    np.testing.assert_allclose(weighted.engagement[2], [1.0, 2.0 * 0.25])  # rank 4 at half life 2: two halvings
    assert weighted.engagement[0] is inputs.engagement[0] and inputs.engagement[2].tolist() == [1.0, 2.0]
    history = weighted.features(16).history
    assert history.total.tolist() == pytest.approx([1.0, 0.5, 1.0, 0.5])  # the pools weigh the pairs the same way
    with pytest.raises(ValueError, match="half life"):
        inputs.with_recency(0.0)
    with pytest.raises(ValueError, match="recency_half_life"):
        TrainConfig(recency_half_life=-1.0)
    with pytest.raises(ValueError, match="engagement_recency"):
        _inputs(recency=[0])
    assert inputs.fingerprint() != _inputs(recency=[0, 3]).fingerprint() != _inputs().fingerprint()
