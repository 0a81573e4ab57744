"""The flowexport NF (handlers/nf/rg_nf_flowexport.c) on the tcp_ip stack against a flow table
built in the test from tshark's dissection of each capture of `oracle.ELIGIBLE`.

The reference is support.conversations.reference (test_e2e_nfs.py's): every TCP/UDP header tshark dissects (IP reassembly
on), with its 5-tuple, its own time, flags and TCP/UDP length, and tshark's
`conv,tcp`/`conv,udp` conversations. For every flow record:
- protocolIdentifier is 6 for TCP and 17 for UDP; the addresses and ports are a tshark
  conversation's;
- its forward (source -> destination) and reverse packet counts are the conversation's frames
  in that direction from the first at flowStartNanoseconds to the last at flowEndNanoseconds
  (capture order: the times are the packets' own), and its octet counts
  those frames' TCP/UDP lengths (minus bytes a snaplen cut off); frames at exactly the first
  or last instant may or may not count (a duplicate ACK after the close at the same timestamp
  belongs to no instance), so the counts lie between those without and with them; records whose time span
  touches another record of the same 5-tuple (port reuse at the same instant) are checked for
  existence only, since time alone cannot split their frames;
- flowEndReason 3 (end of flow detected) only for TCP, with a FIN or RST among its frames; the
  others (end of capture: 4, idle: 1) never claim one.
And every conversation with a frame that can create an instance (any UDP datagram, a TCP
segment with SYN or payload: tcp.yaml's create_if) has a record.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO, STACK, flow_key
from support.conversations import EXCLUDED_FRAMES, Pkt, reference
from support.oracle import ELIGIBLE, TRACES, tshark_available

PROTO = {6: "tcp", 17: "udp"}


@pytest.fixture(scope="module")
def binary() -> Path:
    if not tshark_available():
        pytest.skip("tshark not installed")
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary


def _records(binary: Path, pcap: Path, out: Path) -> list[dict[str, Any]]:
    argv = [str(binary), str(pcap), "--nf", "flowexport", "--out", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(x) for x in (out / "flows.ipfix.jsonl").read_text().splitlines()]


def _creates(p: Pkt) -> bool:
    return p.proto == "udp" or bool(p.flags & 0x02) or p.payload > 0


def _window(pkts: list[Pkt], lo: int, hi: int) -> list[Pkt]:
    """A record's frames, in capture order: from the first frame at its start time to the
    last one at its end time (records are dated by their first and last packets' own
    timestamps, which a capture need not keep in order), or by time when none is at either."""
    first = next((i for i, p in enumerate(pkts) if p.ts == lo), None)
    last = next((i for i in range(len(pkts) - 1, -1, -1) if pkts[i].ts == hi), None)
    if first is None or last is None:
        return [p for p in pkts if lo <= p.ts <= hi]
    return pkts[first : last + 1]


@pytest.mark.parametrize("name", sorted(ELIGIBLE))
def test_flowexport_matches_tshark_flow_table(binary: Path, name: str, tmp_path: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    recs = _records(binary, pcap, tmp_path)
    ref = reference(pcap)
    excluded = {f for (cap, f) in EXCLUDED_FRAMES if cap == name}
    by_conv: dict[tuple[str, frozenset], list[Pkt]] = {}
    for p in ref.pkts:
        by_conv.setdefault((p.proto, frozenset([p.src, p.dst])), []).append(p)
    spans: dict[tuple[str, frozenset], list[tuple[int, int]]] = {}
    keyed = []
    for r in recs:
        proto = PROTO.get(r["protocolIdentifier"])
        assert proto is not None, f"{name}: {r}"
        _, sa, sp, da, dp = flow_key(
            proto,
            r["sourceIPAddress"],
            r["sourceTransportPort"],
            r["destinationIPAddress"],
            r["destinationTransportPort"],
        )
        a, b = (sa, sp), (da, dp)
        conv = (proto, frozenset([a, b]))
        assert conv in by_conv, f"{name}: no tshark conversation for {r}"
        spans.setdefault(conv, []).append((r["flowStartNanoseconds"], r["flowEndNanoseconds"]))
        keyed.append((r, conv, a))
    checked = 0
    for r, conv, a in keyed:
        lo, hi = r["flowStartNanoseconds"], r["flowEndNanoseconds"]
        assert lo <= hi
        frames = _window(by_conv[conv], lo, hi)
        if r["flowEndReason"] == 3:
            assert conv[0] == "tcp" and any(p.flags & 0x05 for p in frames), f"{name}: {r}"
        else:
            assert r["flowEndReason"] in (1, 4, 5), r
        if sum(1 for s in spans[conv] if s[0] <= hi and lo <= s[1]) > 1:
            continue  # another record of this 5-tuple shares the span
        # frames at the first or last instant may belong to no instance (an ACK after the
        # close at the same timestamp): they may or may not be counted
        for fwd_dir, cnt, octs in ((True, "packetDeltaCount", "transportOctetDeltaCount"),
                                   (False, "reversePacketDeltaCount",
                                    "reverseTransportOctetDeltaCount")):  # fmt: skip
            mine = [p for p in frames if (p.src == a) == fwd_dir]
            inner = [p for p in mine if p.ts not in (lo, hi)]
            edge = [p for p in mine if p.ts in (lo, hi)]
            assert len(inner) <= r[cnt] <= len(inner) + len(edge), (
                f"{name}: {cnt} {r[cnt]} vs frames {[p.frame for p in inner]} + edge "
                f"{[p.frame for p in edge]}: {r}"
            )
            if any(p.frame in excluded for p in frames):
                continue
            base = sum(p.l4 - p.cut for p in inner)
            assert base <= r[octs] <= base + sum(p.l4 - p.cut for p in edge), (
                f"{name}: {octs} {r[octs]} vs {base} + edge {[p.frame for p in edge]}: {r}"
            )
        checked += 1
    for conv, pkts in by_conv.items():
        if any(_creates(p) for p in pkts):
            assert conv in spans, (
                f"{name}: conversation {sorted(conv[1])} ({conv[0]}) has no record"
            )
    assert checked >= len(recs) // 2, f"{name}: only {checked} of {len(recs)} records checked"
