#!/usr/bin/env bash
# Runs the benchmark suite (issue 5): the gateway side by side with the backend called directly,
# plain Envoy, Envoy 1.40's native MCP router and a naive Node.js proxy, all on 127.0.0.1; and the
# gateway with tracing off and at each sampling ratio (issue 15).
# Writes bench/results/latest.{json,md} and latest-latency.png (a --quick smoke run writes quick.*
# instead, so it never replaces the numbers the repository carries). About 15 minutes on 2 cores.
#   scripts/bench.sh [--quick] [--only tool-list|configuration|tracing|streaming]   (scenario 3, 4, 5 or 2 alone, into bench/results/<scenario>.*)
# The isolation bench (issue 9: one route under load while another's backend holds 2,000 calls, and
# during a 5,000-connection slow-header flood) runs on its own and writes bench/results/isolation.*:
#   scripts/bench.sh isolation [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."

CHART_PACKAGE="matplotlib==3.11.2"

scripts/setup.sh
# Jaeger, the trace collector of the tracing scenario, is one of the tools the tests use.
scripts/test-tools.sh
# shellcheck source=lib/node.sh
. scripts/lib/node.sh

# The chart is drawn with matplotlib, in the same project-local virtualenv setup.sh made for Envoy.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
  printf '[bench] installing %s into .venv/\n' "$CHART_PACKAGE"
  .venv/bin/pip install --quiet --disable-pip-version-check "$CHART_PACKAGE"
fi

# The benches that run on their own, each writing its own bench/results/<name>.*; anything else is the
# full run (or one scenario of it, --only) of dist/bench/main.js.
case "${1:-}" in
  # isolation [--quick]: one route under load beside another's held calls and a slow-header flood (issue 9).
  isolation) entry=isolation ;;
  # auth [--quick]: tools/call with and without caller identity (docs/adr/0011-caller-identity.md).
  auth) entry=auth-cost ;;
  # auth-instructions [--quick]: Envoy's instructions per tools/call of the same variants, by callgrind.
  auth-instructions) entry=auth-instructions ;;
  # jwt-authn-instructions: jwt_authn's own instructions per request, by setting, in a static Envoy under callgrind.
  jwt-authn-instructions) entry=jwt-authn-instructions ;;
  # envoy-pieces [--quick]: Envoy's instructions per tools/call with one piece of its configuration out, by callgrind (ADR-0008).
  envoy-pieces) entry=envoy-pieces-instructions ;;
  # call-log-record [--quick]: Envoy's instructions per tools/call by access log and call-log record, small static Envoys under callgrind (ADR-0008).
  call-log-record) entry=call-log-record-instructions ;;
  # inside [--quick]: tools/call with a plain and a closed inside (docs/adr/0017-closed-inside.md).
  inside) entry=inside-cost ;;
  # call-cost [--quick]: every process's CPU per tools/call, A, C and D side by side (docs/adr/0008-data-path-lanes.md).
  call-cost) entry=call-cost ;;
  # low-rate [--rates 100,250] [--repetitions N] [--baseline DIR] [--variant-args=ARGS]: tools/call at fixed rates, the gateway as the full bench runs it against D (docs/adr/0008-data-path-lanes.md).
  low-rate) entry=low-rate ;;
  # call-conditions [--instructions] [--repetitions N]: the gateway with call-cost's registry against the full bench's (docs/adr/0008-data-path-lanes.md).
  call-conditions) entry=call-conditions ;;
  # revision <baseline worktree> [--quick] [--rate N]: this tree's gateway against another revision's, in one run (docs/adr/0008-data-path-lanes.md).
  revision) entry=revision-cost ;;
  # list-cost [<baseline worktree>] [--repetitions N]: where a whole 5,000-tool tools/list's time and CPU go (docs/adr/0008-data-path-lanes.md).
  list-cost) entry=list-cost ;;
  # quotas [--quick] [--leased[=N]]: tools/call with rate limiting off, local and global; --leased: shared limits leased per Envoy worker (docs/adr/0016-quotas.md).
  quotas) entry=quota-cost ;;
  # quota-instructions [--quick] [--leased[=N]]: Envoy's instructions per tools/call of the same variants, by callgrind.
  quota-instructions) entry=quota-instructions ;;
  # rlqs-probe [--quick]: what a shared limit costs Envoy per request by mechanism (docs/adr/0016-quotas.md).
  rlqs-probe) entry=rlqs-probe ;;
  # ratelimit-settings [--quick] [--instructions] [--only=a,b]: the shared-limit path's settings one by one (docs/adr/0016-quotas.md).
  ratelimit-settings) entry=ratelimit-settings ;;
  *) exec node dist/bench/main.js "$@" ;;
esac
shift
exec node "dist/bench/$entry.js" "$@"
