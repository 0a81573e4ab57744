"""Hand-made captures for the end-to-end edge cases of the tcp_ip stack, with what a correct
stack must deliver.

Each case is a function `CASE(out_dir) -> (pcap path, Expectation)` registered in `CASES`. It
writes one classic pcap (Ethernet, snaplen 262144, microsecond timestamps 1 ms apart from
`T0`) built with scapy from fixed seeds, so the same case always writes the same bytes. The
expectation lists, per flow direction, the bytes the case itself sent (never bytes from a stack
or from tshark), plus what the case defines about `dir`, `complete` and `close`, the live
instances when the capture ends, and extra options for the stack binary.

`tshark` on each expected direction says whether tshark's reassembly (`follow`) delivers the
same bytes; tests/e2e/test_captures.py checks that it does wherever it is claimed, so captures and
expectations are verified before any stack runs. Where tshark differs, `tshark_note` says why.
Two behaviours of tshark (Wireshark 4.0, epan/reassemble.c and packet-tcp.c) that the cases
rely on, found by running it on these captures:

- IPv4/IPv6 fragments: fragments are kept sorted by offset (ties: arrival order) and each
  byte of the datagram comes from the FIRST fragment in that order that covers it, among the
  fragments received until the datagram is complete (later ones are ignored). So a newer
  fragment wins an overlap only if it starts lower; "newest copy wins" (ip.yaml's
  `overwrite: last`) is true only for that shape. The fragment cases' expectations follow
  tshark, and `newest_wins_agrees` marks where ip.yaml's policy gives the same bytes.
- TCP: bytes at or before what follow already delivered keep their first copy; among
  buffered out-of-order segments, the one that starts lowest (ties: first to arrive) wins
  when the hole before them is filled. tcp.yaml keeps the first copy to arrive
  (`overwrite: first`); the shapes where these differ are in their own flow, expected as
  tcp.yaml says, with `tshark=False`.

The end of this module runs rubikgen on a capture for the end-to-end tests
(tests/e2e/test_e2e_edge.py, tests/e2e/test_e2e_tshark.py) and reads what the `streams` NF wrote.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import random
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from support import REPO_ROOT

REPO = REPO_ROOT
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"

T0 = 1_700_000_000  # capture start, seconds
SNAPLEN = 262144  # libpcap cuts records to the file's snaplen: 64 KB segments need more
LINKTYPE_ETHERNET = 1
MAC_C, MAC_S = "02:00:00:00:00:01", "02:00:00:00:00:02"

# ---------------------------------------------------------------------------------------------
# Expectations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowExp:
    """One flow direction a correct stack reports, as the `streams` NF's flows.jsonl has it."""

    layer: str  # "tcp", "udp", "tcp6", "udp6"
    src: str
    dst: str
    sport: int
    dport: int
    dir: str  # "c2s": the direction of the packet that created the flow
    data: bytes = field(repr=False)
    complete: bool | None = None  # TCP: setup seen and the PSM reached accept; None: UDP
    close: str | None = None  # "accept", "evicted", "expired", "flushed"; None: not defined
    tshark: bool = True  # tshark's follow delivers exactly `data` for this direction
    note: str = ""

    @property
    def proto(self) -> str:
        return self.layer.removesuffix("6")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def key(self) -> tuple[str, str, int, str, int]:
        return flow_key(self.proto, self.src, self.sport, self.dst, self.dport)


@dataclass(frozen=True)
class Expectation:
    name: str
    doc: str
    flows: tuple[FlowExp, ...]
    #: The stack reports exactly these flow directions. False: it may report others too (the
    #: garbage and truncation cases), but none that shares both endpoints with an expected one.
    exact: bool = True
    #: Live instances (all layers) when the capture ends, before the final flush; None: any.
    live_at_end: int | None = None
    #: Extra options for the stack binary (after `--`).
    args: tuple[str, ...] = ()
    #: The instance cap passed in args, if any: no more flows may be live at once.
    cap: int | None = None
    tshark_note: str = ""

    def by_key(self) -> dict[tuple[str, str, int, str, int], FlowExp]:
        return {f.key: f for f in self.flows}


