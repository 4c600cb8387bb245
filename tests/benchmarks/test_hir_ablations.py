"""benchmarks/hir_ablations.py: grid parsing, and a whole study on a toy split (seeds, grid, baselines cached,
comparisons, JSON), run through its command line."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from hir_pipeline.evaluation.data import COLD, WARM
from tests.toy_inputs import write_toy_prepared_splits

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "hir_ablations.py"
_SPEC = importlib.util.spec_from_file_location("hir_ablations", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

TINY = ["--set", "hidden_dim=16", "--set", "num_layers=1", "--set", "num_heads=2", "--set", "out_dim=8",
        "--set", "level_sizes=[2,4]", "--set", "id_buckets=64", "--set", "batch_size=16",
        "--set", "engagement_batch_size=16", "--set", "pad_to=16", "--set", "attn_block_size=16",
        "--set", "warmup_steps=1", "--epochs", "1"]


def test_grid_parsing():
    assert bench.split_top_level("[8,64],[16,128]") == ["[8,64]", "[16,128]"]
    grid = bench.parse_grid(["lr=0.001,0.002", "level_sizes=[8,64],[512]", "published_encoder=student,teacher"])
    assert grid == {"lr": [0.001, 0.002], "level_sizes": [[8, 64], [512]], "published_encoder": ["student", "teacher"]}
    points = bench.grid_points(grid)
    assert len(points) == 8 and points[0] == {"lr": 0.001, "level_sizes": [8, 64], "published_encoder": "student"}
    assert bench.grid_points({}) == [{}]
    # one_level keeps the finest level of the point's own level sizes
    assert bench.variant_overrides({"level_sizes": [8, 64, 512]}, {"level_sizes": [4, 16]}, "one_level")[
        "level_sizes"] == [16]
    with pytest.raises(SystemExit):
        bench.parse_grid(["lr"])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return write_toy_prepared_splits(tmp_path_factory.mktemp("bench") / "split.pkl")


def test_study_over_seeds_and_grid_with_cached_baselines(prepared, tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "study.json"
    args = ["--cache", str(prepared), "--baselines", "popularity,content,random", "--bootstrap-samples", "200",
            "--json", str(out), *TINY]
    result = bench.main([*args, "--seeds", "2", "--grid", "lr=0.001,0.003"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["split"] == "validation" and result["seeds"] == [0, 1]
    assert set(result["baselines"]) == {"popularity", "content", "random"}
    rows = result["rows"]
    assert [r["overrides"] for r in rows] == [{"lr": 0.001}, {"lr": 0.003}]
    for r in rows:
        assert [s["seed"] for s in r["per_seed"]] == [0, 1] and r["published"] == "student"
        for split in (WARM, COLD):
            per_seed = [s[f"{split}_recall"] for s in r["per_seed"]]
            assert r[f"{split}_recall"] == pytest.approx(np.mean(per_seed), abs=1e-4)
            assert r[f"{split}_recall_seed_std"] == pytest.approx(np.std(per_seed, ddof=1), abs=1e-4)
            assert 0.0 <= r[f"mean_user_{split}_recall"] <= 1.0
        refs = {(c["split"], c["reference"]) for c in r["comparisons"]}
        assert refs == {(WARM, "best_baseline"), (COLD, "best_baseline"), (COLD, "content")}
        for c in r["comparisons"]:
            assert c["diff_low"] <= c["diff"] <= c["diff_high"]
            assert c["mean_a"] == pytest.approx(r[f"{c['split']}_recall"], abs=1e-3)
    printed = capsys.readouterr().out
    assert "| variant | overrides |" in printed and "paired bootstrap over users" in printed
    # the baselines are cached beside the split: a rerun reads them back
    cache = prepared.with_suffix(".pkl.baselines.pkl")
    assert cache.exists()
    again = bench.main([*args, "--seeds", "1", "--split", "test"])
    assert again["split"] == "test" and len(pickle.loads(cache.read_bytes())) == 2  # one entry per split
    bench.main([*args, "--seeds", "1"])
    assert "baselines from" in capsys.readouterr().out


def test_engagement_weights_reweight_the_prepared_pairs_by_their_stage(prepared):
    """A prepared split holds pairs weighted by the default stage weights (0, 1, 3.16, 10): another
    ``engagement_weights`` reweights each pair by its stage, and a stage weighted 0 turns its pairs into seen pairs."""
    default = [0.0, 1.0, 10 ** 0.5, 10.0]
    engagement = (np.array([0, 0, 1]), np.array([5, 6, 7]), np.array(default[1:], dtype=np.float32))
    seen = (np.array([2]), np.array([8]))
    (users, items, weight), (seen_u, seen_i), ranks = bench.reweighted_engagement(engagement, seen, [0, 1, 1, 1])
    assert (users.tolist(), items.tolist(), weight.tolist(), seen_u.tolist()) == ([0, 0, 1], [5, 6, 7], [1, 1, 1], [2])
    assert ranks is None
    (users, items, weight), (seen_u, seen_i), ranks = bench.reweighted_engagement(engagement, None, [0, 0, 2, 5],
                                                                                  np.array([4, 2, 0]))
    assert (users.tolist(), items.tolist(), weight.tolist(), ranks.tolist()) == ([0, 1], [6, 7], [2, 5], [2, 0])
    assert (seen_u.tolist(), seen_i.tolist()) == ([0], [5])
    with pytest.raises(SystemExit, match="4 stage weights"):
        bench.reweighted_engagement(engagement, seen, [1, 1])
    with pytest.raises(SystemExit, match="default engagement weights"):
        bench.reweighted_engagement((engagement[0], engagement[1], np.array([1, 2, 5], dtype=np.float32)), seen,
                                    [0, 1, 1, 1])
    inputs = pickle.loads(prepared.read_bytes())["validation"]["inputs"]
    users, items, _ = inputs.engagement  # the toy's own weights, made the default conversion weight
    inputs = dataclasses.replace(inputs, engagement=(users, items, np.full(len(users), 10.0, dtype=np.float32)))
    trainer = bench.make_trainer(inputs, {"engagement_weights": [0, 1, 1, 1], "hidden_dim": 16, "num_layers": 1,
                                          "num_heads": 2, "out_dim": 8})
    assert set(trainer.pairs[2].tolist()) == {1.0}  # the Trainer draws the reweighted pairs


def test_recency_half_life_weighs_the_prepared_pairs_by_their_rank(prepared):
    inputs = pickle.loads(prepared.read_bytes())["validation"]["inputs"]
    tiny = {"hidden_dim": 16, "num_layers": 1, "num_heads": 2, "out_dim": 8}
    with pytest.raises(SystemExit, match="no recency ranks"):
        bench.make_trainer(dataclasses.replace(inputs, engagement_recency=None), {**tiny, "recency_half_life": 2.0})
    ranks = np.arange(len(inputs.engagement[0]), dtype=np.int32) % 3
    ranked = dataclasses.replace(inputs, engagement_recency=ranks)
    trainer = bench.make_trainer(ranked, {**tiny, "recency_half_life": 2.0})
    np.testing.assert_allclose(trainer.pairs[2], inputs.engagement[2] * 2.0 ** (-ranks / 2.0), rtol=1e-6)
    both = bench.make_trainer(dataclasses.replace(ranked, engagement=(*inputs.engagement[:2], np.full(
        len(ranks), 10.0, dtype=np.float32))), {**tiny, "recency_half_life": 2.0, "engagement_weights": [0, 1, 1, 1]})
    np.testing.assert_allclose(both.pairs[2], 2.0 ** (-ranks / 2.0), rtol=1e-6)  # stage weights, then recency
