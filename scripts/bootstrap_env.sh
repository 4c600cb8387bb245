#!/usr/bin/env bash
# Create .venv and install the pinned dependency set (idempotent: skipped when the lock is unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${HIR_PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.hir-lock.sha256
want=$(cat requirements.lock pyproject.toml scripts/bootstrap_env.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing pinned dependencies (requirements.lock)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.9.11"
  # Bytecode compiled once here: uv does not by default, and where PYTHONDONTWRITEBYTECODE is set every process
  # (each `hir`, Dagster run worker and Spark Python worker) would otherwise compile dagster, pyspark and torch again.
  .venv/bin/uv pip sync --quiet --python .venv/bin/python --compile-bytecode requirements.lock
  .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
  echo "$want" > "$stamp"
else
  echo "==> .venv is up to date"
fi
