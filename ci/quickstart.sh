#!/usr/bin/env bash
# Quick start: set everything up on a fresh machine, then run the main job on the bundled
# default: validate the stock specs and draw the TCP/IP stack's parse tree.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
PY=${PYTHON:-python3}
$PY -m rubikgen validate specs/
$PY -m rubikgen graph specs/stacks/tcp_ip.yaml --format svg -o build/tcp_ip-tree.svg 2>/dev/null || {
  mkdir -p build && $PY -m rubikgen graph specs/stacks/tcp_ip.yaml --format svg -o build/tcp_ip-tree.svg; }
echo "parse tree of the TCP/IP stack: build/tcp_ip-tree.svg"
