"""Data-parallel training on CPU with real gloo process groups: batch sharding and the trainer's checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hir_pipeline.contracts import ENTITY_TYPES
from hir_pipeline.model import ModelConfig, TrainConfig
from hir_pipeline.training import Trainer
from hir_pipeline.training.fit import resolve_model_config
from hir_pipeline.training.inputs import ModelInputs
from hir_pipeline.training.parallel import pad_cyclic, shard_rows
from hir_pipeline.training.toy import ToyGraphSettings, make_toy_graph

MODEL = ModelConfig(hidden_dim=16, num_layers=1, num_heads=2, out_dim=8, content_dim=8, id_buckets=64,
                    level_sizes=(2, 4), max_dist=3, attn_block_size=16, teacher_temp=0.07)
TRAIN = TrainConfig(epochs=6, batch_size=16, engagement_batch_size=16, lr=3e-3, warmup_steps=2, log_every=0,
                    pad_to=16, seed=3, device="cpu")


def toy_inputs() -> ModelInputs:
    """The training inputs of a small planted toy graph (3 communities, 51 nodes)."""
    toy = make_toy_graph(ToyGraphSettings(num_communities=3, users_per=8, items_per=8, content_dim=8, broad_cap=12,
                                          narrow_cap=6, id_buckets=64, seed=0))
    f = toy.features
    return ModelInputs(
        entity_ids=np.asarray(toy.entity_ids, dtype=object),
        entity_types=np.asarray([ENTITY_TYPES[t] for t in f.node_type.tolist()], dtype=object),
        node_type=f.node_type.numpy(), degree_bucket=f.degree_bucket.numpy(), has_history=f.has_history.numpy(),
        content=f.content.numpy(), has_content=f.has_content.numpy(), broad_views=toy.broad_views,
        narrow_views=toy.narrow_views, engagement=toy.engagement, max_edge_type=10,
    )


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


def test_more_processes_than_one_need_a_process_group():
    toy = toy_inputs()
    cfg = resolve_model_config(MODEL, toy)
    with pytest.raises(RuntimeError, match="process group"):
        Trainer(cfg, dataclasses.replace(TRAIN, processes=2), toy.features(cfg), toy.broad_views)
