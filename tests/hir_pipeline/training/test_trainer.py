"""Training loop: determinism, checkpoint/resume equivalence, learning on a planted toy graph, inference (of the
published encoder)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
import torch

from hir_pipeline.model import ModelConfig, TrainConfig
from hir_pipeline.model.batch import pack_views
from hir_pipeline.model.encoder import NodeInputEmbedding
from hir_pipeline.model.tree import majority_parents
from hir_pipeline.training import Trainer, augment_view, infer, latest_checkpoint
from hir_pipeline.training.toy import ToyGraphSettings, make_toy_graph

MODEL = ModelConfig(hidden_dim=16, num_layers=1, num_heads=2, out_dim=8, content_dim=8, id_buckets=64,
                    level_sizes=(2, 4), max_dist=3, attn_block_size=16, teacher_temp=0.07)


@pytest.fixture(scope="module")
def toy():
    return make_toy_graph(ToyGraphSettings(num_communities=2, users_per=6, items_per=4, content_dim=8, broad_cap=12,
                                           narrow_cap=6, id_buckets=64, seed=0))


def _train_cfg(tmp_path, **kw):
    base = dict(epochs=2, batch_size=8, engagement_batch_size=8, lr=3e-3, warmup_steps=2, log_every=1,
                pad_to=16, checkpoint_dir=str(tmp_path), seed=7)
    return TrainConfig(**{**base, **kw})


class _Crash(RuntimeError):
    pass


def test_resume_after_crash_equals_straight_training(toy, tmp_path):
    straight = Trainer(MODEL, _train_cfg(tmp_path / "a"), toy.features, toy.broad_views, toy.narrow_views,
                       toy.engagement)
    seen = []
    history = straight.fit()
    assert len(history) == 2

    def crash(epoch, metrics):
        seen.append((epoch, metrics))
        raise _Crash

    first = Trainer(MODEL, _train_cfg(tmp_path / "b"), toy.features, toy.broad_views, toy.narrow_views,
                    toy.engagement, on_epoch_end=crash)
    with pytest.raises(_Crash):
        first.fit()
    assert latest_checkpoint(tmp_path / "b").name == "epoch_0000.pt"
    resumed = Trainer(MODEL, _train_cfg(tmp_path / "b"), toy.features, toy.broad_views, toy.narrow_views,
                      toy.engagement)
    resumed_history = resumed.fit()

    assert seen[0][0] == 0 and {"loss", "dino", "engagement", "perplexity_level_0", "epoch_time_s"} <= set(seen[0][1])
    assert [h["loss"] for h in resumed_history] == [h["loss"] for h in history]
    for name in ("student", "teacher"):
        a, b = getattr(straight, name).state_dict(), getattr(resumed, name).state_dict()
        for key in a:
            assert torch.equal(a[key], b[key]), f"{name}.{key} differs after resume"
    for lvl in range(MODEL.num_levels):
        assert torch.equal(straight.loss_fn.center(lvl), resumed.loss_fn.center(lvl))


def test_a_time_budget_stops_after_an_epoch_with_its_checkpoint_and_a_later_fit_resumes(toy, tmp_path):
    from hir_pipeline.training.trainer import TrainingStopped

    straight = Trainer(MODEL, _train_cfg(tmp_path / "a", epochs=3), toy.features, toy.broad_views, toy.narrow_views,
                       toy.engagement).fit(stop_after_s=1e9)  # a budget never spent changes nothing
    seen = []
    stopped = Trainer(MODEL, _train_cfg(tmp_path / "b", epochs=3), toy.features, toy.broad_views, toy.narrow_views,
                      toy.engagement, on_epoch_end=lambda e, m: seen.append(e))
    with pytest.raises(TrainingStopped, match="after epoch 1/3") as stop:
        stopped.fit(stop_after_s=0.0)
    assert (stop.value.epochs_done, stop.value.planned, seen) == (1, 3, [0])
    assert latest_checkpoint(tmp_path / "b").name == "epoch_0000.pt"
    resumed = Trainer(MODEL, _train_cfg(tmp_path / "b", epochs=3), toy.features, toy.broad_views, toy.narrow_views,
                      toy.engagement).fit()
    assert [h["loss"] for h in resumed] == [h["loss"] for h in straight]


def test_batches_prepared_ahead_train_the_same_model_as_inline(toy, tmp_path):
    """Prefetching runs the same producer in a thread: same draws, same batches, the same model bit for bit."""
    trained = {}
    for depth in (0, 3):
        trainer = Trainer(MODEL, _train_cfg(tmp_path / str(depth), prefetch_batches=depth, epochs=3), toy.features,
                          toy.broad_views, toy.narrow_views, toy.engagement)
        trained[depth] = (trainer.fit(), trainer.student.state_dict(), trainer.teacher.state_dict())
    assert Trainer(MODEL, _train_cfg(tmp_path / "auto"), toy.features, toy.broad_views).prefetch_depth == 0  # CPU
    (inline, s0, t0), (ahead, s3, t3) = trained[0], trained[3]
    assert [h["loss"] for h in ahead] == [h["loss"] for h in inline]
    assert all(torch.equal(s0[k], s3[k]) for k in s0) and all(torch.equal(t0[k], t3[k]) for k in t0)


def test_a_failing_step_stops_the_batch_producer(toy, tmp_path, monkeypatch):
    import threading

    trainer = Trainer(MODEL, _train_cfg(tmp_path, prefetch_batches=2), toy.features, toy.broad_views,
                      toy.narrow_views, toy.engagement)
    prepared = []
    prepare = trainer.prepare_step
    monkeypatch.setattr(trainer, "prepare_step", lambda *a: prepared.append(1) or prepare(*a))

    def fail(step, batch):
        raise _Crash(f"step {step}")

    monkeypatch.setattr(trainer, "run_step", fail)
    with pytest.raises(_Crash, match="step 0"):
        trainer.fit()
    assert not [t for t in threading.enumerate() if t.name == "hir-batch-prefetch"]
    assert len(prepared) <= 1 + 2 + 1  # the failed step's batch, the queue's two, at most one in the making


class _Payload:
    """Unpickling this runs ``Path.touch`` on a file: what a tampered checkpoint could make ``torch.load`` do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (type(self.marker).touch, (self.marker,))


