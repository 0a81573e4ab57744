#!/usr/bin/env bash
# Quick start: set up what the main job needs (ci/setup.sh: a C toolchain, libpcap, Graphviz,
# the .venv with rubikgen), check the stock specs, draw the TCP/IP stack, then compile it to C
# and run it on the bundled capture (captures/README.md) with the `streams` network function,
# and show the conversations it reassembled.
set -euo pipefail
cd "$(dirname "$0")/.."
# Setup only when something is missing (ci/setup.sh --check runs no apt, pip or compiler).
if bash ci/setup.sh --check >/dev/null; then
  echo "quickstart: everything is installed; setup skipped (bash ci/setup.sh forces it)"
else
  bash ci/setup.sh
fi
PY=${RG_VENV:-.venv}/bin/python
$PY -m rubikgen validate specs/
mkdir -p build
$PY -m rubikgen graph specs/stacks/tcp_ip.yaml --format svg -o build/tcp_ip-tree.svg
$PY -m rubikgen graph specs/stacks/tcp_ip.yaml --psm tcp --format svg -o build/tcp-psm.svg
echo "parse tree of the TCP/IP stack: build/tcp_ip-tree.svg; TCP state machine: build/tcp-psm.svg"

CAPTURE=captures/veth-http-udp-frag.pcap
OUT=out/quickstart
echo
echo "== rubikgen run specs/stacks/tcp_ip.yaml $CAPTURE --nf streams --out $OUT"
$PY -m rubikgen run specs/stacks/tcp_ip.yaml "$CAPTURE" --nf streams --out "$OUT"
echo
echo "== conversations ($OUT/flows.jsonl; the bytes of each direction in $OUT/streams/)"
$PY - "$OUT/flows.jsonl" <<'PYEOF'
import json
import sys

path = sys.argv[1]
try:
    with open(path, encoding="utf-8") as f:
        flows = [json.loads(line) for line in f if line.strip()]
except OSError as e:
    sys.exit(f"quickstart: cannot read {path}: {e}")


def endpoint(addr, port):
    addr = str(addr)
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


# Transport flows only: instances of layers without ports (IP reassembly) are left out.
shown = [r for r in flows if r.get("sport") is not None and r.get("dport") is not None]
rows = [("proto", "src:sport → dst:dport", "dir", "bytes", "complete")]
for r in shown:
    conv = f"{endpoint(r.get('src'), r.get('sport'))} → {endpoint(r.get('dst'), r.get('dport'))}"
    done = r.get("complete")
    rows.append(
        (
            str(r.get("proto", r.get("layer", "?"))),
            conv,
            str(r.get("dir", "")),
            str(r.get("bytes", "")),
            "-" if done is None else ("yes" if done else "no"),
        )
    )
widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
for row in rows:
    print("  ".join(cell.rjust(w) if i == 3 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
# Two records per flow (one per direction): the summary's `flows` line counts flows.
nflows = len({r.get("uid") for r in shown})
print(f"{nflows} conversation(s), {len(shown)} direction(s); complete: a TCP connection seen from handshake to close ('-': UDP)")
PYEOF
