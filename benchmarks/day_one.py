"""Day one: ``hir materialize --source DIR`` as a new user runs it (no ``--config``, no ``--profile``), timed.

Runs the command line in a subprocess on a fresh state folder (new lake, Dagster instance and MLflow store; the
jar and data caches are reused), so the run is the first one of a deployment: the profile is the one the machine
gets (``cpu`` without a GPU). The source is a folder following the source contract: by default the MovieLens-100k
folder ``hir setup`` / the quickstart writes into the cache (about 10^5 events), or ``--synthetic-events N``
writes the synthetic generator's folder of about N impressions first.

Prints one row per asset step (from the console lines ``hir: <step> done in <s>s``), the total, the profile, and
the evaluation's comparison line from the run's log file; ``--json PATH`` writes them. Exit status 1 when the run
failed or took longer than ``--target-minutes``.

Usage: ``python benchmarks/day_one.py [--source DIR | --synthetic-events N] [--target-minutes 15] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEP_DONE = re.compile(r"^hir: (\S+) done in ([\d.]+)s", re.M)
STEP_FAILED = re.compile(r"^hir: (\S+) FAILED after ([\d.?]+)s?: (.*)$", re.M)


def synthetic_folder(events: int, out: Path) -> Path:
    """Write the synthetic generator's source folder of about ``events`` impressions (no images) into ``out``."""
    from hir_pipeline.settings import cache_dir
    from spark_jobs.ingestion.sources.synthetic import SyntheticConfig, write_synthetic_source
    from spark_jobs.session import build_spark_session, ensure_delta_jars

    spark = build_spark_session(jars=ensure_delta_jars(cache_dir()), master="local[2]")
    write_synthetic_source(spark, SyntheticConfig(n_events=events), out)
    spark.stop()
    return out


def parse_console(stdout: str) -> dict:
    """Per-step seconds, failures and the log file from ``hir materialize``'s console lines."""
    log = re.search(r"^hir: full log: (.+)$", stdout, re.M)
    profile = re.search(r" profile=(\w+)", stdout)
    return {
        "steps": {name: float(s) for name, s in STEP_DONE.findall(stdout)},
        "failed": [{"step": n, "error": e} for n, _, e in STEP_FAILED.findall(stdout)],
        "log_file": log.group(1).strip() if log else None,
        "profile": profile.group(1) if profile else None,
    }


def evaluation_line(log_file: str | None) -> str | None:
    """The evaluation's comparison line (``targets: warm recall@20 vs best baseline ...``) from the run's log."""
    if not log_file or not Path(log_file).exists():
        return None
    lines = [ln for ln in Path(log_file).read_text(errors="replace").splitlines() if "targets: warm recall" in ln]
    return lines[-1][lines[-1].index("targets:"):] if lines else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, default=None,
                   help="source folder (default: the cached MovieLens-100k folder, .cache/sources/movielens)")
    p.add_argument("--synthetic-events", type=int, default=None, help="write a synthetic source of ~N events first")
    p.add_argument("--target-minutes", type=float, default=15.0, help="exit status 1 above this wall time")
    p.add_argument("--state", type=Path, default=None, help="state folder (default: a new temporary one)")
    p.add_argument("--json", type=Path, default=None, help="write the result as JSON")
    args = p.parse_args(argv)

    from hir_pipeline.settings import cache_dir

    state = args.state or Path(tempfile.mkdtemp(prefix="hir-day-one-"))
    if args.synthetic_events:
        source = synthetic_folder(args.synthetic_events, state / "source")
    else:
        source = args.source or cache_dir() / "sources" / "movielens"
        if not (source / "events").exists():
            p.error(f"{source} holds no source; run scripts/quickstart.sh (or hir materialize) once, or pass --source")
    env = {k: v for k, v in os.environ.items() if k not in ("HIR_LAKE", "HIR_PROFILE", "MLFLOW_TRACKING_URI")}
    env.update(HIR_STATE_DIR=str(state), DAGSTER_HOME=str(state / "dagster"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hir_pipeline.cli", "materialize", "--source", str(source)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    result = {"source": str(source), "returncode": proc.returncode, "seconds": round(seconds, 1),
              "target_minutes": args.target_minutes, **parse_console(proc.stdout + proc.stderr)}
    result["evaluation"] = evaluation_line(result["log_file"])

    print(f"{'step':<28} {'seconds':>9}")
    for name, s in result["steps"].items():
        print(f"{name:<28} {s:>9.1f}")
    for failure in result["failed"]:
        print(f"{failure['step']:<28} {'FAILED':>9}  {failure['error']}")
    print(f"{'total (wall, set-up included)':<28} {seconds:>9.1f}   profile {result['profile']}, exit status "
          f"{proc.returncode}, target {args.target_minutes:g} min")
    if result["evaluation"]:
        print(result["evaluation"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if proc.returncode == 0 and seconds <= args.target_minutes * 60 else 1


if __name__ == "__main__":
    sys.exit(main())
