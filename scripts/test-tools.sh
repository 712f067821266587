#!/usr/bin/env bash
# Installs the real parts the end-to-end tests use beside Envoy and Redis, into .tools/ (git-ignored).
# What is there already is kept, never rebuilt; scripts/test.sh runs this beside scripts/setup.sh.
#   - Keycloak 26.7.3 (org.keycloak:keycloak-quarkus-dist tar.gz from Maven Central, by mvn), run with
#     a Java 21+ (the image's Temurin 25 JDK; JAVA_HOME for it is written to .tools/tools.json)
#   - from the Go module proxy, each built from a small module under test/tools/ whose go.mod and
#     go.sum pin every dependency: Jaeger all-in-one v1.76.0, promtool and prometheus v0.316.0,
#     Helm v4.3.1, envoyproxy/ratelimit (a pinned commit), kubeconform v0.8.0
#   - from the Go module proxy as documents (go mod download, checked against Go's checksum database):
#     the Kubernetes API's own OpenAPI document (k8s.io/kubernetes v1.37.2, api/openapi-spec/swagger.json)
#     and prometheus-operator's ServiceMonitor CRD (v0.85.0), which the chart's manifests are checked against
#   - from PyPI into a virtualenv of its own (.tools/compose-venv): docker-compose 1.29.2, to check
#     docker-compose.yml with `config -q` (its PyYAML 5.4.1 builds on Python 3.11 only with cython<3
#     and --no-build-isolation)
#   - from Debian: chromium (driven by the npm devDependency playwright-core, which never downloads a
#     browser), redis-sentinel, openssl
# The Go module and build caches are Go's own (go env GOMODCACHE GOCACHE), so a fresh clone on the
# same machine only links. Independent installs run in parallel; logs go to .tools/logs/.
#
# Measured on this machine (2 cores, shared with other work at a load average of 5 to 10):
#   cold, as on a new machine (no .tools/, empty Go module and build caches and Maven repository):
#     13 min 22 s (17 CPU minutes: Jaeger 12.5 min, promtool + prometheus 13.4, Helm 9.2, ratelimit
#     3.3, Keycloak 0.6, side by side); installing the Debian packages adds 61 s beside them
#   a fresh clone on a machine that ran it before (no .tools/; Go's and Maven's caches warm): 19 s
#   warm (everything in .tools/): 0.2 s
#   kubeconform (3 s), the Kubernetes OpenAPI document and the ServiceMonitor CRD (go mod download of
#   k8s.io/kubernetes, a 21 MB module, and prometheus-operator) and docker-compose (30 s, PyYAML built
#   from source) were added later, beside the others; measured with Go's caches warm
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=lib/apt.sh
. scripts/lib/apt.sh

KEYCLOAK_VERSION=26.7.3
KEYCLOAK_HOME=$ROOT/.tools/keycloak-$KEYCLOAK_VERSION
BIN=$ROOT/.tools/bin
LOGS=$ROOT/.tools/logs
DEBIAN_PACKAGES=(chromium redis-sentinel openssl)
KUBERNETES_VERSION=1.37.2
PROMETHEUS_OPERATOR_VERSION=0.85.0
KUBERNETES_OPENAPI=$ROOT/.tools/kubernetes-openapi
COMPOSE_VERSION=1.29.2
COMPOSE_VENV=$ROOT/.tools/compose-venv

say() { printf '[test-tools] %s\n' "$*"; }
fail() { say "$*" >&2; exit 1; }

mkdir -p "$BIN" "$LOGS"

