#!/usr/bin/env bash
# Runs the gateway on its embedded default: Redis, two sample Tool Services, control plane, sidecar and
# Envoy, all on loopback. Options: --registry FILE (or MCPGW_REGISTRY), --listener-port N (or MCPGW_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck source=lib/node.sh
. scripts/lib/node.sh
exec node dist/control-plane/cli/mcpgw.js up "$@"
