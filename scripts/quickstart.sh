#!/usr/bin/env bash
# Set everything up and run the whole pipeline on the bundled MovieLens-100k sample.
# Idempotent: a second run reuses the environment, the jar cache and the data, and re-runs the job
# (Delta replaces that run date's rows). Extra arguments go to `hir materialize`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap_env.sh
.venv/bin/hir setup
exec .venv/bin/hir materialize --source movielens "$@"   # the machine's profile (cpu without a GPU)
