"""Queries over publications written by the real Spark writer: latest / as_of / version through the publications
manifest, errors, a publish killed before its manifest row, CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import shutil

import numpy as np
import pytest
from deltalake import DeltaTable

from hir_pipeline.query import (
    Publication,
    QueryError,
    UnknownIdError,
    cluster,
    hierarchy_settings,
    recommend,
    similar,
)
from hir_pipeline.query.cli import EXIT_UNKNOWN, add_query_parser
from tests.publications import D1, D2, publish, unit, write_edges


@pytest.fixture(scope="module")
def published(spark, tmp_path_factory):
    """D1 by model 1, then D2 by model 2, then a graph_edges snapshot of D2 (written once per module)."""
    root = tmp_path_factory.mktemp("query") / "lake"
    publish(spark, root, D1, "1")
    publish(spark, root, D2, "2")
    write_edges(spark, root, D2, [("u1", "p1"), ("p1", "u1")])
    return root


@pytest.fixture()
def lake(published, tmp_path):
    """A private copy of the published lake (Delta logs hold relative paths), free to write to."""
    return shutil.copytree(published, tmp_path / "lake")


def test_similar_latest_ranks_by_dot_product(lake):
    hits = similar("p1", k=3, lake=str(lake))
    assert [h.entity_id for h in hits] == ["c1", "u1", "a1"]
    assert hits[0].score == pytest.approx(float(np.dot(unit([1, 0, 0]), unit([1, 0.05, 0]))), rel=1e-5)
    assert [h.entity_id for h in similar("p1", type="product", k=5, lake=str(lake))] == ["p2", "p3", "p4"]
    pub = Publication(str(lake))
    assert pub.snapshot.run_date == D2 and pub.snapshot.model_version == "2"


def test_as_of_and_version_resolve_through_the_manifest(lake):
    latest = Publication(str(lake)).snapshot
    assert latest.versions == {"node_embeddings": 1, "cluster_assignments": 1, "interest_supergraph": 1,
                               "cluster_profiles": 1, "publications": 1}
    on_d1 = Publication(str(lake), as_of=D1).snapshot  # D1's row of the latest manifest: the tables' versions 0
    assert (on_d1.run_date, on_d1.model_version) == (D1, "1")
    assert on_d1.versions == {**{t: 0 for t in latest.versions}, "publications": 1}
    assert Publication(str(lake), as_of="2024-06-15").snapshot.run_date == D2
    old = Publication(str(lake), version=0)  # the manifest's first version: only D1 was published
    assert (old.snapshot.run_date, old.snapshot.model_version) == (D1, "1")
    assert old.snapshot.versions == {t: 0 for t in latest.versions}
    assert cluster(0, 0, lake=str(lake), version=0).label == "first v1"
    with pytest.raises(QueryError, match="no publication on or before 2024-05-01 in publications v1"):
        Publication(str(lake), as_of="2024-05-01")
    with pytest.raises(QueryError, match="publications has no Delta version 9"):
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
    with pytest.raises(QueryError, match="nothing published yet .* materialize the publish assets"):
        similar("p1", lake=str(tmp_path / "empty"))


def test_a_recorded_version_gone_from_the_delta_log_is_a_clear_error(lake):
    """Log retention removed node_embeddings v0's commit: manifest v0 (which records it) cannot be read, the latest
    publication still can."""
    embeddings = lake / "node_embeddings"
    DeltaTable(str(embeddings)).create_checkpoint()  # at v1: the log no longer needs v0's commit file
    (embeddings / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(QueryError, match="publication of 2024-06-01 .publications v0. cannot be read: "
                                         "node_embeddings Delta version 0 is gone from the Delta log"):
        Publication(str(lake), version=0)
    assert Publication(str(lake)).similar("p1", k=1)[0].entity_id == "c1"


@pytest.mark.slow
def test_a_publish_killed_before_its_manifest_row_is_not_read(spark, lake, monkeypatch):
    """A re-run of D2 by model 3, and a first run of D3, each killed after its four tables, before the manifest:
    readers stay on the D2 publication by model 2, every table read at the version the manifest records."""
    import spark_jobs.publish.io as publish_io

    before = Publication(str(lake))
    answers = (before.similar("p1", k=3), before.cluster(0, 0), before.recommend("u1", k=2))

    def killed(*args, **kwargs):
        raise RuntimeError("killed before the manifest write")

    with monkeypatch.context() as m:
        m.setattr(publish_io, "write_publications_row", killed)
        for day in (D2, D2 + dt.timedelta(days=1)):
            with pytest.raises(RuntimeError, match="killed before the manifest"):
                publish(spark, lake, day, "3", flip=True)
    assert DeltaTable(str(lake / "node_embeddings")).version() == 3  # both runs wrote every table
    after = Publication(str(lake))
    assert after.snapshot == before.snapshot
    assert (after.similar("p1", k=3), after.cluster(0, 0), after.recommend("u1", k=2)) == answers
    assert after.cluster(0, 0).label == "first v2"

    publish(spark, lake, D2, "3", flip=True)  # the re-run completes: the new publication becomes visible
    done = Publication(str(lake))
    assert (done.snapshot.run_date, done.snapshot.model_version) == (D2, "3")
    assert done.cluster(0, 1).label == "other v3"


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
    assert code == 0 and "model_version=1 publications@v0" in out and out.splitlines()[1].split()[-1] == "p1"
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


@pytest.mark.slow
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


def test_versions_lists_every_publication_of_the_manifest_version(lake):
    code, out, _ = _cli(["query", "versions", "--lake", str(lake)])
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"# publications@v1 lake={lake}"
    assert [ln.split()[:3] for ln in lines[1:]] == [["2024-06-01", "model", "1"], ["2024-06-02", "model", "2"]]
    assert lines[2].endswith("node_embeddings@v1 cluster_assignments@v1 interest_supergraph@v1 cluster_profiles@v1")
    code, out, _ = _cli(["query", "versions", "--lake", str(lake), "--version", "0", "--json"])
    payload = json.loads(out)
    assert code == 0 and payload["manifest_version"] == 0
    assert [(p["run_date"], p["model_version"]) for p in payload["publications"]] == [("2024-06-01", "1")]


def test_storage_options_are_key_value_pairs(lake, capsys):
    with pytest.raises(SystemExit):
        _cli(["query", "versions", "--lake", str(lake), "--storage-option", "no-equals-sign"])
    assert "'no-equals-sign' is not KEY=VALUE" in capsys.readouterr().err
    parser = argparse.ArgumentParser(prog="hir")
    add_query_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["query", "versions", "--storage-option", "AWS_REGION=eu-west-1",
                              "--storage-option", "AWS_ENDPOINT_URL=http://127.0.0.1:9000?a=b"])
    assert dict(args.storage_options) == {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000?a=b"}


def test_hierarchical_recommend_scores_the_users_clusters_only(lake):
    """u1's own cluster (0: u1, p1, p2, a1, c1) holds its nearest items; p1 is seen, p3 and p4 (cluster 1) are far."""
    pub = Publication(str(lake))
    exact = pub.retrieve("u1", k=2)
    assert (exact.retrieval, exact.scored, exact.rankable) == ("exact", 4, 4)  # p2, a1, p3, p4
    one = hierarchy_settings(clusters=1, candidate_share=0.0)
    got = pub.retrieve("u1", k=2, retrieval=one)
    assert [h.entity_id for h in got.hits] == [h.entity_id for h in exact.hits] == ["a1", "p2"]
    assert got.hits[0].score == pytest.approx(exact.hits[0].score, rel=1e-6)
    assert (got.scored, got.rankable, got.level, got.clusters_probed) == (2, 4, 0, 1)
    # k above the cluster's candidates: the next cluster is probed; a super-graph neighbour is probed on top
    assert pub.retrieve("u1", k=3, retrieval=one).clusters_probed == 2
    wide = pub.retrieve("u1", k=2, retrieval=hierarchy_settings(clusters=1, candidate_share=0.0, neighbours=1))
    assert (wide.scored, wide.clusters_probed) == (4, 2)
    # a cap of one candidate keeps the first member in probe order (p2), not the exact best (a1)
    capped = recommend("u1", k=1, lake=str(lake), retrieval=hierarchy_settings(clusters=1, candidates=1))
    assert [h.entity_id for h in capped] == ["p2"]
    # the default settings: level (1 - 1) // 2 = 0, 8 clusters (both of them), a share cap of 0.2 x 4 -> k = 2
    default = pub.retrieve("u1", k=2, retrieval="hierarchical")
    assert (default.level, default.clusters_probed, default.scored) == (0, 2, 2)
    with pytest.raises(QueryError, match="routing level 2 does not exist"):
        recommend("u1", lake=str(lake), retrieval=hierarchy_settings(level=2))
    with pytest.raises(QueryError, match="clusters must be >= 1"):
        hierarchy_settings(clusters=0)
    with pytest.raises(QueryError, match="unknown retrieval 'ivf'"):
        recommend("u1", lake=str(lake), retrieval="ivf")


def test_cli_recommend_hierarchical_flags(lake):
    argv = ["query", "recommend", "u1", "-k", "2", "--lake", str(lake), "--retrieval", "hierarchical",
            "--clusters", "1", "--candidate-share", "0"]
    code, out, _ = _cli([*argv, "--json"])
    payload = json.loads(out)
    assert code == 0 and [h["entity_id"] for h in payload["result"]] == ["a1", "p2"]
    assert payload["retrieval"] == {"retrieval": "hierarchical", "scored": 2, "rankable": 4, "level": 0,
                                    "clusters_probed": 1}
    code, out, _ = _cli([*argv, "--neighbours", "1"])
    assert code == 0 and "retrieval=hierarchical scored=4 rankable=4 level=0 clusters_probed=2" in out.splitlines()[0]
    code, out, _ = _cli(["query", "recommend", "u1", "--lake", str(lake)])
    assert code == 0 and "retrieval=exact scored=4 rankable=4" in out.splitlines()[0]
    code, out, err = _cli([*argv, "--level", "1"])
    assert code == EXIT_UNKNOWN and out == "" and "routing level 1 does not exist" in err
