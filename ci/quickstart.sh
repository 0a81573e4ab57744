#!/usr/bin/env bash
# Quick start: set everything up on a fresh machine, then run the main job on the bundled
# default. Until the C back-end lands (issue 3) the main job validates the stock specs and
# draws the TCP/IP stack's parse tree.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
PY=${PYTHON:-python3}
$PY -m rubikgen validate specs/
mkdir -p build
$PY -m rubikgen graph specs/stacks/tcp_ip.yaml --format svg -o build/tcp_ip-tree.svg
$PY -m rubikgen graph specs/stacks/tcp_ip.yaml --psm tcp --format svg -o build/tcp-psm.svg
echo "parse tree of the TCP/IP stack: build/tcp_ip-tree.svg; TCP state machine: build/tcp-psm.svg"
