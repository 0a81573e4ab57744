"""Is the tshark oracle (tests/support/oracle) right? Checked against computations that share nothing
with it: the capture list in MANIFEST.tsv, and a small TCP/UDP reassembler written here on top
of scapy's packet parser, which never looks at tshark's output.

The reassembler keeps the first copy of every TCP byte (as tshark's follow does), places SYN
data at ISN + 1, starts a direction without SYN at its first packet, and delivers the bytes
that are contiguous from there; IPv4 fragments are reassembled first (the last copy of an
overlapping fragment byte wins, as in tshark). It knows nothing of capture gaps
or truncated frames, so captures with those are compared on what both must agree on.
"""

from __future__ import annotations

import csv
import hashlib
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.oracle import (
    ELIGIBLE,
    EXCLUDED,
    TRACES,
    FlowDir,
    Gap,
    conversations,
    eligible_captures,
    prefetch,
    reference_flows,
    reference_streams,
    tshark_available,
)
from support.oracle.tshark import TCP_IP_PATH, _Followed, _parse_follow

needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"no captures in {TRACES}")
needs_tshark = pytest.mark.skipif(
    not tshark_available(), reason="tshark is not installed (bash ci/setup.sh installs it)"
)


def _manifest() -> list[str]:
    with open(TRACES / "MANIFEST.tsv", newline="") as f:
        return [row["file"] for row in csv.DictReader(f, delimiter="\t")]


