"""The quick start's capture (captures/veth-http-udp-frag.pcap, made by
captures/make-quickstart-capture.sh) shows whole, mixed conversations, and the stack delivers
them exactly.

tshark is the reference: its conversation tables (`-z conv,tcp`, `-z conv,udp`) list the same
conversations as the stack's flow records; the bytes of every direction equal the payload
tshark follows (the comparison of tests/e2e/test_e2e_tshark.py); every TCP connection has a
handshake, data both ways and a close, and is `complete`; the capture mixes IPv4 and IPv6, TCP
and UDP, and holds exactly one fragmented IPv4 datagram, which the stack reassembles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.captures import REPO, run_stack
from support.oracle import tshark_available
from support.oracle.tshark import _tshark, conversations, frame_times, reference_streams
from support.streams import compare

CAPTURE = REPO / "captures" / "veth-http-udp-frag.pcap"

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")


def _fields(display_filter: str, *fields: str) -> list[list[str]]:
    args = ["-r", str(CAPTURE), "-Y", display_filter, "-T", "fields"]
    for f in fields:
        args += ["-e", f]
    return [line.split("\t") for line in _tshark(args).splitlines() if line.strip()]


def test_small_and_mixed() -> None:
    assert CAPTURE.stat().st_size < 300 * 1024
    convs = conversations(CAPTURE)
    kinds = {(proto, ":" in a[0]) for proto, a, _ in convs}
    assert kinds == {("tcp", False), ("tcp", True), ("udp", False), ("udp", True)}
    # one datagram in fragments: its first fragment has more-fragments set, and tshark
    # reassembles it into one UDP datagram larger than the MTU
    first = _fields("ip.flags.mf == 1 && ip.frag_offset == 0", "ip.id")
    assert len(first) == 1
    whole = _fields("udp && ip.fragments", "ip.id", "udp.length")
    assert len(whole) == 1 and whole[0][0] == first[0][0] and int(whole[0][1]) > 1500


def test_the_stack_delivers_every_conversation_whole(tmp_path: Path) -> None:
    run = run_stack(CAPTURE, tmp_path / "out")
    assert run.returncode == 0, run.describe()
    summary = run.summary()
    assert summary["errors"] == summary["skipped"] == summary["gaps"] == 0
    assert summary["clock_jumps"] == {"forward": 0, "backward": 0}
    problems, totals = compare(CAPTURE.name, run, reference_streams(CAPTURE), frame_times(CAPTURE))
    assert problems == []
    assert totals.streams == len(conversations(CAPTURE)) == 5 and totals.mismatches == 0
    records = [json.loads(line) for line in (tmp_path / "out" / "flows.jsonl").open()]
    got = sorted(
        (r["proto"], *sorted([(r["src"], r["sport"]), (r["dst"], r["dport"])]))
        for r in records
        if r["dir"] == "c2s"
    )
    assert got == sorted((p, *sorted([a, b])) for p, a, b in conversations(CAPTURE))
    # data both ways in every conversation; every TCP connection whole (handshake to close)
    assert all(r["bytes"] > 0 for r in records)
    tcp = [r for r in records if r["proto"] == "tcp"]
    assert len(tcp) == 4 and all(r["complete"] is True for r in tcp)
    syns = _fields("tcp.flags.syn == 1 && tcp.flags.ack == 0", "tcp.stream")
    fins = _fields("tcp.flags.fin == 1", "tcp.stream")
    assert len(syns) == 2 and {s for (s,) in fins} == {s for (s,) in syns}
    # the fragmented datagram, reassembled: its payload is tshark's UDP length less the header
    ((_, udp_len),) = _fields("udp && ip.fragments", "ip.id", "udp.length")
    assert int(udp_len) - 8 in {r["bytes"] for r in records if r["proto"] == "udp"}
