"""The Spark session every job uses: its unauthenticated UI is reachable on loopback only and cannot kill stages."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, socket, urllib.request
from hir_pipeline.settings import cache_dir
from spark_jobs.session import build_spark_session, ensure_delta_jars
s = build_spark_session(jars=ensure_delta_jars(cache_dir()), master="local[1]", app_name="hir-ui-probe")
port = int(s.sparkContext.uiWebUrl.rsplit(":", 1)[1])
out = {"kill": s.conf.get("spark.ui.killEnabled"),
       "loopback": urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/", timeout=10).status, "external": {}}
for ip in os.popen("hostname -I").read().split():
    if ip.startswith("127.") or ":" in ip:
        continue
    try:
        socket.create_connection((ip, port), timeout=3).close()
        out["external"][ip] = "open"
    except OSError:
        out["external"][ip] = "refused"
s.stop()
print("PROBE" + json.dumps(out))
"""


@pytest.mark.slow
def test_local_spark_ui_listens_on_loopback_only_without_kill_button():
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(line[len("PROBE"):])
    assert out["kill"] == "false"
    assert out["loopback"] == 200
    assert out["external"], "this machine has no non-loopback IPv4 address to probe from"
    assert set(out["external"].values()) == {"refused"}, out


def _fake_java(folder, version_line: str):
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return folder


def test_missing_or_old_java_is_one_line_saying_what_to_do(tmp_path, monkeypatch, capsys):
    import pytest

    from hir_pipeline.cli import main
    from spark_jobs.session import JavaUnavailable, check_java

    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path / "jdk21", 'openjdk version "21.0.2" 2024-01-16')))
    assert check_java() == 21
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path / "jdk8", 'java version "1.8.0_392"')))
    with pytest.raises(JavaUnavailable, match=r"^Java 8 at .*jdk8/bin/java; Spark needs Java 17 or 21"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaUnavailable, match="no Java found"):
        check_java()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert main(["setup", "--skip-images"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hir: error: no Java found"), err


def test_temporary_conf_sets_for_the_block_then_restores_or_unsets(spark):
    from spark_jobs.session import temporary_conf

    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    with temporary_conf(spark, key, "7"):
        assert spark.conf.get(key) == "7"
    assert spark.conf.get(key) == before
    absent = "spark.hir.test.absent"
    with pytest.raises(RuntimeError), temporary_conf(spark, absent, "x"):
        assert spark.conf.get(absent) == "x"
        raise RuntimeError("the block failed")
    assert spark.conf.get(absent, None) is None  # unset again, also when the block raised
