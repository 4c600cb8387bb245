"""Data-parallel training on CPU with real gloo process groups: batch sharding."""

from __future__ import annotations

import numpy as np
import pytest

from hir_pipeline.training.parallel import pad_cyclic, shard_rows


def test_shards_are_disjoint_balanced_and_cover_the_batch():
    batch = np.random.default_rng(0).permutation(23)
    for world in (1, 2, 3, 4):
        shards = [shard_rows(batch, r, world) for r in range(world)]
        assert np.array_equal(np.concatenate(shards), batch)  # disjoint, complete, in rank order
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
    with pytest.raises(ValueError, match="rank"):
        shard_rows(batch, 2, 2)
    short = pad_cyclic(np.array([7]), np.array([7, 1, 2]), 3)
    assert short.tolist() == [7, 7, 1] and all(len(shard_rows(short, r, 3)) == 1 for r in range(3))
    assert pad_cyclic(batch, batch, 2) is batch