ALL = sorted(ELIGIBLE) + sorted(EXCLUDED)


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Run tshark on every capture up front, in parallel (about 0.2 s each)."""
    if tshark_available() and TRACES.is_dir():
        prefetch(TRACES / name for name in ALL if (TRACES / name).is_file())


# ---------------------------------------------------------------------------------------------
# Capture lists
# ---------------------------------------------------------------------------------------------


@needs_traces
def test_every_capture_is_eligible_or_excluded_with_a_reason() -> None:
    files = _manifest()
    assert sorted(files) == sorted(p.name for p in TRACES.glob("*.pcap"))
    assert not set(ELIGIBLE) & set(EXCLUDED)
    assert set(ELIGIBLE) | set(EXCLUDED) == set(files)
    assert all(len(reason) > 20 for reason in [*ELIGIBLE.values(), *EXCLUDED.values()])
    assert [p.name for p in eligible_captures()] == sorted(ELIGIBLE)


@needs_traces
@needs_tshark
@pytest.mark.parametrize("name", ALL)
def test_eligibility_matches_what_tshark_dissects(name: str) -> None:
    """Eligible: every TCP/UDP header of every stream sits on a path tcp_ip parses.
    Excluded: at least one stream is (partly) inside something tcp_ip does not decapsulate."""
    streams = reference_streams(TRACES / name)
    outside = {
        (s.proto, s.index): sorted(p for p in s.paths if not TCP_IP_PATH.fullmatch(p))
        for s in streams
        if not all(TCP_IP_PATH.fullmatch(p) for p in s.paths)
    }
    if name in ELIGIBLE:
        assert outside == {}
    else:
        assert outside, f"{name} is excluded, but tcp_ip sees all of its streams"


# ---------------------------------------------------------------------------------------------
# The independent reassembler
# ---------------------------------------------------------------------------------------------

MOD = 1 << 32


@dataclass
class _Flow:
    proto: str
    first: tuple[tuple[str, int], tuple[str, int]]  # (src, sport), (dst, dport) of packet 1
    # (sender, TCP flags, seq, ack, payload); flags, seq and ack are 0 for UDP
    packets: list[tuple[tuple[str, int], int, int, int, bytes]] = field(default_factory=list)


def _l3_packets(path: Path, overlap: str = "last") -> Iterator[object]:
    """The IPv4/IPv6 packets of a capture in order, IPv4 fragments reassembled (a datagram
    appears where its last missing fragment arrives, as tshark dissects it there). Where
    fragments overlap, the `overlap` copy ("first" or "last" to arrive) wins."""
    from scapy.all import IP, Loopback, Raw, rdpcap
    from scapy.layers.inet6 import IPv6

    pending: dict[tuple, dict] = {}
    for pkt in rdpcap(str(path)):
        net = pkt.getlayer(IP) or pkt.getlayer(IPv6)
        if net is None and Loopback in pkt and Raw in pkt:
            # scapy binds BSD loopback family 2 to IPv4 but not 24/28/30 to IPv6
            raw = bytes(pkt[Raw])
            net = IPv6(raw) if raw[:1] and raw[0] >> 4 == 6 else None
        if net is None:
            continue
        if isinstance(net, IP) and (net.flags.MF or net.frag):
            raw = bytes(net)
            hlen = net.ihl * 4
            key = (net.src, net.dst, net.id, net.proto)
            st = pending.setdefault(key, {"bytes": {}, "end": None, "header": raw[:hlen]})
            for i, byte in enumerate(raw[hlen : net.len], start=net.frag * 8):
                if overlap == "last" or i not in st["bytes"]:
                    st["bytes"][i] = byte
            if net.frag == 0:
                st["header"] = raw[:hlen]
            if not net.flags.MF:
                st["end"] = net.frag * 8 + net.len - hlen
            if st["end"] is None or any(i not in st["bytes"] for i in range(st["end"])):
                continue
            del pending[key]
            header = bytearray(st["header"])
            header[2:4] = (hlen + st["end"]).to_bytes(2, "big")
            header[6:8] = b"\0\0"  # no MF, offset 0
            net = IP(bytes(header) + bytes(st["bytes"][i] for i in range(st["end"])))
        yield net


def _payload(l4: object) -> bytes:
    from scapy.all import Padding

    data = bytes(l4.payload)
    pad = l4.getlayer(Padding)
    return data[: len(data) - len(bytes(pad))] if pad is not None else data


def _scapy_flows(path: Path, overlap: str = "last") -> dict[tuple[str, frozenset], _Flow]:
    from scapy.all import TCP, UDP

    flows: dict[tuple[str, frozenset], _Flow] = {}
    for net in _l3_packets(path, overlap):
        for layer in (TCP, UDP):
            if layer not in net:
                continue
            l4 = net[layer]
            src, dst = (net.src, l4.sport), (net.dst, l4.dport)
            proto = layer.__name__.lower()
            flow = flows.setdefault((proto, frozenset((src, dst))), _Flow(proto, (src, dst)))
            if proto == "tcp":
                flow.packets.append((src, int(l4.flags), l4.seq, l4.ack, _payload(l4)))
            else:
                flow.packets.append((src, 0, 0, 0, _payload(l4)))
            break
    return flows


def _reassemble(segments: list[tuple[int, int, bytes]]) -> bytes:
    """(flags, seq, payload) of one direction -> the bytes contiguous from its start."""
    syn = next((seq for flags, seq, _ in segments if flags & 0x02), None)
    base = (syn + 1) % MOD if syn is not None else segments[0][1]
    have: dict[int, int] = {}
    for flags, seq, payload in segments:
        start = (seq + (1 if flags & 0x02 else 0) - base) % MOD
        if start >= 1 << 31:
            continue  # before the start
        for i, byte in enumerate(payload):
            have.setdefault(start + i, byte)
    out = bytearray()
    while len(out) in have:
        out.append(have[len(out)])
    return bytes(out)


def _handshake_complete(flow: _Flow) -> tuple[bool, bool]:
    """(a SYN, a SYN-ACK acknowledging it, an ACK acknowledging that; SYN and SYN-ACK seen
    and a FIN or RST seen). No sequence number wraps in these captures' handshakes."""
    syns = [(who, seq, len(d)) for who, f, seq, _, d in flow.packets if f & 0x12 == 0x02]
    synacks = [(who, seq, ack) for who, f, seq, ack, _ in flow.packets if f & 0x12 == 0x12]
    acks = {(who, ack) for who, f, _, ack, _ in flow.packets if f & 0x16 == 0x10}
    # the SYN-ACK may also acknowledge Fast Open data on the SYN
    handshake = any(
        b != a and 0 <= ack - (isn + 1) % MOD <= data and (a, (isn2 + 1) % MOD) in acks
        for a, isn, data in syns
        for b, isn2, ack in synacks
    )
    teardown = any(f & 0x05 for _, f, _, _, _ in flow.packets)
    return handshake, bool(syns and synacks and teardown)


