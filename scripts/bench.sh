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

if [ "${1:-}" = isolation ]; then
  shift
  exec node dist/bench/isolation.js "$@"
fi
# scripts/bench.sh auth [--quick]: tools/call with and without caller identity (docs/adr/0011-caller-identity.md).
if [ "${1:-}" = auth ]; then
  shift
  exec node dist/bench/auth-cost.js "$@"
fi
# scripts/bench.sh auth-instructions [--quick]: Envoy's instructions per tools/call of the same variants, by callgrind.
if [ "${1:-}" = auth-instructions ]; then
  shift
  exec node dist/bench/auth-instructions.js "$@"
fi
# scripts/bench.sh inside [--quick]: tools/call with a plain and a closed inside (docs/adr/0017-closed-inside.md).
if [ "${1:-}" = inside ]; then
  shift
  exec node dist/bench/inside-cost.js "$@"
fi
# scripts/bench.sh call-cost [--quick]: every process's CPU per tools/call, A, C and D side by side (docs/adr/0008-data-path-lanes.md).
if [ "${1:-}" = call-cost ]; then
  shift
  exec node dist/bench/call-cost.js "$@"
fi
# scripts/bench.sh revision <baseline worktree> [--quick]: this tree's gateway against another revision's, in one run (docs/adr/0008-data-path-lanes.md).
if [ "${1:-}" = revision ]; then
  shift
  exec node dist/bench/revision-cost.js "$@"
fi

# scripts/bench.sh list-cost [<baseline worktree>] [--repetitions N]: where a whole 5,000-tool tools/list's time and CPU go (docs/adr/0008-data-path-lanes.md).
if [ "${1:-}" = list-cost ]; then
  shift
  exec node dist/bench/list-cost.js "$@"
fi

# scripts/bench.sh quotas [--quick]: tools/call with rate limiting off, local and global (docs/adr/0016-quotas.md).
if [ "${1:-}" = quotas ]; then
  shift
  exec node dist/bench/quota-cost.js "$@"
fi
# scripts/bench.sh rlqs-probe [--quick]: what a shared limit costs Envoy per request by mechanism (docs/adr/0016-quotas.md).
if [ "${1:-}" = rlqs-probe ]; then
  shift
  exec node dist/bench/rlqs-probe.js "$@"
fi
exec node dist/bench/main.js "$@"
