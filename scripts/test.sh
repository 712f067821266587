#!/usr/bin/env bash
# Runs the whole test suite, unit and end-to-end: real Envoy 1.40, Redis and MCP SDK peers, and the real
# parts scripts/test-tools.sh installs (Keycloak, Jaeger, Prometheus, Helm, ratelimit, Chromium,
# Sentinel). Extra arguments go to jest, e.g. scripts/test.sh test/unit
set -euo pipefail
cd "$(dirname "$0")/.."

# The tools install beside npm ci and the build (each step skips what is there). The tools run in a
# process group of their own, so that nothing of theirs outlives this script if setup fails or it is
# interrupted.
set -m
scripts/test-tools.sh &
tools_pid=$!
set +m
trap 'kill -TERM -- "-$tools_pid" 2>/dev/null || true' EXIT
scripts/setup.sh
if ! wait "$tools_pid"; then
  echo "[test] scripts/test-tools.sh failed (see above)" >&2
  exit 1
fi
trap - EXIT

# shellcheck source=lib/node.sh
. scripts/lib/node.sh
# One test file at a time: the end-to-end files each run a whole gateway, and the machine has 2 cores.
exec npx jest --runInBand "$@"
