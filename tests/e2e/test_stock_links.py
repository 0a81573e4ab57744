"""Every stock stack takes the link types tcp_ip takes: the gtp, pptp and sctp stacks, run on
their real Ethernet captures rewritten into Linux cooked (SLL, SLL2), NULL/LOOP and raw IP
captures (tests/support/linktypes.py), make the same handler calls with the same arguments (payload
digests included) as on the Ethernet original, and skip nothing. Their Ethernet output is compared with tshark elsewhere (tests/e2e/test_e2e_gtp_pptp.py,
tests/e2e/test_e2e_sctp.py, tests/backend/test_stacks.py); before these stacks named every link type, a
Linux cooked capture of GTP-U went silently through the Ethernet parser and wrote nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.captures import REPO
from support.linktypes import ip_packets, write_pcap
from support.oracle import TRACES

#: stack -> an untagged Ethernet capture of it (ip_packets keeps the IP frames only)
CASES = {
    "gtp": "gtp-u-tls.pcap",
    "pptp": "pptp-control-tcp1723.pcap",
    "sctp": "sctp-http.pcap",
}
LINKS = ("sll", "sll2", "loop", "null_le", "raw")


def _binary(stack: str) -> Path:
    from rubikgen.toolchain.build import build

    return build(
        REPO / "specs" / "stacks" / f"{stack}.yaml", REPO / "build" / stack, quiet=True
    ).binary


def _run(binary: Path, pcap: Path, out: Path) -> tuple[dict, str]:
    """The summary and events.jsonl (every handler call with its arguments, in order)."""
    argv = [str(binary), str(pcap), "--nf", "events", "--out", str(out), "--summary", "json"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), (out / "events.jsonl").read_text()


@pytest.mark.parametrize("stack", sorted(CASES))
def test_stock_stack_takes_every_link_type(stack: str, tmp_path: Path) -> None:
    src = TRACES / CASES[stack]
    if not src.is_file():
        pytest.skip(f"{src.name} is not in {TRACES}")
    binary = _binary(stack)
    frames = ip_packets(src)
    eth = write_pcap(tmp_path / "ethernet.pcap", "ethernet", frames)
    base_summary, base = _run(binary, eth, tmp_path / "out-ethernet")
    assert base.count("\n") >= 3, f"{stack}: (almost) no handler calls on {src.name}"
    assert base_summary["skipped"] == 0
    for link in LINKS:
        pcap = write_pcap(tmp_path / f"{link}.pcap", link, frames)
        summary, events = _run(binary, pcap, tmp_path / f"out-{link}")
        assert summary["skipped"] == 0 and summary["packets"] == len(frames), (link, summary)
        assert events == base, f"{stack} on {link}: handler calls differ from the Ethernet ones"