def first_difference(a: bytes, b: bytes) -> int:
    """The first offset where a and b differ (the shorter length if one is a prefix)."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on prefix equality: fast on 64 KB streams
    while lo < hi:
        mid = (lo + hi) // 2
        if a[lo : mid + 1] == b[lo : mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def flow_key(
    proto: str, src: str, sport: int, dst: str, dport: int
) -> tuple[str, str, int, str, int]:
    """(proto, src, sport, dst, dport) with addresses in canonical text form."""
    return (
        proto,
        str(ipaddress.ip_address(src)),
        int(sport),
        str(ipaddress.ip_address(dst)),
        int(dport),
    )


def both_ways(
    layer: str,
    client: tuple[str, int],
    server: tuple[str, int],
    c2s: bytes,
    s2c: bytes,
    *,
    complete: bool | None = None,
    close: str | None = None,
    tshark: tuple[bool, bool] = (True, True),
    note: str = "",
) -> tuple[FlowExp, FlowExp]:
    """The two directions of one flow whose creator is `client`."""
    (a, pa), (b, pb) = client, server
    return (
        FlowExp(layer, a, b, pa, pb, "c2s", c2s, complete, close, tshark[0], note),
        FlowExp(layer, b, a, pb, pa, "s2c", s2c, complete, close, tshark[1], note),
    )


# ---------------------------------------------------------------------------------------------
# Writing captures
# ---------------------------------------------------------------------------------------------


class Capture:
    """Frames of one pcap, 1 ms apart. Ethernet frames shorter than 60 bytes are padded with
    zeros, as a NIC pads them (the IP layers must trim by their length fields)."""

    def __init__(self) -> None:
        self.frames: list[tuple[bytes, int]] = []  # (captured bytes, length on the wire)
        self._ip_id = itertools.count(0x1000)

    def ip_id(self) -> int:
        return next(self._ip_id) & 0xFFFF

    def add(self, frame: Packet | bytes, *, cut: int | None = None, pad: bool = True) -> None:
        """Append a frame; `cut` keeps only its first bytes (a snaplen-truncated record)."""
        data = bytes(frame)
        if pad and len(data) < 60:
            data += bytes(60 - len(data))
        wire = len(data)
        if cut is not None:
            data = data[:cut]
        self.frames.append((data, wire))

    def write(self, path: Path) -> Path:
        out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)]
        for i, (data, wire) in enumerate(self.frames):
            usec = i * 1000
            out.append(
                struct.pack("<IIII", T0 + usec // 1_000_000, usec % 1_000_000, len(data), wire)
            )
            out.append(data)
        path.write_bytes(b"".join(out))
        return path


def eth(l3: Packet, *, reverse: bool = False) -> Packet:
    src, dst = (MAC_S, MAC_C) if reverse else (MAC_C, MAC_S)
    return Ether(src=src, dst=dst) / l3


def l4_bytes(l3: Packet) -> bytes:
    """The transport header and payload of an IP/IPv6 packet, with its checksum computed."""
    raw = bytes(l3)
    return raw[40:] if isinstance(l3, IPv6) else raw[l3.ihl * 4 if l3.ihl else 20 :]


def ipv4_fragments(
    src: str, dst: str, ident: int, proto: int, pieces: Sequence[tuple[int, bytes, bool]]
) -> list[Packet]:
    """IPv4 fragments: (byte offset, bytes, more fragments) each."""
    return [
        IP(src=src, dst=dst, id=ident, proto=proto, frag=off // 8, flags="MF" if mf else 0)
        / Raw(chunk)
        for off, chunk, mf in pieces
    ]


def split3(data: bytes) -> list[tuple[int, bytes, bool]]:
    """Three fragments of `data`, offsets multiples of 8."""
    a = (len(data) // 3) // 8 * 8
    b = 2 * a
    return [(0, data[:a], True), (a, data[a:b], True), (b, data[b:], False)]


C, S = "c", "s"


def _other(side: str) -> str:
    return S if side == C else C


class Tcp:
    """One TCP connection: builds its segments and adds them to a capture.

    Data positions are offsets in a side's byte stream (0 = the byte after the SYN). Unless
    given, a segment acknowledges what its sender has received contiguously (and a FIN right
    after it), as a real receiver would; nothing is ever lost on the wire."""

    def __init__(
        self,
        cap: Capture,
        client: tuple[str, int],
        server: tuple[str, int],
        *,
        isn: tuple[int, int] = (1000, 5000),
        opts: bool = False,
    ) -> None:
        self.cap = cap
        self.end = {C: client, S: server}
        self.isn = {C: isn[0], S: isn[1]}
        self.v6 = ":" in client[0]
        self.opts = opts  # timestamps option on every segment (data offset 8)
        self.sent: dict[str, list[tuple[int, int]]] = {C: [], S: []}
        self.fin_at: dict[str, int | None] = {C: None, S: None}
        self.synced = {C: False, S: False}  # this side's SYN was seen by the peer
        self.top = {C: 0, S: 0}  # highest offset sent

    @property
    def layer(self) -> str:
        return "tcp6" if self.v6 else "tcp"

    def received(self, side: str) -> int:
        """What `side` has received contiguously from its peer: sequence space from ISN + 1."""
        peer = _other(side)
        end = 0
        for off, n in sorted(self.sent[peer]):
            if off > end:
                break
            end = max(end, off + n)
        if self.fin_at[peer] is not None and self.fin_at[peer] == end:
            end += 1
        return end

    def ack_for(self, side: str) -> int:
        peer = _other(side)
        if not self.synced[peer]:
            return 0
        return (self.isn[peer] + 1 + self.received(side)) % (1 << 32)

    def packet(
        self,
        side: str,
        flags: str,
        data: bytes = b"",
        *,
        off: int | None = None,
        seq: int | None = None,
        ack: int | None = None,
    ) -> Packet:
        (saddr, sport), (daddr, dport) = self.end[side], self.end[_other(side)]
        if seq is None:
            pos = self.top[side] if off is None else off
            seq = self.isn[side] + ("S" not in flags) + pos
        if ack is None:
            ack = self.ack_for(side) if "A" in flags else 0
        options: list[tuple[str, Any]] = []
        if "S" in flags:
            options = [("MSS", 1460), ("SAckOK", b""), ("WScale", 7), ("NOP", None)]
        if self.opts:
            options += [("NOP", None), ("NOP", None), ("Timestamp", (seq % 10**6, 7))]
        tcp = TCP(
            sport=sport,
            dport=dport,
            seq=seq % (1 << 32),
            ack=ack % (1 << 32),
            flags=flags,
            window=8192,
            options=options,
        )
        l3: Packet
        if self.v6:
            l3 = IPv6(src=saddr, dst=daddr, hlim=64)
        else:
            l3 = IP(src=saddr, dst=daddr, id=self.cap.ip_id(), ttl=64)
        pkt = l3 / tcp
        if data:
            pkt = pkt / Raw(data)
        return pkt

    def send(
        self,
        side: str,
        data: bytes = b"",
        *,
        flags: str = "PA",
        off: int | None = None,
        ack: int | None = None,
        cut: int | None = None,
    ) -> None:
        """One segment at `off` (default: after the highest byte sent so far)."""
        pos = self.top[side] if off is None else off
        self.cap.add(
            eth(self.packet(side, flags, data, off=pos, ack=ack), reverse=side == S), cut=cut
        )
        self.note(side, flags, pos, data)

    def note(self, side: str, flags: str, pos: int, data: bytes) -> None:
        if data:
            self.sent[side].append((pos, len(data)))
        if "F" in flags:
            self.fin_at[side] = pos + len(data)
        self.top[side] = max(self.top[side], pos + len(data))

    def add_l3(self, side: str, l3: Packet) -> None:
        self.cap.add(eth(l3, reverse=side == S))

    def handshake(self) -> None:
        self.send(C, flags="S", off=0)
        self.synced[C] = True
        self.send(S, flags="SA", off=0)
        self.synced[S] = True
        self.send(C, flags="A")

    def stream(self, side: str, data: bytes, size: int = 500) -> None:
        """`data` in order, in segments of `size`, each acknowledged by the peer."""
        for i in range(0, len(data), size):
            self.send(side, data[i : i + size])
            self.send(_other(side), flags="A")

    def close(self, first: str = C) -> None:
        """FIN, FIN-ACK, ACK."""
        self.send(first, flags="FA")
        self.send(_other(first), flags="FA")
        self.send(first, flags="A")


class Rng(random.Random):
    def data(self, n: int) -> bytes:
        return self.randbytes(n)


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------

Case = Callable[[Path], tuple[Path, Expectation]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


CLIENT4, SERVER4 = "10.0.0.1", "10.0.0.2"
CLIENT6, SERVER6 = "2001:db8::1", "2001:db8::2"
TPORT, UPORT = 40080, 40053  # server ports no tshark dissector claims (random data would be
# "malformed" DNS or HTTP to it)
ORDERS = list(itertools.permutations(range(3)))  # the six arrival orders of three fragments


@case
def ipv4_frag_udp(out: Path) -> tuple[Path, Expectation]:
    """Six UDP datagrams of 3000 bytes, each in three IPv4 fragments arriving in one of the six
    orders, each answered by an unfragmented datagram."""
    rng, cap, flows = Rng(101), Capture(), []
    for k, order in enumerate(ORDERS):
        client, server = (CLIENT4, 40000 + k), (SERVER4, UPORT)
        request, reply = rng.data(3000), rng.data(40 + k)
        l4 = l4_bytes(IP(src=CLIENT4, dst=SERVER4) / UDP(sport=client[1], dport=UPORT) / request)
        frags = ipv4_fragments(CLIENT4, SERVER4, 0x2000 + k, 17, split3(l4))
        for i in order:
            cap.add(eth(frags[i]))
        cap.add(
            eth(
                IP(src=SERVER4, dst=CLIENT4, id=cap.ip_id())
                / UDP(sport=UPORT, dport=client[1])
                / reply,
                reverse=True,
            )
        )
        flows += both_ways("udp", client, server, request, reply, close="flushed")
    return cap.write(out / "ipv4-frag-udp.pcap"), Expectation(
        "ipv4_frag_udp", ipv4_frag_udp.__doc__ or "", tuple(flows), live_at_end=6
    )


@case
def ipv4_frag_tcp(out: Path) -> tuple[Path, Expectation]:
    """Six TCP connections whose 2400-byte request travels as one segment in three IPv4
    fragments, arriving in one of the six orders; unfragmented reply, FIN close."""
    rng, cap, flows = Rng(102), Capture(), []
    for k, order in enumerate(ORDERS):
        client, server = (CLIENT4, 41000 + k), (SERVER4, TPORT)
        request, reply = rng.data(2400), rng.data(700)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        seg = t.packet(C, "PA", request, off=0)
        frags = ipv4_fragments(CLIENT4, SERVER4, seg.id, 6, split3(l4_bytes(seg)))
        for i in order:
            t.add_l3(C, frags[i])
        t.note(C, "PA", 0, request)
        t.send(S, reply)
        t.send(C, flags="A")
        t.close()
        flows += both_ways("tcp", client, server, request, reply, complete=True, close="accept")
    return cap.write(out / "ipv4-frag-tcp.pcap"), Expectation(
        "ipv4_frag_tcp", ipv4_frag_tcp.__doc__ or "", tuple(flows), live_at_end=0
    )


def tshark_defrag(pieces: Sequence[tuple[int, bytes]], size: int) -> bytes:
    """tshark's reassembly of fragments that all arrive before the datagram completes: each
    byte from the first fragment covering it in (offset, arrival) order."""
    buf: dict[int, int] = {}
    for _, (off, chunk) in sorted(enumerate(pieces), key=lambda p: (p[1][0], p[0])):
        for i, b in enumerate(chunk):
            buf.setdefault(off + i, b)
    return bytes(buf[i] for i in range(size))


def newest_defrag(pieces: Sequence[tuple[int, bytes]], size: int) -> bytes:
    """ip.yaml's `overwrite: last`: the newest copy of each byte."""
    buf: dict[int, int] = {}
    for off, chunk in pieces:
        for i, b in enumerate(chunk):
            buf[off + i] = b
    return bytes(buf[i] for i in range(size))


