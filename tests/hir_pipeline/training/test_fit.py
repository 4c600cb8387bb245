"""fit_and_embed: every node embedded, fixed seed = identical results on CPU, resume, stale checkpoints, the
published encoder."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from hir_pipeline.model import ModelConfig, TrainConfig
from hir_pipeline.model.features import hash_id_buckets
from hir_pipeline.training.fit import FINGERPRINT_FILE, fit_and_embed, resolve_model_config, run_fingerprint
from hir_pipeline.training.inference import infer
from hir_pipeline.training.inputs import ModelInputs
from hir_pipeline.training.toy import ToyGraphSettings
from tests.toy_inputs import toy_model_inputs

MODEL = ModelConfig(hidden_dim=16, num_layers=1, num_heads=2, out_dim=8, content_dim=999, id_buckets=64,
                    level_sizes=(2, 4), max_dist=3, num_edge_types=4, attn_block_size=16, teacher_temp=0.07)
TRAIN = TrainConfig(epochs=2, batch_size=8, engagement_batch_size=8, lr=3e-3, warmup_steps=2, log_every=0,
                    pad_to=16, seed=5, device="cpu")
NO_VIEW = 3  # the last nodes get no view: embedded from their own features


@pytest.fixture(scope="module")
def inputs() -> ModelInputs:
    return toy_model_inputs(ToyGraphSettings(num_communities=2, users_per=6, items_per=4, content_dim=8,
                                             broad_cap=12, narrow_cap=6, id_buckets=64, seed=0), without_view=NO_VIEW)


@pytest.fixture(scope="module")
def straight(inputs, tmp_path_factory):
    # Same intra-op thread count as the tests (conftest): CPU float reductions are reproducible for a fixed seed
    # *and* thread count, not across thread counts.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit_and_embed(inputs, MODEL, TRAIN, tmp_path_factory.mktemp("straight"))
    finally:
        torch.set_num_threads(before)


def test_every_node_embedded_and_seed_reproducible(inputs, straight, tmp_path):
    n = inputs.num_nodes
    res = straight.inference
    assert res.embeddings.shape == (n, MODEL.out_dim) and np.isfinite(res.embeddings).all()
    np.testing.assert_allclose(np.linalg.norm(res.embeddings, axis=1), 1.0, atol=1e-5)
    assert [p.shape for p in res.probs] == [(n, 2), (n, 4)]
    assert res.has_view.tolist() == [True] * (n - NO_VIEW) + [False] * NO_VIEW
    assert straight.model_cfg.content_dim == 8 and straight.model_cfg.num_edge_types == 10  # fitted to the data
    assert straight.device == "cpu" and not straight.bf16 and straight.resumed_epochs == 0
    assert [h["epoch"] for h in straight.history] == [0, 1] and "perplexity_level_1" in straight.final_metrics
    assert [p.shape for p in straight.prototypes] == [(2, 8), (4, 8)]
    assert straight.centers is None and straight.temperature == MODEL.student_temp  # the student is published

    again = fit_and_embed(inputs, MODEL, TRAIN, tmp_path / "again")
    np.testing.assert_array_equal(again.inference.embeddings, res.embeddings)
    for a, b in zip(again.inference.probs, res.probs, strict=True):
        np.testing.assert_array_equal(a, b)
    other = fit_and_embed(inputs, MODEL, dataclasses.replace(TRAIN, seed=6), tmp_path / "other")
    assert not np.allclose(other.inference.embeddings, res.embeddings)


def test_published_encoder_is_the_returned_model_and_produced_the_outputs(inputs, straight, tmp_path):
    """The student (default) and the teacher run train the same networks; each publishes its own outputs, and
    ``FitResult.model`` (what the asset logs to MLflow) with its temperature and centers reproduces them."""
    teacher = fit_and_embed(inputs, MODEL, dataclasses.replace(TRAIN, published_encoder="teacher"), tmp_path)
    assert straight.train_cfg.published_encoder == "student" and teacher.train_cfg.published_encoder == "teacher"
    assert teacher.fingerprint != straight.fingerprint
    assert [h["loss"] for h in teacher.history] == [h["loss"] for h in straight.history]  # same training
    assert not np.allclose(teacher.inference.embeddings, straight.inference.embeddings, atol=1e-3)
    # the published prototypes are refined (TrainConfig.prototype_refinement_iters): the teacher's centers, a
    # running mean of its learned prototypes' logits, no longer apply
    assert teacher.centers is None and teacher.temperature == MODEL.teacher_temp
    assert (straight.views, teacher.views) == ("narrow", "broad")  # each embeds the views it was trained on
    for res in (straight, teacher):
        assert not res.model.training
        features = inputs.features(res.model_cfg)
        centers = None if res.centers is None else [torch.from_numpy(c) for c in res.centers]
        views = inputs.narrow_views if res.views == "narrow" else inputs.broad_views
        again = infer(res.model, features, views, pad_to=TRAIN.pad_to, temperature=res.temperature,
                      centers=centers)
        np.testing.assert_allclose(again.embeddings, res.inference.embeddings, atol=1e-6)
        for a, b in zip(again.probs, res.inference.probs, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)
        for proto, published in zip(res.model.hierarchy.prototypes, res.prototypes, strict=True):
            np.testing.assert_allclose(torch.nn.functional.normalize(proto.detach(), dim=-1).numpy(), published,
                                       atol=1e-6)
    assert not np.allclose(teacher.prototypes[1], straight.prototypes[1], atol=1e-4)


def test_id_table_is_exact_while_the_nodes_with_history_fit(inputs, straight):
    """20 toy nodes with history and 64 configured rows: one row each, the table shrunk to 20; with fewer rows
    than nodes (or ``exact_ids=False``) the configured rows are kept and the IDs hashed."""
    with_history = int(inputs.has_history.sum())
    assert straight.model_cfg.id_buckets == with_history == 20
    assert straight.model.encoder.embed.id_emb.num_embeddings == with_history
    exact = inputs.features(straight.model_cfg)
    assert sorted(exact.id_bucket[exact.has_history].tolist()) == list(range(with_history))
    for cfg in (dataclasses.replace(MODEL, id_buckets=16), dataclasses.replace(MODEL, exact_ids=False)):
        resolved = resolve_model_config(cfg, inputs)
        assert resolved.id_buckets == cfg.id_buckets
        rows = inputs.features(resolved).id_bucket
        assert torch.equal(rows, hash_id_buckets(list(inputs.entity_ids), cfg.id_buckets))


def test_history_settings_change_the_fingerprint(inputs):
    base = run_fingerprint(inputs, MODEL, TRAIN)
    for model, train in ((dataclasses.replace(MODEL, use_history=False), TRAIN),
                         (dataclasses.replace(MODEL, history_max_neighbours=3), TRAIN),
                         (dataclasses.replace(MODEL, exact_ids=False), TRAIN),
                         (MODEL, dataclasses.replace(TRAIN, id_lr=0.01)),
                         (MODEL, dataclasses.replace(TRAIN, recency_half_life=None))):
        assert run_fingerprint(inputs, model, train) != base


def test_recency_weighting_is_the_inputs_with_recency(inputs, straight, tmp_path):
    """fit_and_embed weighs the pairs (sampling and history pools) exactly as ModelInputs.with_recency does."""
    ranks = (np.arange(len(inputs.engagement[0])) % 4).astype(np.int32)
    ranked = dataclasses.replace(inputs, engagement_recency=ranks)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fitted = fit_and_embed(ranked, MODEL, TRAIN, tmp_path / "ranked")
        by_hand = fit_and_embed(ranked.with_recency(TRAIN.recency_half_life), MODEL,
                                dataclasses.replace(TRAIN, recency_half_life=None), tmp_path / "by_hand")
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(fitted.inference.embeddings, by_hand.inference.embeddings)
    assert not np.array_equal(fitted.inference.embeddings, straight.inference.embeddings)  # no ranks: no weighting


def test_processes_change_the_fingerprint_only_above_one(inputs):
    base = run_fingerprint(inputs, MODEL, TRAIN)
    assert run_fingerprint(inputs, MODEL, dataclasses.replace(TRAIN, processes=1)) == base
    assert run_fingerprint(inputs, MODEL, dataclasses.replace(TRAIN, processes=2)) != base
    with pytest.raises(ValueError, match="processes"):
        TrainConfig(processes=0)


class _Crash(RuntimeError):
    pass


def test_resume_after_crash_reaches_the_same_model(inputs, straight, tmp_path):
    def crash(epoch, metrics):
        raise _Crash(f"stopped after epoch {epoch}")

    with pytest.raises(_Crash):
        fit_and_embed(inputs, MODEL, TRAIN, tmp_path, on_epoch_end=crash)
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == ["epoch_0000.pt"]
    seen = []
    resumed = fit_and_embed(inputs, MODEL, TRAIN, tmp_path, on_epoch_end=lambda e, m: seen.append(e))
    assert resumed.resumed_epochs == 1 and seen == [1]
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]
    np.testing.assert_array_equal(resumed.inference.embeddings, straight.inference.embeddings)


def test_checkpoints_of_other_settings_are_not_resumed(inputs, tmp_path):
    first = fit_and_embed(inputs, MODEL, TRAIN, tmp_path)
    finished = fit_and_embed(inputs, MODEL, TRAIN, tmp_path)  # same run: everything comes from the checkpoint
    assert finished.resumed_epochs == 2 and finished.fingerprint == first.fingerprint
    np.testing.assert_array_equal(finished.inference.embeddings, first.inference.embeddings)

    changed = fit_and_embed(inputs, MODEL, dataclasses.replace(TRAIN, lr=1e-3), tmp_path)
    assert changed.resumed_epochs == 0 and changed.fingerprint != first.fingerprint
    assert json.loads((tmp_path / FINGERPRINT_FILE).read_text())["fingerprint"] == changed.fingerprint
    assert not np.allclose(changed.inference.embeddings, first.inference.embeddings)
    # the operational settings do not count: another log interval still resumes
    quiet = fit_and_embed(inputs, MODEL, dataclasses.replace(TRAIN, lr=1e-3, log_every=1), tmp_path)
    assert quiet.resumed_epochs == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_when_present(inputs, tmp_path):
    res = fit_and_embed(inputs, MODEL, dataclasses.replace(TRAIN, device="auto"), tmp_path)
    assert res.device.startswith("cuda") and res.bf16 == torch.cuda.is_bf16_supported()
    assert np.isfinite(res.inference.embeddings).all() and res.inference.embeddings.shape[0] == inputs.num_nodes


def test_structure_embedding_width_is_fitted_and_fed(inputs, tmp_path):
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(inputs.num_nodes, 5)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    with_rows = dataclasses.replace(inputs, structure=rows)
    fitted = fit_and_embed(with_rows, MODEL, TRAIN, tmp_path / "on")
    assert fitted.model_cfg.structure_dim == 5 and fitted.model.encoder.embed.structure_proj is not None
    off = fit_and_embed(with_rows, dataclasses.replace(MODEL, use_structure_embedding=False), TRAIN, tmp_path / "off")
    assert off.model.encoder.embed.structure_proj is None and off.fingerprint != fitted.fingerprint
    # published rows: the transformer part, the weighted structure part and the unit-norm filler coordinate
    assert fitted.inference.embeddings.shape == (inputs.num_nodes, MODEL.out_dim + 5 + 1)
    np.testing.assert_allclose(np.linalg.norm(fitted.inference.embeddings, axis=1), 1.0, atol=1e-5)
    alone = fit_and_embed(with_rows, dataclasses.replace(MODEL, structure_score_weight=0.0), TRAIN, tmp_path / "h")
    assert alone.inference.embeddings.shape == (inputs.num_nodes, MODEL.out_dim)
    assert not np.allclose(alone.inference.embeddings, off.inference.embeddings, atol=1e-4)  # the rows are fed
