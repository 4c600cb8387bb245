"""Encoder, packing and node features."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hir_pipeline.model import HIRModel, ModelConfig, NodeFeatures, hash_id_buckets, pack_views

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

CFG = ModelConfig(hidden_dim=16, num_layers=2, num_heads=2, out_dim=8, content_dim=6, id_buckets=31,
                  level_sizes=(2, 3, 5), max_dist=3, attn_block_size=16, dropout=0.0)


def _graph(n=30, seed=0):
    rng = np.random.default_rng(seed)
    node_type = rng.integers(0, 6, n)
    content = rng.normal(size=(n, CFG.content_dim)).astype(np.float32)
    has_content = node_type != 0
    feats = NodeFeatures.from_arrays([f"id{i}" for i in range(n)], node_type, rng.integers(0, 16, n),
                                     np.arange(n) % 2 == 0, CFG.id_buckets, content, has_content)
    views = []
    for a in range(8):
        m = int(rng.integers(1, 9))
        nodes = [a, *rng.choice(np.arange(8, n), m - 1, replace=False).tolist()]
        views.append({"anchor_idx": a, "nodes": nodes, "node_types": node_type[nodes].tolist(),
                      "dist": rng.integers(0, 5, m * m).astype(np.int8).tobytes(),
                      "edge_types": rng.integers(0, 4, m * m).astype(np.uint8).tobytes()})
    return feats, views


def test_hash_id_buckets_is_stable_and_in_range():
    a = hash_id_buckets(["u1", "u2", "ad-9"], 97)
    b = hash_id_buckets(["u1", "u2", "ad-9"], 97)
    assert torch.equal(a, b) and int(a.max()) < 97 and int(a.min()) >= 0
    assert a[0] != a[1] or a[1] != a[2]


def test_pack_views_layout():
    feats, views = _graph()
    batch = pack_views(views, pad_to=16)
    total = sum(len(v["nodes"]) for v in views)
    assert batch.layout.seq_len % 16 == 0 and int(batch.token_mask.sum()) == total
    assert batch.anchor_idx.tolist() == list(range(8))
    assert batch.node_idx[batch.layout.anchor_positions()].tolist() == list(range(8))
    bad = dict(views[0], dist=b"\x00")
    with pytest.raises(ValueError):
        pack_views([bad])


def test_model_shapes_and_normalisation():
    feats, views = _graph()
    model = HIRModel(CFG)
    out = model(pack_views(views, pad_to=16, max_dist=CFG.max_dist), feats)
    assert out.embedding.shape == (8, CFG.out_dim)
    torch.testing.assert_close(out.embedding.norm(dim=-1), torch.ones(8))
    assert [lg.shape for lg in out.logits] == [(8, 2), (8, 3), (8, 5)]
    out.logits[-1].sum().backward()
    assert model.encoder.layers[0].attn.dist_bias.grad is not None


def test_training_and_eval_paths_agree():
    feats, views = _graph()
    model = HIRModel(CFG).train(False)
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    with_grad = model(batch, feats).embedding  # chunked path (autograd on)
    with torch.no_grad():
        no_grad = model(batch, feats).embedding
    torch.testing.assert_close(with_grad, no_grad, atol=1e-5, rtol=0)


def test_id_embedding_only_for_nodes_with_history():
    feats, views = _graph()
    model = HIRModel(CFG).train(False)
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    with torch.no_grad():
        base = model(batch, feats).embedding
        for node, expect_change in ((1, False), (2, True)):  # odd nodes have no history
            other = NodeFeatures(**{**feats.__dict__, "id_bucket": feats.id_bucket.clone()})
            other.id_bucket[node] = (other.id_bucket[node] + 1) % CFG.id_buckets
            out = model(batch, other).embedding
            assert torch.allclose(out[node], base[node]) != expect_change


def test_ablation_switches_remove_content_and_structural_bias():
    feats, views = _graph()
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    torch.manual_seed(0)
    no_content = HIRModel(dataclasses.replace(CFG, use_content=False)).eval()
    assert no_content.encoder.embed.content_proj is None
    changed = dataclasses.replace(feats, content=feats.content + 1.0)
    torch.testing.assert_close(no_content(batch, feats).embedding, no_content(batch, changed).embedding)

    plain = HIRModel(dataclasses.replace(CFG, structural_bias=False)).eval()
    attn = plain.encoder.layers[0].attn
    assert not attn.dist_bias.requires_grad and float(attn.dist_bias.abs().sum()) == 0.0
    far = [{**v, "dist": bytes(len(v["dist"]))} for v in views]  # every distance -> 0
    torch.testing.assert_close(plain(batch, feats).embedding,
                               plain(pack_views(far, pad_to=16, max_dist=CFG.max_dist), feats).embedding)
    biased = HIRModel(CFG).eval()
    assert not torch.allclose(biased(batch, feats).embedding,
                              biased(pack_views(far, pad_to=16, max_dist=CFG.max_dist), feats).embedding)


def test_content_is_not_drowned_by_the_id_type_and_degree_embeddings_at_initialisation():
    """A unit-norm content vector must weigh as much in a token as the learned lookup embeddings do from step one
    (N(0, 1) lookups once made content ~2 % of the token, and self-distillation clustered by type and degree)."""
    cfg = dataclasses.replace(CFG, hidden_dim=64, num_heads=4, content_dim=384)
    torch.manual_seed(0)
    embed = HIRModel(cfg).encoder.embed
    content = torch.nn.functional.normalize(torch.randn(256, cfg.content_dim), dim=-1)
    content_norm = embed.content_proj(content).norm(dim=-1).mean()
    for table in (embed.type_emb, embed.degree_emb, embed.id_emb):
        assert table.weight.norm(dim=-1).mean() < 2 * content_norm


def test_hidden_anchor_features_drop_its_id_and_content_only():
    """Anchor-feature masking: a hidden token keeps its type and degree but loses its ID and content terms, so the
    anchor's output no longer depends on them; the other views are unchanged, and ``to`` keeps the mask."""
    feats, views = _graph()
    model = HIRModel(CFG).train(False)
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    hidden = torch.zeros(batch.layout.seq_len, dtype=torch.bool)
    anchor_pos = batch.layout.anchor_positions()
    hidden[anchor_pos[2]] = True  # anchor 2 has history and content (type != 0)
    assert bool(feats.has_history[2]) and bool(feats.has_content[2])
    masked = dataclasses.replace(batch, hide_features=hidden).to("cpu")
    assert torch.equal(masked.hide_features, hidden)
    embed = model.encoder.embed
    with torch.no_grad():
        x = embed(batch.node_idx, feats, hidden)
        expected = embed.type_emb(feats.node_type[2]) + embed.degree_emb(feats.degree_bucket[2])
        torch.testing.assert_close(x[anchor_pos[2]], expected)
        torch.testing.assert_close(x[~hidden], embed(batch.node_idx, feats)[~hidden])
        changed = dataclasses.replace(feats, content=feats.content.clone(), id_bucket=feats.id_bucket.clone())
        changed.content[2] += 1.0
        changed.id_bucket[2] = (changed.id_bucket[2] + 1) % CFG.id_buckets
        a, b = model(masked, feats).embedding, model(masked, changed).embedding
        torch.testing.assert_close(a[2], b[2])
        assert not torch.allclose(model(batch, feats).embedding[2], model(batch, changed).embedding[2])
