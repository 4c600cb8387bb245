#!/usr/bin/env bash
# Set everything up and run the test suite (the same command CI runs through .ci/run).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m "not slow"` or `scripts/test.sh tests/assets`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap_env.sh
.venv/bin/hir setup
if [ -x scripts/install_test_services.sh ]; then
  scripts/install_test_services.sh   # Chromium and PostgreSQL for the operations tests
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1   # models load from installed packages only
# Two pytest workers, one test file each at a time: much of the suite waits on other processes (Spark JVMs,
# Dagster webserver/daemon/run workers, PostgreSQL), so two files overlap well on 2 cores (three were slower: the
# heavy files then compete for the CPU; docs/results.md). Files are handed out longest first (tests/conftest.py,
# from tests/durations.json), not xdist's default "most tests first", which left the few-test, multi-minute files
# (operations, end-to-end) for the end.
# HIR_TEST_WORKERS=0 runs everything in one process.
exec .venv/bin/pytest -q --timeout=1200 -n "${HIR_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  --durations=25 "$@"
