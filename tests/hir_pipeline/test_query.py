"""Queries over published tables written with deltalake: latest / as_of / version, errors, crash consistency, CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import time

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from hir_pipeline.query import Publication, QueryError, UnknownIdError, cluster, recommend, similar
from hir_pipeline.query.cli import EXIT_UNKNOWN, add_query_parser

D1, D2 = dt.date(2024, 6, 1), dt.date(2024, 6, 2)
# entity -> (type, direction): similar directions = similar interests
ENTITIES = {
    "u1": ("user", [1.0, 0.1, 0.0]),
    "p1": ("product", [1.0, 0.0, 0.0]),
    "p2": ("product", [0.9, 0.2, 0.0]),
    "a1": ("ad", [0.95, 0.05, 0.1]),
    "p3": ("product", [0.0, 1.0, 0.0]),
    "p4": ("product", [0.0, 0.0, 1.0]),
    "c1": ("campaign", [1.0, 0.05, 0.0]),
}


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def _write(path, rows: dict, day: dt.date, types: dict) -> None:
    n = len(next(iter(rows.values())))
    cols = {k: pa.array(v, types.get(k)) for k, v in rows.items()}
    cols["run_date"] = pa.array([day] * n, pa.date32())
    mode = "append"
    try:
        from deltalake import DeltaTable

        DeltaTable(str(path))
        mode = "overwrite"
    except Exception:
        pass
    kwargs = {"predicate": f"run_date = '{day}'"} if mode == "overwrite" else {}
    write_deltalake(str(path), pa.table(cols), partition_by=["run_date"], mode=mode, **kwargs)


def publish(lake, day: dt.date, version: str, flip: bool = False) -> None:
    """One publication, written in the publish asset's order (node_embeddings last)."""
    ids = list(ENTITIES)
    coarse = {e: (0 if ENTITIES[e][1][0] > 0.5 else 1) for e in ids}
    if flip:  # a different model: the cluster of the "1st direction" entities is now 1
        coarse = {e: 1 - c for e, c in coarse.items()}
    _write(lake / "cluster_assignments", {
        "entity_id": ids, "entity_type": [ENTITIES[e][0] for e in ids], "level": [0] * len(ids),
        "cluster_id": [coarse[e] for e in ids], "confidence": [0.5 + 0.05 * i for i in range(len(ids))],
        "model_version": [version] * len(ids),
    }, day, {"level": pa.int32(), "cluster_id": pa.int32(), "confidence": pa.float32()})
    _write(lake / "interest_supergraph", {
        "level": [0, 0, 0, 0], "src_cluster": [0, 0, 1, 1], "dst_cluster": [0, 1, 0, 1],
        "weight": [5.0, 1.5, 1.5, 2.0], "n_edges": [4, 2, 2, 2], "model_version": [version] * 4,
    }, day, {"level": pa.int32(), "src_cluster": pa.int32(), "dst_cluster": pa.int32(), "n_edges": pa.int64()})
    _write(lake / "cluster_profiles", {
        "level": [0, 0], "cluster_id": [0, 1], "parent_cluster_id": [None, None],
        "size": [sum(1 for c in coarse.values() if c == k) for k in (0, 1)],
        "label": [f"first v{version}", f"other v{version}"], "top_members": [["p1"], ["p3"]],
        "model_version": [version] * 2,
    }, day, {"level": pa.int32(), "cluster_id": pa.int32(), "parent_cluster_id": pa.int32(), "size": pa.int64(),
             "top_members": pa.list_(pa.string())})
    _write(lake / "node_embeddings", {
        "entity_id": ids, "entity_type": [ENTITIES[e][0] for e in ids],
        "embedding": [_unit(ENTITIES[e][1]) for e in ids], "model_version": [version] * len(ids),
    }, day, {"embedding": pa.list_(pa.float32())})


@pytest.fixture()
def lake(tmp_path):
    root = tmp_path / "lake"
    publish(root, D1, "1")
    publish(root, D2, "2")
    _write(root / "graph_edges", {"src_id": ["u1", "p1"], "dst_id": ["p1", "u1"], "weight": [1.0, 1.0]}, D2, {})
    return root


def test_similar_latest_ranks_by_dot_product(lake):
    hits = similar("p1", k=3, lake=str(lake))
    assert [h.entity_id for h in hits] == ["c1", "u1", "a1"]
    assert hits[0].score == pytest.approx(float(np.dot(_unit([1, 0, 0]), _unit([1, 0.05, 0]))), rel=1e-5)
    assert [h.entity_id for h in similar("p1", type="product", k=5, lake=str(lake))] == ["p2", "p3", "p4"]
    pub = Publication(str(lake))
    assert pub.snapshot.run_date == D2 and pub.snapshot.model_version == "2"


def test_as_of_and_version_time_travel(lake):
    assert Publication(str(lake), as_of=D1).snapshot.model_version == "1"
    assert Publication(str(lake), as_of="2024-06-15").snapshot.run_date == D2
    old = Publication(str(lake), version=0)  # first commit of node_embeddings: only D1 exists
    assert (old.snapshot.run_date, old.snapshot.model_version) == (D1, "1")
    assert old.snapshot.versions == {"node_embeddings": 0, "cluster_assignments": 0, "interest_supergraph": 0,
                                     "cluster_profiles": 0}
    assert cluster(0, 0, lake=str(lake), version=0).label == "first v1"
    with pytest.raises(QueryError, match="no publication on or before 2024-05-01"):
        Publication(str(lake), as_of=D1 - dt.timedelta(days=31))
    with pytest.raises(QueryError, match="no Delta version 9"):
        Publication(str(lake), version=9)