@case
def ipv4_frag_overlap(out: Path) -> tuple[Path, Expectation]:
    """Overlapping IPv4 fragments with different content, one shape per flow (UDP datagrams
    of 8 + 56 bytes, and one TCP segment); the datagram completes with its last arrival.
    ip.yaml keeps the newest copy of each byte (`overwrite: last`); where tshark's rule (the
    lowest-offset fragment wins) gives other bytes, the direction is marked as a documented
    disagreement and test_captures checks that tshark really differs."""
    rng, cap, flows = Rng(103), Capture(), []
    # (name, fragments as (start, end, copy)): copy 0 is the true datagram, 1 and 2 other bytes
    shapes: list[tuple[str, list[tuple[int, int, int]]]] = [
        ("newer starts lower", [(16, 40, 1), (0, 24, 0), (40, 64, 0)]),
        ("newer starts higher", [(0, 24, 0), (16, 40, 1), (40, 64, 0)]),
        ("same offset, same length", [(0, 16, 0), (16, 32, 0), (16, 32, 1), (32, 64, 0)]),
        ("newer contains older", [(24, 32, 1), (16, 48, 0), (0, 16, 0), (48, 64, 0)]),
        ("older contains newer", [(16, 48, 0), (24, 32, 1), (0, 16, 0), (48, 64, 0)]),
        ("same start, newer shorter", [(16, 48, 0), (16, 24, 1), (0, 16, 0), (48, 64, 0)]),
        ("three copies", [(8, 40, 1), (32, 56, 2), (0, 16, 0), (16, 48, 0), (56, 64, 0)]),
    ]
    tshark_only = []
    for k, (name, parts) in enumerate(shapes):
        client, server = (CLIENT4, 42000 + k), (SERVER4, UPORT)
        payload = rng.data(56)
        true = l4_bytes(IP(src=CLIENT4, dst=SERVER4) / UDP(sport=client[1], dport=UPORT) / payload)
        copies = [true, true[:8] + rng.data(56), true[:8] + rng.data(56)]
        pieces = [(a, copies[c][a:b]) for a, b, c in parts]
        end = max(b for _, b, _ in parts)
        frags = ipv4_fragments(
            CLIENT4, SERVER4, 0x3000 + k, 17, [(a, ch, a + len(ch) < end) for a, ch in pieces]
        )
        for f in frags:
            cap.add(eth(f))
        got = newest_defrag(pieces, end)
        agrees = got == tshark_defrag(pieces, end)
        if not agrees:
            tshark_only.append(name)
        note = f"{name}; tshark's lowest-offset-wins {'agrees' if agrees else 'differs'}"
        flows += both_ways(
            "udp",
            client,
            server,
            got[8:],
            b"",
            close="flushed",
            tshark=(agrees, True),
            note=note,
        )
    # A TCP segment (20-byte header + 200 bytes) whose middle fragment is overlapped by a newer
    # one starting higher, inside it: tshark keeps the older bytes.
    client, server = (CLIENT4, 42100), (SERVER4, TPORT)
    t = Tcp(cap, client, server, isn=(0x1234_5678, 0x8765_4321))
    t.handshake()
    request = rng.data(200)
    seg = t.packet(C, "PA", request, off=0)
    l4 = l4_bytes(seg)
    pieces = [(0, l4[:80]), (80, l4[80:160]), (96, rng.data(40)), (160, l4[160:])]
    frags = ipv4_fragments(CLIENT4, SERVER4, seg.id, 6, [(a, ch, a != 160) for a, ch in pieces])
    for f in frags:
        t.add_l3(C, f)
    t.note(C, "PA", 0, request)
    t.send(S, b"ok")
    t.close()
    newest = newest_defrag(pieces, len(l4))
    assert tshark_defrag(pieces, len(l4)) == l4 != newest
    flows += both_ways(
        "tcp",
        client,
        server,
        newest[20:],
        b"ok",
        complete=True,
        close="accept",
        tshark=(False, True),
        note="newer middle fragment starts higher: tshark keeps the older bytes",
    )
    return cap.write(out / "ipv4-frag-overlap.pcap"), Expectation(
        "ipv4_frag_overlap",
        ipv4_frag_overlap.__doc__ or "",
        tuple(flows),
        live_at_end=len(shapes),
        tshark_note=(
            "expected bytes follow ip.yaml's `overwrite: last` (the newest copy wins); tshark"
            " keeps, per byte, the fragment with the lowest offset (ties: first arrival), so it"
            " differs for: " + ", ".join(tshark_only + ["the TCP segment"])
        ),
    )


