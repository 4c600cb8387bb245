"""Order dependence of the test suite: every fast-tier module alone, then the fast tier in K seeded shuffles.

A test that passes in the usual run but fails alone leans on state another module left behind (a table, an
environment variable, a Spark setting); one that fails in a shuffle leans on the tests that ran before it. Each run
is a fresh ``pytest`` process with one worker (``-p no:xdist``) so the order is exactly the one the seed gives
(tests/shuffle_order.py); a failing shuffle replays with ``pytest -m "not slow" -p no:xdist --shuffle-seed N``.

(a) ``alone``: ``pytest -m MARK MODULE`` for every module with a test selected by ``-m MARK``.
(b) ``shuffle``: ``pytest -m MARK --shuffle-seed S`` for seeds ``--first-seed`` .. ``--first-seed + K - 1``.

Prints one row per run (outcome counts, seconds, failing tests) and, with ``--json PATH``, the rows as JSON. Exit
status 1 when any run failed, so CI can gate on it.

Usage: python benchmarks/suite_order.py [--seeds K] [--first-seed S] [--only alone|shuffle] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The outcome words of pytest's last line ("3 passed, 1 failed, 2 deselected in 4.1s").
OUTCOMES = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")


def pytest_command(*args: str) -> list[str]:
    """One-process pytest, no cache (runs must not feed each other through ``.pytest_cache``)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args]


def suite_env() -> dict[str, str]:
    """The environment scripts/test.sh gives pytest, without a shuffle seed or options leaking in from outside."""
    env = {k: v for k, v in os.environ.items() if k not in ("HIR_TEST_SHUFFLE_SEED", "PYTEST_ADDOPTS")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def selected_modules(mark: str) -> list[str]:
    """Test modules (paths from the repository root) with at least one test selected by ``-m mark``."""
    out = subprocess.run(pytest_command("--collect-only", "-m", mark), cwd=ROOT, env=suite_env(),
                         capture_output=True, text=True, check=True)
    return sorted({line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line})


def parse_summary(output: str) -> dict[str, int]:
    """Outcome counts from pytest's last summary line (``error`` and ``errors`` both count as ``errors``)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    lines = [ln for ln in output.strip().splitlines() if re.search(r" in [\d.]+s", ln)]
    for n, word in re.findall(r"(\d+) (\w+)", lines[-1] if lines else ""):
        word = "errors" if word in ("error", "errors") else word
        if word in counts:
            counts[word] = int(n)
    return counts


def failing_tests(output: str) -> list[str]:
    """Node ids in the short summary (``-ra``, pyproject's addopts) that failed or errored."""
    return sorted({m for m in re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.M)})


def _text(captured: str | bytes | None) -> str:
    """What a timed-out process printed (bytes or text, depending on where it was cut)."""
    return captured.decode(errors="replace") if isinstance(captured, bytes) else captured or ""


def run_one(kind: str, target: str, args: list[str], timeout_s: float) -> dict:
    """One pytest process; its row of the table."""
    start = time.perf_counter()
    try:
        out = subprocess.run(pytest_command(*args), cwd=ROOT, env=suite_env(), capture_output=True, text=True,
                             timeout=timeout_s)
        rc, output = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = -1, _text(e.stdout) + _text(e.stderr)
    row = {"kind": kind, "target": target, "returncode": rc, "seconds": round(time.perf_counter() - start, 1),
           **parse_summary(output), "failing": failing_tests(output)}
    # rc 0 only: 1 = test failures, 2-4 = usage/internal errors, 5 = nothing selected (a module lost its fast test).
    row["ok"] = rc == 0
    return row


def print_row(row: dict) -> None:
    status = "ok" if row["ok"] else ("TIMEOUT" if row["returncode"] == -1 else f"FAIL rc={row['returncode']}")
    print(f"{row['kind']:>8} {row['target'][:64]:<64} {status:>10} {row['passed']:>6} {row['failed']:>6} "
          f"{row['errors']:>6} {row['skipped']:>6} {row['seconds']:>8.1f}", flush=True)
    for nodeid in row["failing"]:
        print(f"{'':>8}   {nodeid}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2, help="how many shuffled runs of the whole tier (K)")
    p.add_argument("--first-seed", type=int, default=1, help="seeds used: first-seed .. first-seed + K - 1")
    p.add_argument("--only", choices=("alone", "shuffle"), default=None, help="run one half only")
    p.add_argument("-m", "--mark", default="not slow", help='pytest marker expression of the tier (default "not slow")')
    p.add_argument("--modules", nargs="*", default=None, help="these modules alone instead of every selected one")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per pytest process")
    p.add_argument("--json", type=Path, default=None, help="write the rows as JSON")
    args = p.parse_args(argv)

    print(f"{'kind':>8} {'target':<64} {'status':>10} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>6} "
          f"{'seconds':>8}", flush=True)
    rows = []
    if args.only in (None, "alone"):
        for module in args.modules or selected_modules(args.mark):
            rows.append(run_one("alone", module, ["-m", args.mark, module], args.timeout))
            print_row(rows[-1])
    if args.only in (None, "shuffle"):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows.append(run_one("shuffle", f"seed {seed}", ["-m", args.mark, "--shuffle-seed", str(seed)],
                                args.timeout))
            print_row(rows[-1])
    failed = [r for r in rows if not r["ok"]]
    total = sum(r["seconds"] for r in rows)
    print(f"\n{len(rows)} runs, {len(failed)} failed, {total:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps({"mark": args.mark, "rows": rows, "failed_runs": len(failed)}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
