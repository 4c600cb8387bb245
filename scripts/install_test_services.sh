#!/usr/bin/env bash
# Install the services the operations tests drive (tests/operations): Debian's Chromium (headless browser
# for the Dagster UI test) and PostgreSQL (Postgres-backed Dagster instance). Idempotent: a quick no-op
# when both are present. If they cannot be installed (not Debian, not root, no package index) it says why and
# how in one line and fails, so that a test run never goes green without its browser and database tests;
# HIR_ALLOW_MISSING_SERVICES=1 opts out (the tests that need them then skip, saying why).
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
give_up() {
  say "$1; install ${missing[*]} (Debian: apt-get install ${missing[*]}) or set HIR_ALLOW_MISSING_SERVICES=1 to run without the tests that need them"
  [ "${HIR_ALLOW_MISSING_SERVICES:-0}" = "1" ] && exit 0
  exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
  give_up "apt-get not found"
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    give_up "not root and no passwordless sudo"
  fi
fi

say "installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
# Refresh the index only when installing from the cached one fails (a stale or empty index).
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/install_test_services.log 2>&1; then
  if ! { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
      >>/tmp/install_test_services.log 2>&1; then
    tail -n 5 /tmp/install_test_services.log >&2
    give_up "apt-get could not install them (see /tmp/install_test_services.log)"
  fi
fi
say "installed ${missing[*]}"