@case
def ipv6_frag(out: Path) -> tuple[Path, Expectation]:
    """IPv6 fragment headers: a UDP datagram in three fragments (order 2, 0, 1) behind a
    hop-by-hop header, answered unfragmented; a TCP connection whose request segment is in
    three fragments (order 1, 2, 0) behind destination-options and routing headers."""
    rng, cap = Rng(104), Capture()
    client, server = (CLIENT6, 43000), (SERVER6, UPORT)
    request, reply = rng.data(3000), rng.data(64)
    l4 = l4_bytes(IPv6(src=CLIENT6, dst=SERVER6) / UDP(sport=43000, dport=UPORT) / request)
    for i in (2, 0, 1):
        off, chunk, mf = split3(l4)[i]
        frag = IPv6ExtHdrFragment(nh=17, offset=off // 8, m=int(mf), id=0xABCD0001)
        cap.add(eth(IPv6(src=CLIENT6, dst=SERVER6) / IPv6ExtHdrHopByHop() / frag / Raw(chunk)))
    cap.add(
        eth(IPv6(src=SERVER6, dst=CLIENT6) / UDP(sport=UPORT, dport=43000) / reply, reverse=True)
    )
    flows = list(both_ways("udp6", client, server, request, reply, close="flushed"))

    client, server = (CLIENT6, 43001), (SERVER6, TPORT)
    t = Tcp(cap, client, server, isn=(77777, 88888))
    t.handshake()
    data = rng.data(4000)
    seg = t.packet(C, "PA", data, off=0)
    l4 = l4_bytes(seg)
    for i in (1, 2, 0):
        off, chunk, mf = split3(l4)[i]
        frag = IPv6ExtHdrFragment(nh=6, offset=off // 8, m=int(mf), id=0xABCD0002)
        ext = IPv6ExtHdrDestOpt() / IPv6ExtHdrRouting(addresses=[])
        t.add_l3(C, IPv6(src=CLIENT6, dst=SERVER6) / ext / frag / Raw(chunk))
    t.note(C, "PA", 0, data)
    answer = rng.data(1000)
    t.stream(S, answer)
    t.close(S)
    flows += both_ways("tcp6", client, server, data, answer, complete=True, close="accept")
    return cap.write(out / "ipv6-frag.pcap"), Expectation(
        "ipv6_frag", ipv6_frag.__doc__ or "", tuple(flows), live_at_end=1
    )


@case
def tcp_holes(out: Path) -> tuple[Path, Expectation]:
    """Eight client segments in a shuffled order (several holes, filled out of order) and six
    shuffled server segments, no ACK past a hole until it is filled; timestamps options."""
    rng, cap = Rng(105), Capture()
    client, server = (CLIENT4, 44000), (SERVER4, TPORT)
    t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)), opts=True)
    t.handshake()
    flows: list[FlowExp] = []
    sent = {}
    for side, n in ((C, 8), (S, 6)):
        sizes = [rng.randint(100, 1400) for _ in range(n)]
        data = rng.data(sum(sizes))
        sent[side] = data
        starts = list(itertools.accumulate([0, *sizes[:-1]]))
        order = list(range(n))
        while order[0] == 0 or order == sorted(order):
            rng.shuffle(order)
        for i in order:
            t.send(side, data[starts[i] : starts[i] + sizes[i]], off=starts[i])
        t.send(_other(side), flags="A")
    t.close()
    flows += both_ways("tcp", client, server, sent[C], sent[S], complete=True, close="accept")
    return cap.write(out / "tcp-holes.pcap"), Expectation(
        "tcp_holes", tcp_holes.__doc__ or "", tuple(flows), live_at_end=0
    )


def first_copy(segments: Iterable[tuple[int, bytes]]) -> bytes:
    """tcp.yaml's `overwrite: first`: the first copy of each byte, contiguous from 0."""
    have: dict[int, int] = {}
    for off, chunk in segments:
        for i, b in enumerate(chunk):
            have.setdefault(off + i, b)
    out = bytearray()
    while len(out) in have:
        out.append(have[len(out)])
    return bytes(out)