def _independent(path: Path, overlap: str = "last") -> dict[tuple, tuple]:
    """key -> (dir, bytes, sha256, complete, handshake), like FlowDir."""
    out = {}
    for flow in _scapy_flows(path, overlap).values():
        handshake = complete = None
        if flow.proto == "tcp":
            handshake, complete = _handshake_complete(flow)
        c, s = flow.first
        for name, src, dst in (("c2s", c, s), ("s2c", s, c)):
            mine = [(f, q, d) for who, f, q, _, d in flow.packets if who == src]
            if flow.proto == "tcp":
                data = _reassemble(mine) if mine else b""
            else:
                data = b"".join(d for _, _, d in mine)
            key = (flow.proto, src[0], src[1], dst[0], dst[1])
            out[key] = (name, len(data), hashlib.sha256(data).hexdigest(), complete, handshake)
    return out


def _reference(path: Path) -> dict[tuple, tuple]:
    return {
        f.key: (f.dir, f.bytes, f.sha256, f.complete, f.handshake) for f in reference_flows(path)
    }


# Eligible captures on which the simple reassembler cannot agree with tshark, and why. Each is
# checked for what it does show below.
DIFFERENT = {
    "http-ooo-lost-rst-tlpw1.pcap": "a capture gap: tshark skips it (with a marker), we stop",
    "snaplen96-http.pcap": "truncated segments: tshark appends their captured bytes",
}


@needs_traces
@needs_tshark
@pytest.mark.parametrize("name", sorted(set(ELIGIBLE) - set(DIFFERENT)))
def test_flows_match_an_independent_reassembler(name: str) -> None:
    """Same flow directions, c2s sides, byte counts, sha256, handshake and complete."""
    pytest.importorskip("scapy")
    path = TRACES / name
    ours, ref = _independent(path), _reference(path)
    assert sorted(ours) == sorted(ref)
    for key in ref:
        assert ours[key] == ref[key], key


@needs_traces
@needs_tshark
def test_the_named_simple_captures_have_data_both_ways() -> None:
    """The two captures the comparison is anchored on deliver a complete, 2-way flow."""
    for name, sizes in {
        "http-post-upload.pcap": (2029, 1509),
        "ipv6-http-curl-localhost.pcap": (74, 717),
    }.items():
        flows = reference_flows(TRACES / name)
        assert [(f.dir, f.bytes) for f in flows] == [("c2s", sizes[0]), ("s2c", sizes[1])]
        assert all(f.handshake and f.complete for f in flows)


@needs_traces
@needs_tshark
def test_capture_gap_marker_is_stripped_and_reported() -> None:
    """tshark prints '[1288 bytes missing in capture file]' + NUL inside the server's data; the
    oracle removes it and reports the gap; what precedes the gap is what we reassemble."""
    pytest.importorskip("scapy")
    path = TRACES / "http-ooo-lost-rst-tlpw1.pcap"
    (stream,) = reference_streams(path)
    s2c = stream.s2c
    assert s2c.gaps == (Gap(offset=35576, missing=1288),)
    assert b"bytes missing in capture file" not in s2c.data
    assert s2c.flow.bytes == len(s2c.data) == 49744
    assert stream.c2s.gaps == ()
    ours = _independent(path)[s2c.flow.key]
    assert ours[1] == 35576  # contiguous up to the hole
    assert hashlib.sha256(s2c.data[:35576]).hexdigest() == ours[2]
    assert s2c.truncated_frames > 0  # and tshark also appended truncated segments' bytes


