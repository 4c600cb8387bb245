"""Encoder, packing and node features."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hir_pipeline.model import HIRModel, ModelConfig, NodeColumns, NodeFeatures, hash_id_buckets, pack_views

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

CFG = ModelConfig(hidden_dim=16, num_layers=2, num_heads=2, out_dim=8, content_dim=6, id_buckets=31,
                  level_sizes=(2, 3, 5), max_dist=3, attn_block_size=16, dropout=0.0)


def _graph(n=30, seed=0):
    rng = np.random.default_rng(seed)
    node_type = rng.integers(0, 6, n)
    content = rng.normal(size=(n, CFG.content_dim)).astype(np.float32)
    has_content = node_type != 0
    nodes = NodeColumns([f"id{i}" for i in range(n)], node_type, rng.integers(0, 16, n), np.arange(n) % 2 == 0)
    feats = NodeFeatures.from_arrays(nodes, CFG.id_buckets, content, has_content)
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
    grad = model.encoder.layers[0].attn.dist_bias.grad
    assert grad is not None and grad.abs().sum() > 0  # the distance bias is learned through the attention


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


def _with_history(feats, seed=0):
    """``feats`` with a random engagement history between its nodes with history (the even ones)."""
    rng = np.random.default_rng(seed)
    even = np.arange(0, feats.num_nodes, 2)
    users, items = rng.choice(even[even < 10], 40), rng.choice(even[even >= 10], 40)
    return feats.with_history((users, items, rng.integers(1, 4, 40).astype(np.float32))), (users, items)


def test_history_term_pools_the_neighbours_id_rows_and_content():
    feats, views = _graph()
    feats, (users, items) = _with_history(feats)
    embed = HIRModel(CFG).encoder.embed.train(False)
    assert [t.shape for t in embed.id_tables()] == [(CFG.id_buckets, CFG.hidden_dim)] * 2
    node = int(users[0])
    nbrs = set(items[users == node].tolist())
    stranger = next(j for j in items.tolist() if j not in nbrs)
    token = torch.tensor([node])
    with torch.no_grad():
        base = embed(token, feats)
        for j, expect_change in ((next(iter(nbrs)), True), (stranger, False)):
            saved = embed.hist_emb.weight[feats.id_bucket[j]].clone()
            embed.hist_emb.weight[feats.id_bucket[j]] += 1.0
            assert (not torch.allclose(embed(token, feats), base)) == expect_change
            embed.hist_emb.weight[feats.id_bucket[j]] = saved
        content = feats.content.clone()
        content[next(iter(nbrs))] += 1.0  # a neighbour's content reaches the user through the pooled content
        assert not torch.allclose(embed(token, dataclasses.replace(feats, content=content)), base)
        no_history = int(np.flatnonzero(~feats.has_history.numpy())[0])
        before = embed(torch.tensor([no_history]), feats)
        embed.hist_emb.weight.add_(1.0)
        torch.testing.assert_close(embed(torch.tensor([no_history]), feats), before)  # no history, no pool


def test_history_switches_and_the_excluded_pair_reach_the_token():
    feats, views = _graph()
    feats, (users, items) = _with_history(feats)
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    torch.manual_seed(0)
    off = HIRModel(dataclasses.replace(CFG, use_history=False)).eval()
    assert off.encoder.embed.hist_emb is None and len(off.encoder.embed.id_tables()) == 1
    torch.testing.assert_close(off(batch, feats).embedding, off(batch, dataclasses.replace(feats, history=None))
                               .embedding)
    ids_only = HIRModel(dataclasses.replace(CFG, history_content=False)).eval()
    assert ids_only.encoder.embed.hist_emb is not None and ids_only.encoder.embed.hist_content_proj is None

    model = HIRModel(CFG).eval()
    assert not torch.allclose(model(batch, feats).embedding, model(batch, dataclasses.replace(feats, history=None))
                              .embedding)
    # Leaving (u, i) out in the view of u equals training on a history without that pair.
    k = int(np.flatnonzero(users < 8)[0])  # anchors 0..7 have a view
    u, i = int(users[k]), int(items[k])
    anchor_view = [v for v in views if int(v["anchor_idx"]) == u]
    one = pack_views(anchor_view, pad_to=16, max_dist=CFG.max_dist)
    one.history_exclude = torch.where(one.node_idx == u, torch.tensor(i), torch.tensor(-1))
    keep = ~((users == u) & (items == i))
    weights = np.ones(len(users), dtype=np.float32)
    lhs_feats = feats.with_history((users, items, weights))
    rhs_feats = feats.with_history((users[keep], items[keep], weights[keep]))
    with torch.no_grad():
        left_out = model(one, lhs_feats).embedding
        without = model(pack_views(anchor_view, pad_to=16, max_dist=CFG.max_dist), rhs_feats).embedding
        full = model(pack_views(anchor_view, pad_to=16, max_dist=CFG.max_dist), lhs_feats).embedding
    torch.testing.assert_close(left_out, without, atol=1e-6, rtol=0)
    assert not torch.allclose(left_out, full, atol=1e-4)


def _with_structure(feats: NodeFeatures, dim: int = 5, seed: int = 1) -> NodeFeatures:
    """``feats`` plus unit-norm structure rows for even nodes and zero rows (no embedding) for odd ones."""
    rng = np.random.default_rng(seed)
    rows = torch.nn.functional.normalize(torch.as_tensor(rng.normal(size=(feats.num_nodes, dim)), dtype=torch.float32),
                                         dim=-1)
    rows[1::2] = 0.0
    return dataclasses.replace(feats, structure=rows)


def test_structure_embedding_is_one_more_input_term():
    feats, views = _graph()
    feats = _with_structure(feats)
    cfg = dataclasses.replace(CFG, structure_dim=5)
    batch = pack_views(views, pad_to=16, max_dist=CFG.max_dist)
    torch.manual_seed(0)
    model = HIRModel(cfg).eval()
    embed = model.encoder.embed
    assert embed.structure_proj is not None and embed.structure_proj.bias is None
    nodes = torch.arange(feats.num_nodes)
    with torch.no_grad():
        without = embed(nodes, dataclasses.replace(feats, structure=torch.zeros_like(feats.structure)))
        torch.testing.assert_close(embed(nodes, feats) - without, embed.structure_proj(feats.structure))
        base = model(batch, feats).embedding
        moved = feats.structure.clone()
        moved[0] = torch.roll(moved[0], 1)  # node 0 (an anchor) gets another structure vector
        assert not torch.allclose(model(batch, dataclasses.replace(feats, structure=moved)).embedding[0], base[0])
    off = HIRModel(dataclasses.replace(cfg, use_structure_embedding=False)).eval()
    assert off.encoder.embed.structure_proj is None
    changed = dataclasses.replace(feats, structure=feats.structure + 1.0)
    torch.testing.assert_close(off(batch, feats).embedding, off(batch, changed).embedding)
    # Width 0 (inputs without the embedding) builds no projection either.
    assert HIRModel(CFG).encoder.embed.structure_proj is None


def test_structure_term_starts_small_next_to_content():
    cfg = dataclasses.replace(CFG, hidden_dim=64, num_heads=4, content_dim=384, structure_dim=64)
    torch.manual_seed(0)
    embed = HIRModel(cfg).encoder.embed
    content = torch.nn.functional.normalize(torch.randn(256, cfg.content_dim), dim=-1)
    structure = torch.nn.functional.normalize(torch.randn(256, cfg.structure_dim), dim=-1)
    assert embed.structure_proj(structure).norm(dim=-1).mean() < embed.content_proj(content).norm(dim=-1).mean()


def test_node_features_default_to_no_structure():
    feats, _ = _graph()
    assert feats.structure.shape == (feats.num_nodes, 0)
    rows = np.ones((feats.num_nodes, 3), dtype=np.float32)
    nodes = NodeColumns([f"id{i}" for i in range(feats.num_nodes)], feats.node_type, feats.degree_bucket,
                        feats.has_history)
    built = NodeFeatures.from_arrays(nodes, CFG.id_buckets, structure=rows)
    assert built.structure.dtype == torch.float32 and built.structure.shape == (feats.num_nodes, 3)
    assert built.to("cpu").structure.shape == (feats.num_nodes, 3)


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
        x = embed(batch.node_idx, feats, hide=hidden)
        expected = embed.type_emb(feats.node_type[2]) + embed.degree_emb(feats.degree_bucket[2])
        torch.testing.assert_close(x[anchor_pos[2]], expected)
        torch.testing.assert_close(x[~hidden], embed(batch.node_idx, feats)[~hidden])
        changed = dataclasses.replace(feats, content=feats.content.clone(), id_bucket=feats.id_bucket.clone())
        changed.content[2] += 1.0
        changed.id_bucket[2] = (changed.id_bucket[2] + 1) % CFG.id_buckets
        a, b = model(masked, feats).embedding, model(masked, changed).embedding
        torch.testing.assert_close(a[2], b[2])
        assert not torch.allclose(model(batch, feats).embedding[2], model(batch, changed).embedding[2])
