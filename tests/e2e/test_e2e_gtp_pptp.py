"""End to end: the conversations inside tunnels, as the gtp and pptp stacks deliver them,
against tshark's `follow`.

The captures are the MANIFEST.tsv rows of ../shared/traces whose `stacks_covered` has a path
through the tunnel (`gtp`, or `gre>ppp` for PPTP's enhanced GRE), so new captures are picked up.
Each runs through its stock stack with the `streams` NF; the reference is tshark's follow output
of every TCP and UDP stream whose frames go through the tunnel (`oracle.reference_streams`,
their `frame.protocols` paths), compared exactly as tests/e2e/test_e2e_tshark.py compares the
tcp_ip stack (the same `compare`: TCP streams with a complete handshake and every UDP stream,
each direction's bytes equal; a flow of ours that tshark has no stream for must deliver
nothing). The outer flows (GTP-U's UDP 2152, PPTP's control connection) are not delivered by
these stacks and not compared.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from support import REPO_ROOT
from support import tunnel_captures as crafted
from support.captures import run_stack
from support.oracle import TRACES, frame_times, reference_streams, tshark_available
from support.streams import compare
from support.tunnels import _inner_udp_refs, compare_udp, only

REPO = REPO_ROOT

#: stack -> (a MANIFEST path component sequence, the frame.protocols marker of the tunnel)
TUNNELS = {"gtp": ("udp>gtp", ":gtp:"), "pptp": ("gre>ppp", ":gre:ppp:")}


def tunnel_captures(stack: str) -> list[str]:
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    via = TUNNELS[stack][0]
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return sorted(
        r["file"]
        for r in rows
        if any(via in p for p in (r.get("stacks_covered") or "").split(";"))
        and (TRACES / r["file"]).is_file()
    )


#: (stack, capture) -> why the stack does not deliver what tshark follows yet (strict xfail:
#: the test fails once it does, so the entry must go)
KNOWN: dict[tuple[str, str], str] = {}

CASES = [
    pytest.param(
        s,
        name,
        id=f"{s}-{name}",
        marks=[pytest.mark.xfail(reason=KNOWN[(s, name)], strict=True)]
        if (s, name) in KNOWN
        else [],
    )
    for s in TUNNELS
    for name in tunnel_captures(s)
]


def test_manifest_lists_tunnel_captures() -> None:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not there")
    for stack in TUNNELS:
        assert tunnel_captures(stack), f"MANIFEST.tsv lists no {stack} capture"


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize(("stack", "name"), CASES)
def test_inner_conversations_equal_tshark_follow(stack: str, name: str, tmp_path: Path) -> None:
    pcap = TRACES / name
    run = run_stack(pcap, tmp_path / "out", stack=REPO / "specs" / "stacks" / f"{stack}.yaml")
    assert run.returncode == 0, run.describe()
    marker = TUNNELS[stack][1]
    inner = tuple(s for s in reference_streams(pcap) if any(marker in p for p in s.paths))
    assert inner, f"{name}: tshark sees no stream inside the tunnel"
    # with the frame times, `close` is checked too (expiry against the specs' timeouts)
    problems, totals = compare(name, run, inner, frame_times(pcap))
    print(f"\n[e2e-tunnels] {stack} {name}: {totals.line()}")
    assert totals.directions > 0, f"{name}: nothing compared ({totals.line()})"
    if stack == "gtp":  # every GTP capture carries real TCP payload through the tunnel
        assert totals.bytes > 1000, totals.line()
    assert not problems, f"{name}: {len(problems)} differences from tshark:\n" + "\n".join(
        problems[:40]
    )


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", sorted(crafted.GTP_WRAPS))
def test_gtp_inner_tcp_and_udp_equal_tshark(name: str, tmp_path: Path) -> None:
    """Inner UDP (v4 and v6, over an IPv4 or IPv6 transport) and TCP inside GTP-U: every inner
    UDP direction carries exactly tshark's innermost `udp.payload` bytes, the TCP connection
    what tshark follows."""
    pcap = crafted.write(name, tmp_path)
    run = run_stack(pcap, tmp_path / "out", stack=REPO / "specs" / "stacks" / "gtp.yaml")
    assert run.returncode == 0, run.describe()
    tcp = tuple(s for s in reference_streams(pcap) if s.proto == "tcp")
    problems, totals = compare(name, only(run, "tcp"), tcp)
    refs = _inner_udp_refs(pcap)
    udp_problems, n_dirs, n_bytes = compare_udp(name, run, refs)
    print(f"\n[e2e-gtp] {name}: TCP {totals.line()}; UDP {n_dirs} directions, {n_bytes} bytes")
    assert not problems + udp_problems, problems + udp_problems
    assert totals.directions == 2 and len(refs) == 1 and n_dirs == 2 and n_bytes > 30


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", tunnel_captures("gtp"))
def test_gtp_real_captures_inner_udp_equal_tshark(name: str, tmp_path: Path) -> None:
    """On the real GTP-U captures, the inner UDP the gtp stack now delivers (none of the
    stock captures is known to carry any; then both sides are empty) equals tshark's."""
    pcap = TRACES / name
    run = run_stack(pcap, tmp_path / "out", stack=REPO / "specs" / "stacks" / "gtp.yaml")
    assert run.returncode == 0, run.describe()
    problems, _, _ = compare_udp(name, run, _inner_udp_refs(pcap))
    assert not problems, problems