def test_a_checkpoint_holding_code_is_refused_not_run(toy, tmp_path):
    marker, checkpoints = tmp_path / "code-ran", tmp_path / "ckpt"
    checkpoints.mkdir()
    torch.save({"epoch": 1, "payload": _Payload(marker)}, checkpoints / "epoch_0000.pt")
    trainer = Trainer(MODEL, _train_cfg(checkpoints), toy.features, toy.broad_views, toy.narrow_views,
                      toy.engagement)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        trainer.maybe_resume()
    assert not marker.exists(), "torch.load ran the checkpoint's code"


def test_loss_decreases_on_planted_structure(toy):
    # A frozen teacher (EMA momentum 1) and frozen centers give stationary DINO targets (in real training the
    # targets move and the DINO loss is not monotone): the student must fit them and the engagement pairs.
    # Self-distillation alone (no cross-entity term pulling towards the partners' targets): the DINO loss must fall.
    model = ModelConfig(**{**MODEL.__dict__, "center_momentum": 1.0, "cross_entity_weight": 0.0})
    cfg = TrainConfig(epochs=15, batch_size=8, engagement_batch_size=16, lr=1e-2, warmup_steps=2, log_every=0,
                      pad_to=16, ema_momentum=1.0, ema_momentum_end=1.0, seed=1)
    trainer = Trainer(model, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    history = trainer.fit()
    assert history[-1]["loss"] < 0.85 * history[0]["loss"]
    assert history[-1]["engagement"] < 0.85 * history[0]["engagement"]
    assert history[-1]["dino"] < history[0]["dino"]
    for lvl, k in enumerate(MODEL.level_sizes):
        assert 1.0 <= history[-1][f"perplexity_level_{lvl}"] <= k + 1e-6


def test_infer_embeds_every_node(toy):
    trainer = Trainer(MODEL, TrainConfig(epochs=1, batch_size=16, pad_to=16, log_every=0, warmup_steps=1),
                      toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    trainer.fit()
    views = toy.broad_views[:-3]  # the last nodes have no view: embedded from their own features
    res = infer(trainer.teacher, toy.features, views, batch_size=7, pad_to=16, max_tokens=40)
    n = toy.features.num_nodes
    assert res.embeddings.shape == (n, MODEL.out_dim)
    np.testing.assert_allclose(np.linalg.norm(res.embeddings, axis=1), 1.0, atol=1e-5)
    assert [p.shape for p in res.probs] == [(n, 2), (n, 4)]
    np.testing.assert_allclose(res.probs[1].sum(1), 1.0, atol=1e-5)
    assert res.parent_maps[0].shape == (4,) and res.has_view.sum() == n - 3
    # the published tree: a fine cluster's parent is the coarse cluster most of its members fall into
    fine, coarse = res.probs[1].argmax(1), res.probs[0].argmax(1)
    nearest = trainer.teacher.hierarchy.parent_maps()[0].numpy()
    np.testing.assert_array_equal(res.parent_maps[0], majority_parents(fine, coarse, 4, nearest))
    for k in range(4):
        members = coarse[fine == k]
        if len(members):
            assert (members == res.parent_maps[0][k]).sum() == np.bincount(members).max()
        else:
            assert res.parent_maps[0][k] == nearest[k]
    # batching does not change results
    again = infer(trainer.teacher, toy.features, views, batch_size=64, pad_to=16)
    np.testing.assert_allclose(res.embeddings, again.embeddings, atol=1e-5)
    centred = trainer.infer(toy.broad_views)
    assert centred.embeddings.shape == (n, MODEL.out_dim)


def test_published_encoder_selects_the_network_and_its_calibration(toy):
    """``published_encoder`` picks the student (default) or the EMA teacher for the embedding *and* the cluster
    probabilities: each equals that network's own forward (student: softmax(logits / student_temp), uncentred;
    teacher: softmax((logits - center) / teacher_temp)); after a few steps the two differ. (The learned
    prototypes: refinement is tested below.)"""
    cfg = TrainConfig(epochs=2, batch_size=8, engagement_batch_size=8, lr=3e-3, warmup_steps=2, log_every=0,
                      pad_to=16, seed=7, prototype_refinement_iters=0)
    assert cfg.published_encoder == "student"
    trainer = Trainer(MODEL, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    trainer.fit()
    assert trainer.encoder() is trainer.student and trainer.encoder("teacher") is trainer.teacher
    views = toy.broad_views
    got = {"student": trainer.infer(views), "teacher": trainer.infer(views, which="teacher")}
    assert not np.allclose(got["student"].embeddings, got["teacher"].embeddings, atol=1e-3)
    assert not np.allclose(got["student"].probs[1], got["teacher"].probs[1], atol=1e-3)

    batch = pack_views(views[:5], pad_to=16, max_dist=MODEL.max_dist)
    rows = [int(v["anchor_idx"]) for v in views[:5]]
    centers = trainer.centers()
    for which, model in (("student", trainer.student), ("teacher", trainer.teacher)):
        was_training = model.training
        model.train(False)
        with torch.no_grad():
            out = model(batch, trainer.features)
        model.train(was_training)
        np.testing.assert_allclose(got[which].embeddings[rows], out.embedding.numpy(), atol=1e-5)
        for lvl, logits in enumerate(out.logits):
            if which == "student":
                expected = torch.softmax(logits / MODEL.student_temp, -1)
            else:
                expected = torch.softmax((logits - centers[lvl]) / MODEL.teacher_temp, -1)
            np.testing.assert_allclose(got[which].probs[lvl][rows], expected.numpy(), atol=1e-5)
    assert trainer.student.training  # inference restores the training mode

    # By default each network embeds the views it was trained on: the student its narrow views, the teacher
    # its broad ones.
    narrow = {int(v["anchor_idx"]): v for v in toy.narrow_views}
    assert [int(v["anchor_idx"]) for v in trainer.training_views()] == sorted(narrow)
    assert all(v is narrow[int(v["anchor_idx"])] for v in trainer.training_views())
    assert trainer.views_name() == "narrow" and trainer.views_name("teacher") == "broad"
    np.testing.assert_array_equal(trainer.infer().embeddings, trainer.infer(toy.narrow_views).embeddings)
    assert not np.allclose(trainer.infer().embeddings, got["student"].embeddings, atol=1e-3)  # narrow != broad

    trainer.cfg = dataclasses.replace(trainer.cfg, published_encoder="teacher")
    assert trainer.encoder() is trainer.teacher
    np.testing.assert_array_equal(trainer.infer(views).embeddings, got["teacher"].embeddings)
    np.testing.assert_array_equal(trainer.infer().embeddings, got["teacher"].embeddings)
    with pytest.raises(ValueError, match="published_encoder"):
        TrainConfig(published_encoder="ema")


@pytest.mark.parametrize("which", ["student", "teacher"])
def test_refined_prototypes_are_published_with_the_probabilities_of_the_model_forward(toy, which):
    """With ``prototype_refinement_iters`` the published network's prototypes are moved by spherical k-means over
    every node's head projection (started from the learned ones) before the probabilities are computed: the
    embeddings do not change, every prototype wins nodes (a prototype that starts empty is re-seeded), the
    probabilities are the refined model's own forward (the teacher's without the centers, which belonged to the
    learned prototypes), and training again starts from the learned prototypes."""
    cfg = TrainConfig(epochs=1, batch_size=8, engagement_batch_size=8, lr=3e-3, warmup_steps=2, log_every=0,
                      pad_to=16, seed=7, published_encoder=which)
    plain = Trainer(MODEL, dataclasses.replace(cfg, prototype_refinement_iters=0), toy.features, toy.broad_views,
                    toy.narrow_views, toy.engagement)
    refined = Trainer(MODEL, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    plain.fit()
    refined.fit()
    with torch.no_grad():  # start one prototype of the fine level on top of another: it wins no node at first
        refined.encoder().hierarchy.prototypes[1][3] = refined.encoder().hierarchy.prototypes[1][0]
    learned = pickle.dumps(refined.state_dict())
    before, after = plain.infer(), refined.infer()
    assert which in refined.refined and not plain.refined
    np.testing.assert_array_equal(before.embeddings, after.embeddings)
    assert not np.allclose(before.probs[1], after.probs[1], atol=1e-3)
    assert set(after.probs[1].argmax(1)) == set(range(MODEL.level_sizes[1]))  # every fine prototype wins nodes
    model = refined.encoder()
    views = refined.training_views()[:5]
    rows = [int(v["anchor_idx"]) for v in views]
    temperature = MODEL.student_temp if which == "student" else MODEL.teacher_temp
    assert refined.output_calibration() == (temperature, None)
    model.train(False)
    with torch.no_grad():
        out = model(pack_views(views, pad_to=16, max_dist=MODEL.max_dist), refined.features)
    for lvl, logits in enumerate(out.logits):
        np.testing.assert_allclose(after.probs[lvl][rows], torch.softmax(logits / temperature, -1).numpy(),
                                   atol=1e-5)
    np.testing.assert_array_equal(refined.infer().probs[1], after.probs[1])  # refined once, then as published
    refined.load_state_dict(pickle.loads(learned))  # a checkpoint holds the learned prototypes: refined again
    assert not refined.refined
    assert torch.equal(model.hierarchy.prototypes[1][3], model.hierarchy.prototypes[1][0])
    np.testing.assert_array_equal(refined.infer().probs[1], after.probs[1])


def test_augment_view_keeps_anchor_and_symmetry(toy):
    rng = np.random.default_rng(0)
    view = toy.broad_views[0]
    aug = augment_view(view, rng, node_dropout=0.5, edge_dropout=0.5)
    m = len(aug["nodes"])
    assert aug["nodes"][0] == view["anchor_idx"] and m <= len(view["nodes"])
    edges = aug["edge_types"].reshape(m, m)
    assert np.array_equal(edges > 0, (edges > 0).T)
    assert aug["dist"].size == m * m
    same = augment_view(view, np.random.default_rng(0), 0.0, 0.0)
    assert list(same["nodes"]) == list(view["nodes"])


def _without_pair(features, engagement, user, item, cap):
    users, items, weight = engagement
    keep = ~((users == user) & (items == item))
    return features.with_history((users[keep], items[keep], weight[keep]), cap)


def test_the_scored_pair_is_left_out_of_its_own_pools_in_training(toy):
    """In a training step every token of a pair's user and item views is embedded exactly as if the pair were not
    in the history (its target cannot be read off the user's pool, nor the user off the item's), while the
    anchors' views keep their full histories."""
    cfg = TrainConfig(epochs=1, batch_size=4, engagement_batch_size=1, lr=3e-3, warmup_steps=1, log_every=0,
                      pad_to=16, seed=3)
    # No crops and no hidden anchor features: the batch is the 4 anchor views, then the pair's two views.
    model = dataclasses.replace(MODEL, multi_crop_share=0.0, anchor_feature_mask=0.0)
    trainer = Trainer(model, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    assert trainer.features.history is not None  # built from the engagement pairs
    seen = {}
    trainer.student.register_forward_pre_hook(lambda m, args: seen.update(batch=args[0]))
    trainer.student.encoder.embed.register_forward_hook(  # the token inputs and the weights that made them
        lambda m, args, out: seen.update(out=out.detach().clone(), state=copy.deepcopy(m.state_dict())))
    k = 5
    user, item = (int(x[k]) for x in trainer.pairs[:2])
    trainer.train_step(0, trainer.anchors[:4], np.random.default_rng(0), np.array([k]))

    embed = NodeInputEmbedding(MODEL)
    embed.load_state_dict(seen["state"])
    batch = seen["batch"]
    without = _without_pair(trainer.features, toy.engagement, user, item, MODEL.history_max_neighbours)
    with torch.no_grad():
        full = embed(batch.node_idx, trainer.features)
        left_out = embed(batch.node_idx, without)
    view = batch.layout.view_id.long()
    in_pair_views = (view >= 4) & (view < 6)
    torch.testing.assert_close(seen["out"][in_pair_views], left_out[in_pair_views], atol=1e-6, rtol=0)
    torch.testing.assert_close(seen["out"][view < 4], full[view < 4], atol=1e-6, rtol=0)
    ends = in_pair_views & ((batch.node_idx == user) | (batch.node_idx == item))
    assert ends.sum() >= 2  # both anchors at least
    assert not torch.allclose(seen["out"][ends], full[ends], atol=1e-4)  # a leaked pool would equal the full one


def test_published_embedding_pools_the_full_history(toy):
    trainer = Trainer(MODEL, TrainConfig(epochs=1, batch_size=16, pad_to=16, log_every=0, warmup_steps=1),
                      toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    trainer.fit()
    res = trainer.infer()
    user, item = (int(x[0]) for x in toy.engagement[:2])
    view = [v for v in trainer.training_views() if int(v["anchor_idx"]) == user]
    batch = pack_views(view, pad_to=16, max_dist=MODEL.max_dist)
    without = _without_pair(trainer.features, toy.engagement, user, item, MODEL.history_max_neighbours)
    trainer.student.train(False)
    with torch.no_grad():
        full = trainer.student(batch, trainer.features).embedding[0].numpy()
        partial = trainer.student(batch, without).embedding[0].numpy()
    np.testing.assert_allclose(res.embeddings[user], full, atol=1e-5)
    assert not np.allclose(res.embeddings[user], partial, atol=1e-4)


def test_id_tables_have_their_own_learning_rate_and_no_weight_decay(toy):
    def fitted(**kw):
        cfg = TrainConfig(epochs=1, batch_size=8, engagement_batch_size=8, lr=1e-3, warmup_steps=1, log_every=0,
                          pad_to=16, seed=2, weight_decay=0.5, **kw)
        trainer = Trainer(MODEL, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
        before = {n: p.detach().clone() for n, p in trainer.student.named_parameters()}
        trainer.fit()
        return trainer, before

    trainer, before = fitted(id_lr=0.05)
    embed = trainer.student.encoder.embed
    tables = {id(embed.id_emb.weight), id(embed.hist_emb.weight)}
    groups = trainer.optimizer.param_groups
    own = [g for g in groups if tables & {id(p) for p in g["params"]}]
    assert len(own) == 1 and {id(p) for p in own[0]["params"]} == tables and own[0]["weight_decay"] == 0.0
    last = trainer.total_steps - 1
    assert own[0]["lr"] == pytest.approx(trainer.lr_at(last, 0.05)) and groups[0]["lr"] == trainer.lr_at(last)
    assert own[0]["lr"] == pytest.approx(50 * groups[0]["lr"])  # the same schedule, scaled to its own peak
    # Rows of no node (the toy's 20 nodes with history get rows 0..19 of 64) are left alone: no weight decay ...
    used = int(trainer.features.has_history.sum())
    after = dict(trainer.student.named_parameters())
    for name in ("encoder.embed.id_emb.weight", "encoder.embed.hist_emb.weight"):
        assert torch.equal(after[name][used:], before[name][used:])
        assert not torch.equal(after[name][:used], before[name][:used])
    # ... while the other weights decay and learn.
    assert not torch.equal(after["encoder.embed.hist_proj.weight"], before["encoder.embed.hist_proj.weight"])

    frozen, before = fitted(id_lr=0.0)  # the tables follow their own rate only
    after = dict(frozen.student.named_parameters())
    assert torch.equal(after["encoder.embed.id_emb.weight"], before["encoder.embed.id_emb.weight"])
    assert torch.equal(after["encoder.embed.hist_emb.weight"], before["encoder.embed.hist_emb.weight"])
    assert not torch.equal(after["encoder.embed.type_emb.weight"], before["encoder.embed.type_emb.weight"])


def test_pair_views_hold_no_edge_between_the_pair(toy):
    trainer = Trainer(MODEL, TrainConfig(epochs=1, batch_size=8, pad_to=16, log_every=0), toy.features,
                      toy.broad_views, toy.narrow_views, toy.engagement)
    users, items, _ = trainer.pairs
    narrow = {int(v["anchor_idx"]): v for v in toy.narrow_views}
    assert any(int(i) in set(np.asarray(narrow[int(u)]["nodes"]).tolist()) for u, i in zip(users, items, strict=True))
    views = trainer.pair_views(users, items)
    p = len(users)
    for k, (u, i) in enumerate(zip(users, items, strict=True)):
        assert int(views[k]["anchor_idx"]) == u and int(i) not in np.asarray(views[k]["nodes"]).tolist()
        assert int(views[p + k]["anchor_idx"]) == i and int(u) not in np.asarray(views[p + k]["nodes"]).tolist()
    kept = Trainer(dataclasses.replace(MODEL, hide_target_edge=False), trainer.cfg, toy.features, toy.broad_views,
                   toy.narrow_views, toy.engagement).pair_views(users[:3], items[:3])
    assert all(v is narrow[int(v["anchor_idx"])] for v in kept)


def test_student_sees_broad_crops_and_masked_anchors_and_cross_entity_targets_come_from_the_teacher(toy):
    """One step with multi-crop on half the anchors and every anchor's features hidden: the student's packed batch
    holds B narrow + B / 2 broad crops + 2P pair views, the hidden tokens are exactly the B + B / 2 crop anchors
    (pair views are never masked); the cross-entity bank then holds the step's teacher targets."""
    model = dataclasses.replace(MODEL, multi_crop_share=0.5, anchor_feature_mask=1.0, cross_entity_weight=1.0)
    cfg = TrainConfig(epochs=1, batch_size=8, engagement_batch_size=6, pad_to=16, log_every=0, warmup_steps=1)
    trainer = Trainer(model, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    seen = []
    trainer.student.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    anchors = np.arange(8)
    rng = np.random.default_rng(0)
    out = trainer.train_step(0, anchors, rng, trainer.sampler.draw(rng, 6))
    batch = seen[-1]
    assert batch.num_views == 8 + 4 + 2 * 6
    crop_anchors = batch.layout.anchor_positions()[:12]
    assert batch.hide_features.sum() == 12 and bool(batch.hide_features[crop_anchors].all())
    assert batch.anchor_idx[:12].tolist() == [*range(8), *range(4)]
    broad = {int(v["anchor_idx"]): v for v in toy.broad_views}
    # the broad crops are augmented broad views: never more nodes than the broad view, anchors first
    starts = batch.layout.anchor_positions().tolist() + [int(batch.token_mask.sum())]
    for k in range(8, 12):
        a = k - 8
        assert starts[k + 1] - starts[k] <= len(broad[a]["nodes"])
    for lvl, probs in enumerate(out["teacher_probs"]):
        torch.testing.assert_close(trainer.bank[lvl][torch.as_tensor(anchors)].float(), probs, atol=1e-3, rtol=0)
    assert bool(trainer.bank_filled[:8].all()) and not bool(trainer.bank_filled[8:].any())
    assert out["cross_entity"] == 0.0  # the bank was empty before this step
    # a node with a partner among those anchors now gets a cross-entity target
    indptr, partners, _ = (t.numpy() for t in trainer.partners)
    node = next(x for x in range(8, len(indptr) - 1) if (partners[indptr[x]:indptr[x + 1]] < 8).any())
    assert trainer.train_step(1, np.array([node]), rng, None)["cross_entity"] > 0.0


def test_engagement_temperature_is_learned_or_fixed(toy):
    cfg = TrainConfig(epochs=2, batch_size=8, engagement_batch_size=8, lr=1e-2, warmup_steps=1, log_every=0,
                      pad_to=16, seed=3)
    learned = Trainer(MODEL, cfg, toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
    assert any(learned.engagement_temp.log_temp is p for g in learned.optimizer.param_groups for p in g["params"])
    history = learned.fit()
    assert history[-1]["engagement_temp"] != pytest.approx(MODEL.engagement_temp, abs=1e-4)
    assert float(learned.engagement_temp().detach()) >= MODEL.engagement_temp_min
    fixed = Trainer(dataclasses.replace(MODEL, engagement_temp_mode="fixed"), cfg, toy.features, toy.broad_views,
                    toy.narrow_views, toy.engagement)
    assert fixed.fit()[-1]["engagement_temp"] == pytest.approx(MODEL.engagement_temp)
    with pytest.raises(ValueError, match="engagement_temp_mode"):
        ModelConfig(engagement_temp_mode="tuned")


def test_a_schedule_budget_drops_the_epochs_that_do_not_fit_and_ends_the_schedules_there(toy, tmp_path):
    def trained(budget):
        trainer = Trainer(MODEL, _train_cfg(tmp_path / str(budget), epochs=4, schedule_budget_s=budget),
                          toy.features, toy.broad_views, toy.narrow_views, toy.engagement)
        return trainer, trainer.fit()

    # A budget spent by the first epoch: that epoch is the last, and the schedules end with it.
    tight, history = trained(1e-6)
    assert len(history) == 1 and history[0]["planned_epochs"] == 1 and tight.epochs == 1
    assert tight.total_steps == tight.steps_per_epoch
    assert tight.lr_at(tight.total_steps) == pytest.approx(tight.cfg.min_lr)
    # A budget every epoch fits: the planned schedule, unchanged.
    loose, history = trained(1e6)
    assert len(history) == 4 and [h["planned_epochs"] for h in history] == [4] * 4
    assert loose.total_steps == 4 * loose.steps_per_epoch
    with pytest.raises(ValueError, match="schedule_budget_s"):
        TrainConfig(schedule_budget_s=0)
