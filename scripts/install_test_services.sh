#!/usr/bin/env bash
# Install the services the operations tests drive (tests/operations): Debian's Chromium (headless browser
# for the Dagster UI test) and PostgreSQL (Postgres-backed Dagster instance). Idempotent: a quick no-op
# when both are present. Soft-fails: if apt is unavailable (not Debian, not root, no package index) it
# says why and exits 0, and the operations tests then skip with that reason.
set -uo pipefail

# Debian package -> a binary proving it is installed.
declare -A PROBE=(
  [chromium]="chromium"
  [postgresql]="/usr/lib/postgresql/*/bin/initdb"
)

missing=()
for pkg in "${!PROBE[@]}"; do
  probe=${PROBE[$pkg]}
  if [[ $probe == /* ]]; then
    compgen -G "$probe" >/dev/null || missing+=("$pkg")
  else
    command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

say() { echo "install_test_services: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
  say "apt-get not found; cannot install ${missing[*]} (operations tests will skip)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    say "not root and no passwordless sudo; cannot install ${missing[*]} (operations tests will skip)"
    exit 0
  fi
fi

say "installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
# Refresh the index only when installing from the cached one fails (a stale or empty index).
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/install_test_services.log 2>&1; then
  if ! { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
      >>/tmp/install_test_services.log 2>&1; then
    say "apt-get could not install ${missing[*]} (see /tmp/install_test_services.log); operations tests will skip"
    tail -n 5 /tmp/install_test_services.log >&2
    exit 0
  fi
fi
say "installed ${missing[*]}"
