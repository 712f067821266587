#!/usr/bin/env bash
# Runs the whole test suite, unit and end-to-end (real Envoy 1.40, Redis and MCP SDK peers).
# Extra arguments go to jest, e.g. scripts/test.sh test/unit
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# One test file at a time: the end-to-end files each run a whole gateway, and the machine has 2 cores.
exec npx jest --runInBand "$@"