# A Java of at least 21 for Keycloak: JAVA_HOME if it is one, else one under /usr/lib/jvm.
java_major() { "$1/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'; }
find_keycloak_java() {
  local candidate
  for candidate in "${JAVA_HOME:-}" $(ls -d /usr/lib/jvm/*/ 2>/dev/null | sort -rV); do
    candidate=${candidate%/}
    if [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] && [ "$(java_major "$candidate")" -ge 21 ]; then
      echo "$candidate"
      return
    fi
  done
}

keycloak_present() { [ -x "$KEYCLOAK_HOME/bin/kc.sh" ]; }
install_keycloak() {
  local downloads=$ROOT/.tools/downloads
  mvn -q -B dependency:copy -Dartifact="org.keycloak:keycloak-quarkus-dist:$KEYCLOAK_VERSION:tar.gz" -DoutputDirectory="$downloads"
  local staging
  staging=$(mktemp -d "$ROOT/.tools/keycloak-staging.XXXXXX")
  tar -xzf "$downloads/keycloak-quarkus-dist-$KEYCLOAK_VERSION.tar.gz" -C "$staging"
  rm -rf "$KEYCLOAK_HOME" "$downloads/keycloak-quarkus-dist-$KEYCLOAK_VERSION.tar.gz"
  mv "$staging/keycloak-$KEYCLOAK_VERSION" "$KEYCLOAK_HOME"
  rm -rf "$staging"
}

# A Go tool is current when it was built from the go.mod and go.sum its module holds now.
go_module_stamp() { cat "test/tools/$1/go.mod" "test/tools/$1/go.sum" | sha256sum | cut -d' ' -f1; }
go_tool_present() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.stamp" 2>/dev/null)" = "$(go_module_stamp "$2")" ]; }
build_go_tool() {
  local name=$1 module=$2 package=$3
  (cd "test/tools/$module" && go build -trimpath -ldflags='-s -w' -o "$BIN/$name.partial" "$package")
  mv "$BIN/$name.partial" "$BIN/$name"
  go_module_stamp "$module" >"$BIN/.$name.stamp"
}

# promtool and prometheus share most of their packages: built one after the other, the second reuses the
# first's compiled packages (two builds at once would each compile them).
prometheus_present() { go_tool_present promtool prometheus && go_tool_present prometheus prometheus; }
build_prometheus() {
  build_go_tool promtool prometheus github.com/prometheus/prometheus/cmd/promtool
  build_go_tool prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus
}

# The documents the chart is validated against, copied out of Go's module cache (read-only files there).
kubernetes_openapi_present() {
  [ -f "$KUBERNETES_OPENAPI/v$KUBERNETES_VERSION/swagger.json" ] && [ -f "$KUBERNETES_OPENAPI/v$KUBERNETES_VERSION/servicemonitors.yaml" ]
}
module_dir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
install_kubernetes_openapi() {
  local kubernetes operator staging
  kubernetes=$(module_dir "k8s.io/kubernetes@v$KUBERNETES_VERSION")
  operator=$(module_dir "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION")
  staging=$(mktemp -d "$ROOT/.tools/kubernetes-openapi-staging.XXXXXX")
  cp "$kubernetes/api/openapi-spec/swagger.json" "$staging/swagger.json"
  cp "$operator/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$staging/servicemonitors.yaml"
  chmod u+w "$staging"/*
  mkdir -p "$KUBERNETES_OPENAPI"
  rm -rf "${KUBERNETES_OPENAPI:?}/v$KUBERNETES_VERSION"
  mv "$staging" "$KUBERNETES_OPENAPI/v$KUBERNETES_VERSION"
}

compose_present() { [ -x "$COMPOSE_VENV/bin/docker-compose" ] && "$COMPOSE_VENV/bin/docker-compose" version --short 2>/dev/null | grep -qx "$COMPOSE_VERSION"; }
install_compose() {
  rm -rf "$COMPOSE_VENV"
  python3 -m venv "$COMPOSE_VENV"
  "$COMPOSE_VENV/bin/pip" install -q 'cython<3' wheel setuptools
  "$COMPOSE_VENV/bin/pip" install -q --no-build-isolation 'PyYAML==5.4.1'
  "$COMPOSE_VENV/bin/pip" install -q "docker-compose==$COMPOSE_VERSION"
}

debian_packages_present() {
  local package
  for package in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || return 1
  done
}
install_debian_packages() { apt_install_missing "${DEBIAN_PACKAGES[@]}"; }

# name | present check | install command. Go tools: binary, its module under test/tools/, package.
TOOLS=(
  "keycloak|keycloak_present|install_keycloak"
  "jaeger|go_tool_present jaeger jaeger|build_go_tool jaeger jaeger github.com/jaegertracing/jaeger/cmd/jaeger"
  "prometheus|prometheus_present|build_prometheus"
  "helm|go_tool_present helm helm|build_go_tool helm helm helm.sh/helm/v4/cmd/helm"
  "ratelimit|go_tool_present ratelimit ratelimit|build_go_tool ratelimit ratelimit github.com/envoyproxy/ratelimit/src/service_cmd"
  "kubeconform|go_tool_present kubeconform kubeconform|build_go_tool kubeconform kubeconform github.com/yannh/kubeconform/cmd/kubeconform"
  "kubernetes-openapi|kubernetes_openapi_present|install_kubernetes_openapi"
  "docker-compose|compose_present|install_compose"
  "debian packages (${DEBIAN_PACKAGES[*]})|debian_packages_present|install_debian_packages"
)

command -v go >/dev/null || fail "Go is needed to build Jaeger, Prometheus, Helm, ratelimit and kubeconform (go.mod says which version)"
command -v mvn >/dev/null || fail "Maven (mvn) is needed to fetch Keycloak from Maven Central"
KEYCLOAK_JAVA_HOME=$(find_keycloak_java)
[ -n "$KEYCLOAK_JAVA_HOME" ] || fail "Keycloak $KEYCLOAK_VERSION needs Java 21 or newer: set JAVA_HOME to one"

started_all=$SECONDS
declare -A job_pid=()
for entry in "${TOOLS[@]}"; do
  IFS='|' read -r name present install <<<"$entry"
  if $present; then
    continue
  fi
  say "installing $name (log: .tools/logs/${name%% *}.log)"
  log="$LOGS/${name%% *}"
  (
    set +e
    started=$SECONDS
    (set -e; $install) >"$log.log" 2>&1
    status=$?
    echo "$((SECONDS - started))" >"$log.seconds"
    exit "$status"
  ) &
  job_pid[$name]=$!
done

failed=()
for name in "${!job_pid[@]}"; do
  wait "${job_pid[$name]}" || failed+=("$name")
done
for entry in "${TOOLS[@]}"; do
  IFS='|' read -r name _ <<<"$entry"
  if [ -z "${job_pid[$name]:-}" ]; then
    say "$name: already installed"
  elif [[ " ${failed[*]} " == *" $name "* ]]; then
    say "$name: FAILED after $(cat "$LOGS/${name%% *}.seconds") s; the end of .tools/logs/${name%% *}.log:"
    tail -n 20 "$LOGS/${name%% *}.log" | sed 's/^/    /' >&2
  else
    say "$name: installed in $(cat "$LOGS/${name%% *}.seconds") s"
  fi
done
[ ${#failed[@]} -eq 0 ] || fail "could not install: ${failed[*]}"

[ -f node_modules/playwright-core/package.json ] ||
  say "note: the npm devDependency playwright-core is not installed yet (scripts/setup.sh runs npm ci)"

# Where the tests find every part (test/support/tools.ts reads and checks this file).
cat >"$ROOT/.tools/tools.json" <<JSON
{
  "keycloak": { "version": "$KEYCLOAK_VERSION", "home": "$KEYCLOAK_HOME", "javaHome": "$KEYCLOAK_JAVA_HOME" },
  "jaeger": "$BIN/jaeger",
  "promtool": "$BIN/promtool",
  "prometheus": "$BIN/prometheus",
  "helm": "$BIN/helm",
  "ratelimit": "$BIN/ratelimit",
  "kubeconform": "$BIN/kubeconform",
  "kubernetesOpenApi": { "version": "$KUBERNETES_VERSION", "swagger": "$KUBERNETES_OPENAPI/v$KUBERNETES_VERSION/swagger.json", "serviceMonitorCrd": "$KUBERNETES_OPENAPI/v$KUBERNETES_VERSION/servicemonitors.yaml" },
  "dockerCompose": "$COMPOSE_VENV/bin/docker-compose",
  "chromium": "$(command -v chromium)",
  "redisSentinel": "$(command -v redis-sentinel)",
  "openssl": "$(command -v openssl)"
}
JSON
say "ready in $((SECONDS - started_all)) s"