@needs_traces
@needs_tshark
def test_overlapping_ipv4_fragments_newest_copy_wins() -> None:
    """tshark's IPv4 reassembly keeps the last copy of overlapping fragment bytes (the policy
    ip.yaml copies): fragment offset 24..72 arrives after 48..72 with other bytes, and wins."""
    pytest.importorskip("scapy")
    path = TRACES / "ipv4-frag-tcp-overlap-ooo-crafted.pcap"
    ref = _reference(path)
    assert _independent(path, overlap="last") == ref
    assert _independent(path, overlap="first") != ref
    assert max(v[1] for v in ref.values()) == 69


@needs_traces
@needs_tshark
def test_truncated_segments_contribute_their_captured_bytes() -> None:
    pytest.importorskip("scapy")
    path = TRACES / "snaplen96-http.pcap"
    (stream,) = reference_streams(path)
    (flow,) = [f for f in _scapy_flows(path).values() if f.proto == "tcp"]
    server = (stream.s2c.flow.src, stream.s2c.flow.sport)
    captured = b"".join(d for who, _, _, _, d in flow.packets if who == server)
    assert stream.s2c.truncated_frames == 2 and stream.s2c.gaps == ()
    assert stream.s2c.data == captured and len(captured) == 60
    assert stream.s2c.wire_bytes > 60  # what the headers say was sent


@needs_traces
@needs_tshark
def test_c2s_is_the_first_packets_direction_even_when_it_is_the_syn_ack() -> None:
    (stream,) = reference_streams(TRACES / "tcp-handshake-reorder.pcap")
    assert stream.c2s.flow.sport == 80 and stream.first_frame == 1
    assert stream.c2s.flow.handshake and stream.c2s.flow.complete
    assert stream.s2c.flow.bytes == 136 and stream.c2s.flow.bytes == 5007


@needs_traces
@needs_tshark
def test_fast_open_syn_data_is_delivered_and_the_handshake_counts() -> None:
    """Stream 1 sends 86 bytes on its SYN; the SYN-ACK acknowledges ISN + 87."""
    _, tfo = reference_streams(TRACES / "tcp-fast-open.pcap")
    assert tfo.c2s.flow.handshake and tfo.c2s.flow.complete
    assert tfo.c2s.flow.bytes == 86 and tfo.c2s.data.startswith(b"GET ")


@needs_traces
@needs_tshark
def test_tshark_follow_node_0_is_the_c2s_side() -> None:
    """On every eligible capture, follow's Node 0/Node 1 are c2s's sender/receiver, except where
    tshark names a tunnel's inner addresses (mpls-over-udp: ports match, addresses do not)."""
    for path in eligible_captures():
        for s in reference_streams(path):
            assert s.node_ports_match, (path.name, s.index, s.nodes)
            if path.name != "mpls-over-udp.pcap":
                assert s.node_addresses_match, (path.name, s.index, s.nodes)


@needs_traces
@needs_tshark
def test_udp_dns_flows_are_datagram_concatenations() -> None:
    pytest.importorskip("scapy")
    from scapy.layers.dns import DNS

    path = TRACES / "mixed-android-mobile.pcap"
    streams = [s for s in reference_streams(path) if s.proto == "udp"]
    dns = [s for s in streams if 53 in (s.c2s.flow.sport, s.c2s.flow.dport)]
    assert len(dns) >= 10
    flows = _scapy_flows(path)
    for s in dns:
        c2s = s.c2s.flow
        flow = flows[("udp", frozenset({(c2s.src, c2s.sport), (c2s.dst, c2s.dport)}))]
        for d in s.directions:
            mine = [p for who, _, _, _, p in flow.packets if who == (d.flow.src, d.flow.sport)]
            assert d.data == b"".join(mine) and d.packets == len(mine)
        # these are one query and its answer: each direction's data is one DNS message
        assert s.c2s.packets == 1 and s.s2c.packets <= 1
        query = DNS(s.c2s.data)
        assert query.qr == 0
        if s.s2c.packets:
            answer = DNS(s.s2c.data)
            assert answer.qr == 1 and answer.id == query.id