@case
def tcp_overlap(out: Path) -> tuple[Path, Expectation]:
    """Retransmissions that overlap with different content; the first copy of each byte wins
    (tcp.yaml `overwrite: first`). Flow 1: shapes tshark agrees on (retransmission of delivered
    bytes, a partial overlap past the delivered end, buffered segments overlapped by later ones
    starting at or above them). Flow 2: later segments that start below a buffered one and
    overlap it, where tshark keeps the lower-starting (later) copy instead."""
    rng, cap, flows = Rng(106), Capture(), []
    d = rng.data(1200)

    def alt(a: int, b: int) -> bytes:  # other bytes for [a, b)
        return bytes(x ^ 0x5A for x in d[a:b])

    plans: list[tuple[str, list[tuple[int, bytes]], bool]] = [
        (
            "agreeing shapes",
            [
                (0, d[0:100]),
                (0, alt(0, 100)),  # exact retransmission of delivered bytes
                (50, alt(50, 150)),  # half old (ignored), half new (delivered)
                (150, d[150:300]),
                (400, d[400:500]),  # buffered after a hole
                (400, alt(400, 500)),  # same range again: the first stays
                (450, alt(450, 600)),  # starts inside the buffered one: overlap stays first
                (300, d[300:400]),  # fills the hole
                (600, d[600:700]),
                (650, alt(650, 800)),  # partial overlap past the delivered end
                (800, d[800:1200]),
            ],
            True,
        ),
        (
            "later copy starts lower",
            [
                (0, d[0:100]),
                (300, d[300:400]),  # buffered
                (250, alt(250, 450)),  # covers it from below: tcp.yaml keeps d[300:400]
                (600, d[600:700]),  # buffered
                (550, alt(550, 650)),  # overlaps its start from below
                (100, d[100:250]),  # fills the first hole
                (450, d[450:550]),  # fills the second
                (700, d[700:900]),
            ],
            False,
        ),
    ]
    for k, (name, segs, agrees) in enumerate(plans):
        client, server = (CLIENT4, 45000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        for off, chunk in segs:
            t.send(C, chunk, off=off)
        t.send(S, flags="A")
        t.send(S, b"fine")
        t.close()
        expected = first_copy(segs)
        assert len(expected) == max(o + len(c) for o, c in segs)
        note = name if agrees else f"{name}: tshark keeps the lower-starting later copy"
        flows += both_ways(
            "tcp",
            client,
            server,
            expected,
            b"fine",
            complete=True,
            close="accept",
            tshark=(agrees, True),
            note=note,
        )
    return cap.write(out / "tcp-overlap.pcap"), Expectation(
        "tcp_overlap",
        tcp_overlap.__doc__ or "",
        tuple(flows),
        live_at_end=0,
        tshark_note=(
            "flow 2 (port 45001) c2s: tshark's follow delivers the buffered segment that starts"
            " lowest (ties: first arrival), tcp.yaml the first copy to arrive"
        ),
    )


@case
def tcp_seq_wrap(out: Path) -> tuple[Path, Expectation]:
    """Both ISNs just below 2^32: sequence and acknowledgment numbers wrap mid-stream, with a
    reordered pair of segments straddling the wrap in each direction."""
    rng, cap = Rng(107), Capture()
    client, server = (CLIENT4, 46000), (SERVER4, TPORT)
    t = Tcp(cap, client, server, isn=((1 << 32) - 700, (1 << 32) - 2))
    t.handshake()
    up, down = rng.data(3000), rng.data(2000)
    # client bytes 0..698 are below 2^32, 699.. above; segments [600,900) and [900,1200) swap
    for a, b in [(0, 300), (300, 600), (900, 1200), (600, 900), (1200, 3000)]:
        t.send(C, up[a:b], off=a)
    t.send(S, flags="A")
    # server byte 0 is at 2^32 - 1, byte 1 at 0
    for a, b in [(0, 1), (500, 1000), (1, 500), (1000, 2000)]:
        t.send(S, down[a:b], off=a)
    t.send(C, flags="A")
    t.close(S)
    flows = both_ways("tcp", client, server, up, down, complete=True, close="accept")
    return cap.write(out / "tcp-seq-wrap.pcap"), Expectation(
        "tcp_seq_wrap", tcp_seq_wrap.__doc__ or "", flows, live_at_end=0
    )


@case
def large_segments(out: Path) -> tuple[Path, Expectation]:
    """The largest single segments: IPv4 TCP with 65495 bytes (total length 65535) and 65000
    bytes back; IPv6 TCP with 65515 bytes (payload length 65535, no jumbogram); a 65507-byte
    UDP datagram over IPv4. Frames up to 65589 bytes (snaplen 262144)."""
    rng, cap, flows = Rng(108), Capture(), []
    for k, (c, s, up_n, down_n) in enumerate(
        [(CLIENT4, SERVER4, 65495, 65000), (CLIENT6, SERVER6, 65515, 3000)]
    ):
        client, server = (c, 47000 + k), (s, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        up, down = rng.data(up_n), rng.data(down_n)
        t.send(C, up)
        t.send(S, down)
        t.send(C, flags="A")
        t.close()
        flows += both_ways(t.layer, client, server, up, down, complete=True, close="accept")
    dgram = rng.data(65507)
    cap.add(
        eth(IP(src=CLIENT4, dst=SERVER4, id=cap.ip_id()) / UDP(sport=47100, dport=UPORT) / dgram)
    )
    flows += both_ways("udp", (CLIENT4, 47100), (SERVER4, UPORT), dgram, b"", close="flushed")
    assert max(len(f) for f, _ in cap.frames) == 14 + 40 + 65535
    return cap.write(out / "large-segments.pcap"), Expectation(
        "large_segments", large_segments.__doc__ or "", tuple(flows), live_at_end=1
    )


@case
def tcp_rst(out: Path) -> tuple[Path, Expectation]:
    """RST mid-stream: data both ways, then the server resets (flow 1, RST without ACK) or the
    client does (flow 2, RST/ACK). Everything before the RST is delivered; the flow closes."""
    rng, cap, flows = Rng(109), Capture(), []
    for k, who in enumerate((S, C)):
        client, server = (CLIENT4, 48000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        a, b, c = rng.data(700), rng.data(1500), rng.data(300)
        t.stream(C, a)
        t.stream(S, b)
        t.send(C, c)
        t.send(who, flags="R" if who == S else "RA")
        flows += both_ways("tcp", client, server, a + c, b, complete=True, close="accept")
    return cap.write(out / "tcp-rst.pcap"), Expectation(
        "tcp_rst", tcp_rst.__doc__ or "", tuple(flows), live_at_end=0
    )


@case
def tcp_close(out: Path) -> tuple[Path, Expectation]:
    """Closes: FIN / FIN-ACK / ACK (flow 1); FIN, ACK, FIN, ACK with data from the second side
    after the first FIN (flow 2); simultaneous close, both FINs crossing, then both ACKs
    (flow 3); FIN carrying the last data, server closes first (flow 4)."""
    rng, cap, flows = Rng(110), Capture(), []
    for k in range(4):
        client, server = (CLIENT4, 49000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        up, down = rng.data(800), rng.data(1200)
        t.stream(C, up)
        t.stream(S, down[:1000])
        if k == 0:
            t.send(S, down[1000:])
            t.send(C, flags="A")
            t.close(C)
        elif k == 1:
            t.send(C, flags="FA")
            t.send(S, flags="A")
            t.send(S, down[1000:])  # half-closed: the server still sends
            t.send(C, flags="A")
            t.send(S, flags="FA")
            t.send(C, flags="A")
        elif k == 2:
            t.send(S, down[1000:])
            t.send(C, flags="A")
            fin_c = t.packet(C, "FA")
            fin_s = t.packet(S, "FA")  # neither has seen the other's FIN
            t.add_l3(C, fin_c)
            t.add_l3(S, fin_s)
            t.note(C, "FA", t.top[C], b"")
            t.note(S, "FA", t.top[S], b"")
            t.send(C, flags="A")
            t.send(S, flags="A")
        else:
            t.send(S, down[1000:], flags="FPA")
            t.send(C, flags="FA")
            t.send(S, flags="A")
        flows += both_ways("tcp", client, server, up, down, complete=True, close="accept")
    return cap.write(out / "tcp-close.pcap"), Expectation(
        "tcp_close", tcp_close.__doc__ or "", tuple(flows), live_at_end=0
    )


@case
def tcp_fin_overtakes(out: Path) -> tuple[Path, Expectation]:
    """A FIN captured before the last data segment: a bare FIN (flow 1) and a FIN carrying data
    (flow 2) overtake the segment before them; nothing may be lost and the flow must still
    close once the segment arrives."""
    rng, cap, flows = Rng(111), Capture(), []
    for k in range(2):
        client, server = (CLIENT4, 50000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        up, down = rng.data(1500), rng.data(400)
        t.send(C, up[:1000])
        if k == 0:
            t.send(C, flags="FA", off=1500)
        else:
            t.send(C, up[1300:], flags="FPA", off=1300)
        t.send(C, up[1000 : 1500 if k == 0 else 1300], off=1000)
        t.send(S, down, flags="FPA")  # acknowledges the client's FIN
        t.send(C, flags="A")
        flows += both_ways("tcp", client, server, up, down, complete=True, close="accept")
    return cap.write(out / "tcp-fin-overtakes.pcap"), Expectation(
        "tcp_fin_overtakes", tcp_fin_overtakes.__doc__ or "", tuple(flows), live_at_end=0
    )


@case
def tcp_midstream(out: Path) -> tuple[Path, Expectation]:
    """Flows picked up mid-stream (no SYN): flow 1 starts with client data, flow 2 with server
    data (so its c2s is the server's direction). tcp.yaml tracks them from their first data
    packet and delivers it; `complete` is false and they are live when the capture ends."""
    rng, cap, flows = Rng(112), Capture(), []
    for k, first in enumerate((C, S)):
        client, server = (CLIENT4, 51000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.synced = {C: True, S: True}
        t.top = {C: 5000, S: 9000}  # already well into the connection
        t.sent = {C: [(0, 5000)], S: [(0, 9000)]}
        second = _other(first)
        a, b, c = rng.data(900), rng.data(1400), rng.data(200)
        t.stream(first, a, 300)
        t.stream(second, b, 700)
        t.send(first, c)
        t.send(second, flags="A")
        creator, peer = t.end[first], t.end[second]
        flows += both_ways("tcp", creator, peer, a + c, b, complete=False, close="flushed")
    return cap.write(out / "tcp-midstream.pcap"), Expectation(
        "tcp_midstream", tcp_midstream.__doc__ or "", tuple(flows), live_at_end=2
    )


N_FLOWS, CAP = 300, 100


@case
def many_flows(out: Path) -> tuple[Path, Expectation]:
    """300 TCP connections opened one after the other and never closed, run with an instance
    cap of 100: each new connection evicts the least recently used one. Every connection
    delivers its request and reply before it is evicted; connections 1-200 close `evicted`,
    the last 100 are live at the end (`flushed`)."""
    rng, cap, flows = Rng(113), Capture(), []
    for k in range(N_FLOWS):
        client, server = (f"10.1.{k // 200}.{k % 200 + 1}", 52000 + k), (SERVER4, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        t.handshake()
        up, down = b"request %d\n" % k, rng.data(rng.randint(1, 300))
        t.send(C, up)
        t.send(S, down)
        t.send(C, flags="A")
        close = "evicted" if k < N_FLOWS - CAP else "flushed"
        flows += both_ways("tcp", client, server, up, down, complete=False, close=close)
    return cap.write(out / "many-flows.pcap"), Expectation(
        "many_flows",
        many_flows.__doc__ or "",
        tuple(flows),
        live_at_end=CAP,
        args=("--cap", str(CAP)),
        cap=CAP,
        tshark_note="tshark has no instance cap: it follows all 300 streams to the end",
    )


@case
def udp_both_ways(out: Path) -> tuple[Path, Expectation]:
    """UDP datagrams both ways: IPv4 (tiny datagrams in zero-padded 60-byte frames, an empty
    datagram, a 4-byte Ethernet trailer after one) and IPv6 (one with a trailer)."""
    rng, cap, flows = Rng(114), Capture(), []
    for k, (c, s) in enumerate([(CLIENT4, SERVER4), (CLIENT6, SERVER6)]):
        client, server = (c, 53000 + k), (s, UPORT)
        ip = (
            (lambda a, b: IPv6(src=a, dst=b))
            if k
            else (lambda a, b: IP(src=a, dst=b, id=cap.ip_id()))
        )
        sent: dict[str, bytes] = {C: b"", S: b""}
        for i, side in enumerate([C, S, C, C, S, C, S, S, C]):
            size = [1, 3, 0, 200, 1200, 17, 4, 999, 60][i]
            payload = rng.data(size)
            (sa, sp), (da, dp) = (client, server) if side == C else (server, client)
            frame = bytes(
                eth(ip(sa, da) / UDP(sport=sp, dport=dp) / Raw(payload), reverse=side == S)
            )
            if i in (3, 7):
                frame += b"\xde\xad\xbe\xef"  # a trailer (FCS-like) the length fields exclude
            cap.add(frame)
            sent[side] += payload
        layer = "udp6" if k else "udp"
        flows += both_ways(layer, client, server, sent[C], sent[S], close="flushed")
    return cap.write(out / "udp-both-ways.pcap"), Expectation(
        "udp_both_ways", udp_both_ways.__doc__ or "", tuple(flows), live_at_end=2
    )


def _valid_flows(
    cap: Capture, rng: Rng, port: int
) -> tuple[list[Callable[[], None]], list[FlowExp]]:
    """Three well-formed flows (TCP over IPv4 and IPv6 with handshake, data and FIN close; UDP
    both ways), as a list of steps to interleave with other frames, and their expectations."""
    steps: list[Callable[[], None]] = []
    flows: list[FlowExp] = []
    for k, (c, s) in enumerate([(CLIENT4, SERVER4), (CLIENT6, SERVER6)]):
        client, server = (c, port + k), (s, TPORT)
        t = Tcp(cap, client, server, isn=(rng.getrandbits(32), rng.getrandbits(32)))
        up, down = rng.data(1800), rng.data(2500)
        steps.append(t.handshake)
        for i in range(0, 1800, 600):
            steps.append(lambda t=t, i=i, up=up: t.send(C, up[i : i + 600]))
        for i in range(0, 2500, 500):
            steps.append(lambda t=t, i=i, down=down: t.send(S, down[i : i + 500]))
        steps.append(lambda t=t: t.send(C, flags="A"))
        steps.append(t.close)
        flows += both_ways(t.layer, client, server, up, down, complete=True, close="accept")
    client, server = (CLIENT4, port + 2), (SERVER4, UPORT)
    sent = {C: b"", S: b""}
    for i in range(6):
        side = C if i % 2 == 0 else S
        payload = rng.data(50 + 100 * i)
        sent[side] += payload
        (sa, sp), (da, dp) = (client, server) if side == C else (server, client)
        pkt = eth(
            IP(src=sa, dst=da, id=0x7000 + i) / UDP(sport=sp, dport=dp) / payload, reverse=side == S
        )
        steps.append(lambda pkt=pkt: cap.add(pkt))
    flows += both_ways("udp", client, server, sent[C], sent[S], close="flushed")
    return steps, flows


def _interleave(rng: Rng, steps: list[Callable[[], None]], noise: list[Callable[[], None]]) -> None:
    """Run the valid steps in order, with the noise frames spread randomly between them."""
    slots: list[list[Callable[[], None]]] = [[] for _ in range(len(steps) + 1)]
    for n in noise:
        slots[rng.randrange(len(slots))].append(n)
    for i, step in enumerate(steps):
        for n in slots[i]:
            n()
        step()
    for n in slots[-1]:
        n()


GARBAGE4 = ("192.0.2.1", "198.51.100.1")  # garbage packets use these, never the valid ones
GARBAGE6 = ("2001:db8:bad::1", "2001:db8:bad::2")


def _patched(pkt: Packet, at: int, value: int) -> bytes:
    raw = bytearray(bytes(pkt))
    raw[at] = value
    return bytes(raw)


@case
def garbage(out: Path) -> tuple[Path, Expectation]:
    """Garbage between three valid flows: random bytes as Ethernet frames, random bytes after
    valid Ethernet+IPv4/IPv6 headers, bogus IHL (0-4, 15) and TCP data offsets (0-4, 15),
    IPv4 total length below the header, UDP length below 8 and past the packet, TCP options
    of length 0/1/past the header, IPv6 extension chains too long or with lengths past the
    packet, fragments reaching past 65535 bytes, conflicting last fragments, runt frames. The
    stack must not crash, and must deliver the valid flows exactly."""
    rng, cap = Rng(115), Capture()
    steps, flows = _valid_flows(cap, rng, 54000)
    g4, g6 = GARBAGE4, GARBAGE6
    noise: list[bytes | Packet] = []
    for _ in range(30):  # random Ethernet frames
        noise.append(rng.data(rng.randint(14, 300)))
    for _ in range(20):  # random bytes behind valid headers
        proto = rng.choice([6, 17, 44, 0, 43, 60])
        body = rng.data(rng.randint(0, 200))
        if proto in (6, 17):
            noise.append(eth(IP(src=g4[0], dst=g4[1], proto=proto, id=cap.ip_id()) / Raw(body)))
        noise.append(eth(IPv6(src=g6[0], dst=g6[1], nh=proto) / Raw(body)))
    tcp4 = IP(src=g4[0], dst=g4[1], id=0x6666) / TCP(sport=1, dport=2, flags="S") / Raw(b"x" * 40)
    for ihl in (0, 1, 2, 3, 4, 15):
        noise.append(_patched(eth(tcp4), 14, 0x40 | ihl))
    for doff in (0, 1, 2, 3, 4, 15):
        noise.append(_patched(eth(tcp4), 14 + 20 + 12, doff << 4))
    noise.append(
        eth(IP(src=g4[0], dst=g4[1], len=10) / TCP(sport=3, dport=4, flags="S") / Raw(b"y" * 30))
    )
    noise.append(eth(IP(src=g4[0], dst=g4[1], len=0) / UDP(sport=3, dport=4) / Raw(b"y" * 30)))
    for ulen in (0, 1, 7, 8, 9, 500, 65535):
        noise.append(
            eth(IP(src=g4[0], dst=g4[1]) / UDP(sport=5, dport=6, len=ulen) / Raw(b"z" * 20))
        )
        noise.append(
            eth(IPv6(src=g6[0], dst=g6[1]) / UDP(sport=5, dport=6, len=ulen) / Raw(b"z" * 20))
        )
    for opt in (
        b"\x63\x00",
        b"\x63\x01",
        b"\x05\x01",
        b"\x08\x02",
        b"\x02\xff",
        b"\x22\x00",
        b"\x03",
    ):
        raw_opts = (opt + b"\x01" * 12)[:12]
        seg = TCP(sport=7, dport=8, flags="S", dataofs=8, options=[]) / Raw(b"o" * 10)
        l4 = bytearray(bytes(IP(src=g4[0], dst=g4[1]) / seg)[20:])
        l4[20:20] = raw_opts  # options inserted verbatim (scapy would rewrite them)
        l4 = l4[: 32 + 10]
        noise.append(eth(IP(src=g4[0], dst=g4[1], proto=6) / Raw(bytes(l4))))
    # 40 option bytes (data offset 15), cut at several lengths: 40 NOPs (the loop's max), an
    # option reaching past the header, an unknown kind, SACK and TFO lengths, EOL then junk
    for opts in (
        b"\x01" * 40,
        b"\x01" * 38 + b"\x08\x0a",
        b"\x02\x04\x05\xb4" + b"\x63\x30" + b"\x01" * 34,
        b"\x05\x0a" + b"s" * 8 + b"\x22\x06cook" + b"\x04\x02" + b"\x03\x03\x07" + b"\x00" * 19,
        b"\x00\x05\xff" + b"\x01" * 37,
        b"\x08\x0a" + b"t" * 8 + b"\x1e\x28" + b"m" * 30,
    ):
        for cut in (8, 21, 40, 50):
            seg = TCP(sport=9, dport=10, flags="S", dataofs=15, options=[]) / Raw(b"q" * 10)
            l4 = bytearray(bytes(IP(src=g4[0], dst=g4[1]) / seg)[20:])
            l4[20:20] = opts
            l4 = l4[: 20 + cut]
            noise.append(eth(IP(src=g4[0], dst=g4[1], proto=6) / Raw(bytes(l4))))
    body = IPv6ExtHdrHopByHop(len=255) / Raw(b"h" * 16)  # claims 2048 bytes
    noise.append(eth(IPv6(src=g6[0], dst=g6[1]) / body))
    chain: Packet = IPv6ExtHdrDestOpt()
    for _ in range(12):  # longer than ipv6.yaml's max of 8
        chain = chain / IPv6ExtHdrDestOpt()
    noise.append(eth(IPv6(src=g6[0], dst=g6[1]) / chain / UDP(sport=9, dport=10) / Raw(b"c" * 8)))
    noise.append(eth(IPv6(src=g6[0], dst=g6[1], nh=44) / Raw(b"\x2c\x00\x00\x01" + b"f" * 4)))
    # fragments: past 65535 bytes, zero-length, conflicting ends, IPv6 past 65535
    for off, size, mf in [(65528, 100, False), (0, 64, True), (65520, 8, True), (8, 0, True)]:
        noise.append(
            eth(
                IP(
                    src=g4[0],
                    dst=g4[1],
                    id=0x5151,
                    proto=17,
                    frag=off // 8,
                    flags="MF" if mf else 0,
                )
                / Raw(b"p" * size)
            )
        )
    for off, size in [(64, 16), (96, 16)]:  # two different "last" fragments
        noise.append(
            eth(IP(src=g4[0], dst=g4[1], id=0x5252, proto=17, frag=off // 8) / Raw(b"q" * size))
        )
    noise.append(
        eth(
            IP(src=g4[0], dst=g4[1], id=0x5252, proto=17, frag=0, flags="MF")
            / UDP(sport=11, dport=12, len=120)
            / Raw(b"q" * 56)
        )
    )
    for off, size, mf in [(65528, 100, 0), (0, 64, 1)]:
        frag = IPv6ExtHdrFragment(nh=17, offset=off // 8, m=mf, id=0x5353)
        noise.append(eth(IPv6(src=g6[0], dst=g6[1]) / frag / Raw(b"r" * size)))
    for n in (0, 1, 6, 13):  # runt frames, not padded
        noise.append(rng.data(n))
    _interleave(rng, steps, [lambda f=f: cap.add(f, pad=False) for f in noise])
    return cap.write(out / "garbage.pcap"), Expectation(
        "garbage",
        garbage.__doc__ or "",
        tuple(flows),
        exact=False,
        tshark_note="tshark agrees on the valid flows; it reports streams for some garbage too",
    )


@case
def truncated(out: Path) -> tuple[Path, Expectation]:
    """Snaplen-cut records (captured length below the wire length) between three valid flows:
    cut inside the Ethernet, IPv4, IPv6, IPv6 extension, fragment, TCP (fixed part and
    options) and UDP headers, exactly at header ends, and inside payloads, on other flows;
    and truncated copies of the valid flows' own segments (a cut retransmission of delivered
    data, a segment cut inside its TCP header), which must change nothing. The stack must
    not crash and must deliver the valid flows exactly."""
    rng, cap = Rng(116), Capture()
    steps, flows = _valid_flows(cap, rng, 55000)
    g4, g6 = GARBAGE4, GARBAGE6
    cuts: list[tuple[Packet, int]] = []
    seg4 = eth(
        IP(src=g4[0], dst=g4[1], id=0x4444)
        / TCP(sport=20, dport=21, flags="PA", options=[("Timestamp", (1, 2))])
        / Raw(b"t" * 300)
    )
    for cut in (5, 13, 14, 15, 24, 33, 34, 35, 44, 53, 54, 60, 66, 100):
        cuts.append((seg4, cut))
    udp4 = eth(IP(src=g4[0], dst=g4[1], id=0x4445) / UDP(sport=22, dport=23) / Raw(b"u" * 300))
    for cut in (36, 41, 42, 43, 100):
        cuts.append((udp4, cut))
    seg6 = eth(
        IPv6(src=g6[0], dst=g6[1])
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / TCP(sport=24, dport=25, flags="S")
        / Raw(b"v" * 300)
    )
    for cut in (20, 53, 54, 57, 62, 70, 78, 90, 98, 200):
        cuts.append((seg6, cut))
    frag4 = eth(IP(src=g4[0], dst=g4[1], id=0x4446, proto=17, flags="MF") / Raw(b"w" * 400))
    last4 = eth(IP(src=g4[0], dst=g4[1], id=0x4446, proto=17, frag=50) / Raw(b"w" * 100))
    cuts += [(frag4, 100), (last4, 60)]  # a cut fragment: the datagram has a hole
    frag6 = eth(
        IPv6(src=g6[0], dst=g6[1]) / IPv6ExtHdrFragment(nh=17, m=1, id=0x4447) / Raw(b"x" * 400)
    )
    cuts += [(frag6, 58), (frag6, 61), (frag6, 200)]
    noise: list[Callable[[], None]] = [lambda p=p, c=c: cap.add(p, cut=c) for p, c in cuts]
    # A separate flow whose data segment is cut: tshark appends the captured 40 bytes; what a
    # stack delivers after it depends on its policy, so this flow is not checked.
    side = Tcp(cap, (CLIENT4, 55100), (SERVER4, TPORT), isn=(3000, 4000))
    steps.insert(1, side.handshake)
    steps.insert(2, lambda: side.send(C, rng.data(400), cut=14 + 20 + 20 + 40))
    steps.insert(3, lambda: side.send(C, rng.data(100)))
    steps.insert(4, lambda: side.send(S, flags="A"))
    _interleave(rng, steps, noise)
    # Truncated copies of the valid IPv4 TCP flow's own packets, after its first data segment.
    frames = cap.frames
    first = next(
        i
        for i, (f, _) in enumerate(frames)
        if len(f) > 200 and f[23] == 6 and f[34:36] == b"\xd6\xd8"
    )  # the first data segment from port 55000
    data, wire = frames[first]
    frames.insert(first + 1, (data[: 14 + 20 + 20 + 100], wire))  # a cut retransmission
    frames.insert(first + 2, (data[: 14 + 20 + 10], wire))  # cut inside its TCP header
    return cap.write(out / "truncated.pcap"), Expectation(
        "truncated",
        truncated.__doc__ or "",
        tuple(flows),
        exact=False,
        tshark_note=(
            "tshark agrees on the valid flows; it also appends the 40 captured bytes of the cut"
            " segment of the unchecked flow port 55100"
        ),
    )


def build(name: str, out: Path) -> tuple[Path, Expectation]:
    out.mkdir(parents=True, exist_ok=True)
    return CASES[name](out)


# ---------------------------------------------------------------------------------------------
# Running rubikgen on a capture (shared by the end-to-end tests)
# ---------------------------------------------------------------------------------------------


def rubikgen_command() -> tuple[str, ...]:
    """rubikgen from this checkout, as CI calls it."""
    return (sys.executable, "-m", "rubikgen")


@dataclass
class Run:
    """One `rubikgen run` of the tcp_ip stack with the `streams` NF."""

    pcap: Path
    out: Path
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def summary(self) -> dict[str, Any]:
        """The JSON object `--summary json` printed (the last line of stdout that is one)."""
        text = self.stdout.strip()
        try:
            obj = json.loads(text)
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    return obj
        raise AssertionError(f"no JSON summary in the output of {' '.join(self.argv)}:\n{text}")

    def records(self) -> list[dict[str, Any]]:
        """flows.jsonl of the TCP/UDP layers, in file order."""
        path = self.out / "flows.jsonl"
        out = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            assert isinstance(rec, dict), f"{path}:{n}: not an object"
            if rec.get("proto") in ("tcp", "udp"):
                out.append(rec)
        return out

    def directions(self) -> list[tuple[tuple[str, str, int, str, int], dict[str, Any]]]:
        """flows.jsonl's TCP/UDP records with the `flow_key` of their direction. The sender of
        an s2c record is taken to be the receiver of its flow's c2s record, so that a record
        whose addresses are not mirrored (a check of its own in test_e2e_edge) still pairs
        with the right expected direction."""
        records = self.records()
        c2s = {r.get("uid"): r for r in records if r.get("dir") == "c2s"}
        out = []
        for rec in records:
            first = c2s.get(rec.get("uid"), rec)
            a, pa, b, pb = first["src"], first["sport"], first["dst"], first["dport"]
            if rec.get("dir") == "s2c":
                a, pa, b, pb = b, pb, a, pa
            out.append((flow_key(rec["proto"], a, pa, b, pb), rec))
        return out

    def data(self, rec: dict[str, Any]) -> bytes:
        """The bytes a flows.jsonl record points to (b"" when `file` is null)."""
        if rec.get("file") is None:
            return b""
        return (self.out / rec["file"]).read_bytes()

    def describe(self) -> str:
        tail = "\n".join(self.stderr.strip().splitlines()[-30:])
        return f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stderr (tail) ---\n{tail}"


def run_stack(
    pcap: Path,
    out: Path,
    *,
    sanitize: bool = False,
    args: Sequence[str] = (),
    timeout: float = 900,
    stack: Path = STACK,
) -> Run:
    """`rubikgen run specs/stacks/tcp_ip.yaml PCAP --nf streams --out OUT --summary json`
    (another stack with `stack`)."""
    cmd = rubikgen_command()
    argv = [*cmd, "run", str(stack.relative_to(REPO)), str(pcap), "--nf", "streams"]
    argv += ["--out", str(out), "--summary", "json"]
    if sanitize:
        argv.append("--sanitize")
    if args:
        argv += ["--", *args]
    start = time.monotonic()
    proc = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(pcap, out, argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


#: What sanitizers print when they find something (ASan, LSan, UBSan).
SANITIZER_REPORT = (
    "AddressSanitizer",
    "LeakSanitizer",
    "UndefinedBehaviorSanitizer",
    "runtime error:",
    "SUMMARY: ",
)


def live_at_end(summary: dict[str, Any]) -> int:
    """The summary's live instances at the end of the capture, over all layers (the value may
    be one number or one per layer)."""
    value = summary["live_at_end"]
    if isinstance(value, dict):
        return sum(int(v) for v in value.values())
    return int(value)
