"""benchmarks/train_memory.py through its command line on a tiny synthetic source: the graph built with Spark, the
model inputs collected to the driver, and two spawned ranks training on them, each reporting its memory."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_memory.py"


def _module():
    spec = importlib.util.spec_from_file_location("train_memory", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_content_file_gives_every_non_user_entity_a_unit_vector(tmp_path):
    import pyarrow as pa

    source = tmp_path / "source"
    (source / "entities").mkdir(parents=True)
    pq.write_table(pa.table({"entity_id": [f"e{i}" for i in range(7)],
                             "entity_type": ["user", "product", "ad", "user", "campaign", "advertiser", "product"]}),
                   source / "entities" / "part-0.parquet")
    out = tmp_path / "content.parquet"
    bench = _module()
    assert bench.write_content(source, out, dim=5, chunk=2) == 5
    table = pq.read_table(out)
    assert table["entity_id"].to_pylist() == ["e1", "e2", "e4", "e5", "e6"]
    vectors = np.array(table["embedding"].to_pylist())
    assert vectors.shape == (5, 5) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert bench.write_content(source, out, dim=5) == 5  # written once: a second call reads its row count


@pytest.mark.slow
def test_reports_driver_and_rank_memory(tmp_path):
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        [sys.executable, str(_SCRIPT), "--events", "3000", "--work", str(tmp_path / "work"), "--content-dim", "64",
         "--steps", "2", "--processes", "2", "--driver-memory", "1g", "--json", str(out),
         "--set", "hidden_dim=16", "--set", "num_layers=1", "--set", "num_heads=2", "--set", "out_dim=8",
         "--set", "level_sizes=[2,4]", "--set", "batch_size=16", "--set", "engagement_batch_size=16"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())
    assert row["nodes"] > 0 and row["edges"] > 0 and row["views"] >= row["nodes"] and row["engagement_pairs"] > 0
    parts = ("views_broad_mb", "views_narrow_mb", "content_mb", "structure_mb", "engagement_mb", "nodes_mb")
    assert abs(sum(row[k] for k in parts) - row["inputs_mb"]) <= 0.1 * len(parts)  # every part named, rounded
    assert row["content_mb"] > 0 and row["pickle_mb"] > 0
    assert row["driver_collect_peak_mb"] >= row["driver_rss_before_mb"] > 0 and row["jvm_peak_mb"] > 0
    [ranks] = row["ranks"]
    assert ranks["processes"] == 2 and ranks["rank_peak_mb"] > 0 and ranks["step_ms"] > 0
    assert not list((tmp_path / "work").glob("train_memory_inputs_*.pkl"))  # the hand-off file is removed
