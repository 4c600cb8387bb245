"""The Spark session every job uses: its unauthenticated UI is reachable on loopback only and cannot kill stages."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