def test_cluster_profile_members_children_neighbours(lake):
    view = cluster(0, 0, lake=str(lake), members=2)
    assert view.label == "first v2" and view.size == 5 and view.top_members == ["p1"]
    # highest confidence first: confidences grow with the entity's position in ENTITIES
    assert [m.entity_id for m in view.members] == ["c1", "a1"]
    assert view.neighbours == [(1, 1.5)] and view.children == []
    with pytest.raises(UnknownIdError, match="unknown cluster 7 at level 0"):
        cluster(0, 7, lake=str(lake))


def test_recommend_excludes_seen_items_and_rejects_non_users(lake):
    hits = recommend("u1", k=2, lake=str(lake))
    assert [h.entity_id for h in hits] == ["a1", "p2"]  # p1 is nearest but already seen (graph_edges)
    assert recommend("u1", k=1, lake=str(lake), exclude_seen=False)[0].entity_id == "p1"
    assert {h.entity_type for h in recommend("u1", k=10, lake=str(lake))} == {"ad", "product"}
    with pytest.raises(UnknownIdError, match="unknown user 'u9'"):
        recommend("u9", lake=str(lake))
    with pytest.raises(UnknownIdError, match="is a product, not a user"):
        recommend("p1", lake=str(lake))


def test_unknown_ids_and_missing_lake(lake, tmp_path):
    with pytest.raises(UnknownIdError, match="unknown entity 'nope'.*2024-06-02"):
        similar("nope", lake=str(lake))
    with pytest.raises(QueryError, match="unknown entity type"):
        similar("p1", type="planet", lake=str(lake))
    with pytest.raises(QueryError, match="no publication"):
        similar("p1", lake=str(tmp_path / "empty"))


def test_half_written_publication_is_not_read(lake):
    """A re-run of D2 killed after cluster_assignments and cluster_profiles were committed, before the marker."""
    time.sleep(0.01)  # the unfinished commits must be later than the marker's (ms timestamps)
    before = Publication(str(lake))
    publish_partial = lake / "cluster_profiles"
    _write(publish_partial, {
        "level": [0, 0], "cluster_id": [0, 1], "parent_cluster_id": [None, None], "size": [1, 1],
        "label": ["half-written", "half-written"], "top_members": [[], []], "model_version": ["3", "3"],
    }, D2, {"level": pa.int32(), "cluster_id": pa.int32(), "parent_cluster_id": pa.int32(), "size": pa.int64(),
            "top_members": pa.list_(pa.string())})
    after = Publication(str(lake))
    assert after.snapshot == before.snapshot
    assert after.cluster(0, 0).label == "first v2"
    # once the re-run writes its marker, the new publication becomes visible
    publish(lake, D2, "3", flip=True)
    assert Publication(str(lake)).snapshot.model_version == "3"
    assert Publication(str(lake)).cluster(0, 1).label == "other v3"


def _cli(argv):
    parser = argparse.ArgumentParser(prog="hir")
    add_query_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    return args.func(args, out, err), out.getvalue(), err.getvalue()


def test_cli_similar_cluster_recommend_and_unknown_id(lake):
    code, out, _ = _cli(["query", "similar", "p1", "--type", "product", "-k", "2", "--lake", str(lake)])
    assert code == 0
    assert "run_date=2024-06-02 model_version=2" in out and out.splitlines()[1].split()[-1] == "p2"
    code, out, _ = _cli(["query", "cluster", "0", "1", "--lake", str(lake), "--as-of", "2024-06-01", "--json"])
    payload = json.loads(out)
    assert code == 0 and payload["model_version"] == "1" and payload["result"]["label"] == "other v1"
    code, out, _ = _cli(["query", "recommend", "u1", "-k", "1", "--lake", str(lake), "--version", "0"])
    # as of version 0 (run date D1) graph_edges has no snapshot yet, so nothing is excluded
    assert code == 0 and "model_version=1" in out and out.splitlines()[1].split()[-1] == "p1"
    code, out, err = _cli(["query", "similar", "ghost", "--lake", str(lake)])
    assert code == EXIT_UNKNOWN and out == "" and "unknown entity 'ghost'" in err
    code, _, err = _cli(["query", "cluster", "3", "0", "--lake", str(lake)])
    assert code == EXIT_UNKNOWN and "unknown cluster 0 at level 3" in err


CHILD = """
import argparse, sys
from hir_pipeline.query.cli import add_query_parser
parser = argparse.ArgumentParser(prog="hir")
add_query_parser(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def test_reads_use_pyarrow_native_filesystem(lake):
    """Regression: deltalake's default Python filesystem handler made 15-50% of query processes abort at exit
    ("terminate called without an active exception", delta-rs issue 2184); local lakes are read natively."""
    import pyarrow.fs as pa_fs

    dataset = Publication(str(lake))._dataset("node_embeddings")
    assert isinstance(dataset.filesystem, pa_fs.SubTreeFileSystem)
    assert isinstance(dataset.filesystem.base_fs, pa_fs.LocalFileSystem)


def test_query_process_exit_codes(lake):
    """The handler as a process: results exit 0, unknown IDs exit 2 with the message on stderr, no abort."""
    import subprocess
    import sys

    from hir_pipeline.settings import project_root

    for argv, code in [(["recommend", "u1"], 0), (["cluster", "0", "9"], EXIT_UNKNOWN), (["similar", "zz"], 2)]:
        proc = subprocess.run([sys.executable, "-c", CHILD, "query", *argv, "--lake", str(lake)], cwd=project_root(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
        assert "terminate called" not in proc.stderr
        assert (code == 0) == (proc.stderr == "")