@needs_traces
@needs_tshark
def test_udp_bytes_agree_with_udp_lengths() -> None:
    """follow,udp output vs the UDP length fields of the field dump (a cross-check of the two
    tshark runs), except where tshark itself says the lengths are wrong or truncated."""
    for path in eligible_captures():
        for s in reference_streams(path):
            if s.proto != "udp" or s.malformed_frames:
                continue
            for d in s.directions:
                if not d.truncated_frames:
                    assert d.flow.bytes == d.wire_bytes, (path.name, s.index, d.flow.dir)


@needs_traces
@needs_tshark
def test_stream_enumeration_agrees_with_tsharks_conversation_tables() -> None:
    """Same flows as tshark's `-z conv,tcp` / `-z conv,udp` tables (no 4-tuple is reused in
    these captures, so conversations and streams are one to one)."""
    for path in eligible_captures():
        convs = sorted((p, *sorted([a, b])) for p, a, b in conversations(path))
        streams = sorted(
            (
                s.proto,
                *sorted([(s.c2s.flow.src, s.c2s.flow.sport), (s.c2s.flow.dst, s.c2s.flow.dport)]),
            )
            for s in reference_streams(path)
        )
        assert convs == streams, path.name


@needs_traces
@needs_tshark
def test_records_have_the_flows_jsonl_fields() -> None:
    tcp = reference_flows(TRACES / "http-post-upload.pcap")[0].record()
    assert set(tcp) == {
        "layer",
        "proto",
        "src",
        "dst",
        "sport",
        "dport",
        "dir",
        "bytes",
        "sha256",
        "complete",
        "handshake",
    }
    udp = next(f for f in reference_flows(TRACES / "quic-v1-chromium.pcap"))
    assert set(udp.record()) == set(tcp) - {"complete", "handshake"}
    assert udp.layer == udp.proto == "udp"
    empty = [f for f in reference_flows(TRACES / "tcp-options-sack-ts-ws.pcap") if not f.bytes]
    assert empty and empty[0].sha256 == hashlib.sha256(b"").hexdigest()
    v6 = reference_flows(TRACES / "ipv6-http-curl-localhost.pcap")[0]
    assert (v6.src, v6.dst) == ("::1", "::1")
    # tshark prints addresses in the canonical (RFC 5952) text form Python's ipaddress uses
    for path in eligible_captures():
        for f in reference_flows(path):
            for addr in (f.src, f.dst):
                assert str(ipaddress.ip_address(addr)) == addr, (path.name, addr)


def test_follow_parser() -> None:
    """The follow-output parser on hand-written text (no tshark needed)."""
    marker = b"[5 bytes missing in capture file]\x00".hex()
    text = "\n".join(
        [
            "",
            "=" * 67,
            "Follow: tcp,raw",
            "Filter: tcp.stream eq 3",
            "Node 0: [2001:db8::1]:1234",
            "Node 1: [2001:db8::2]:80",
            "6869",
            "\t6f6b",
            marker,
            "21",
            "=" * 67,
        ]
    )
    out: dict[tuple[str, int], _Followed] = {}
    _parse_follow(text, out)
    got = out[("tcp", 3)]
    assert got.nodes == ("[2001:db8::1]:1234", "[2001:db8::2]:80")
    assert (bytes(got.data[0]), bytes(got.data[1])) == (b"hi!", b"ok")
    assert got.gaps == ([Gap(offset=2, missing=5)], [])


def test_flowdir_key_and_record() -> None:
    f = FlowDir("udp", "udp", "10.0.0.1", "10.0.0.2", 5353, 53, "c2s", 0, "00")
    assert f.key == ("udp", "10.0.0.1", 5353, "10.0.0.2", 53)
    assert "complete" not in f.record() and f.record()["dir"] == "c2s"
