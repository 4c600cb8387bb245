"""benchmarks/hierarchical_retrieval.py: one toy model, exact search and a grid of (level, clusters) settings, run
through its command line (JSON and table)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.toy_inputs import write_toy_prepared_splits

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "hierarchical_retrieval.py"
_SPEC = importlib.util.spec_from_file_location("hierarchical_retrieval", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("hierarchical_retrieval", bench)
_SPEC.loader.exec_module(bench)

TINY = ["--set", "hidden_dim=16", "--set", "num_layers=1", "--set", "num_heads=2", "--set", "out_dim=8",
        "--set", "level_sizes=[2,4]", "--set", "id_buckets=64", "--set", "batch_size=16",
        "--set", "engagement_batch_size=16", "--set", "pad_to=16", "--set", "attn_block_size=16",
        "--set", "warmup_steps=1", "--epochs", "1"]


def test_every_setting_against_exact_search(tmp_path, capsys):
    torch.set_num_threads(1)
    prepared = write_toy_prepared_splits(tmp_path / "split.pkl")
    out = tmp_path / "hier.json"
    model = tmp_path / "model.pkl"
    result = bench.main(["--cache", str(prepared), "--clusters", "1,2,3", "--candidate-share", "0", "--json", str(out),
                         "--model", str(model), *TINY])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["model"]["level_sizes"] == [2, 4] and set(result["exact"]) == {"warm", "cold"}
    rows = result["rows"]
    # level 0 has 2 clusters: 3 probed is skipped there; level 1 runs 1, 2 and 3
    assert [(r["level"], r["clusters"]) for r in rows if r["split"] == "warm"] == [(0, 1), (0, 2), (1, 1), (1, 2),
                                                                                 (1, 3)]
    for r in rows:
        assert 0.0 < r["scored_share"] <= 1.0 and r["qps"] > 0 and r["qps_exact"] > 0
        assert r["meets_target"] == (r["recall_ratio"] is not None and r["recall_ratio"] >= 0.95
                                     and r["scored_share"] <= 0.2)
        if (r["level"], r["clusters"]) == (0, 2):  # every coarse cluster, no cap: exact search
            assert r["scored_share"] == pytest.approx(1.0)
            assert r["recall"] == pytest.approx(result["exact"][r["split"]]["recall"])
    usage = result["model"]["item_clusters_per_level"]
    assert [len(usage), *(1 <= u["clusters_with_items"] <= n for u, n in zip(usage, (2, 4), strict=True))] == [
        2, True, True]
    printed = capsys.readouterr().out
    assert "| split | level (size) | clusters |" in printed and "target (>= 0.95x exact recall@20" in printed
    # the kept model is measured again without training: the same recalls, a new setting
    again = bench.main(["--cache", str(prepared), "--clusters", "1", "--levels", "1", "--model", str(model), *TINY])
    assert "trained" not in capsys.readouterr().out
    assert [r["recall"] for r in again["rows"]] == [r["recall"] for r in rows if (r["level"], r["clusters"]) == (1, 1)]
