"""Shared by tests; moved from e2e/test_e2e_nfs.py."""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from support.captures import flow_key
from support.oracle.tshark import _tshark

#: (capture, frame) -> why the stack's packet/bytes for that frame's conversation may differ.
EXCLUDED_FRAMES: dict[tuple[str, int], str] = {
    ("udp-bad-length-truncated.pcap", 1): (
        "IPv4 total length 65028 and UDP length 65008 exceed the 1516 bytes present: tshark"
        " counts the UDP length, the stack the bytes it has (bytes only; the packet counts)"
    ),
}


@dataclass
class Pkt:
    """The (first) TCP or UDP header of a frame as tshark dissects it."""

    frame: int
    ts: int
    proto: str
    src: tuple[str, int]
    dst: tuple[str, int]
    l4: int  # TCP/UDP length per the headers (header + payload)
    cut: int  # of those, bytes the capture cut off
    flags: int = 0
    payload: int = 0
    udp_payload: bytes = b""


def reference(pcap: Path) -> Reference:
    args = ["-r", str(pcap), "-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE"]
    args += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for name in _FIELDS:
        args += ["-e", name]
    args += ["-z", "conv,tcp", "-z", "conv,udp"]
    lines = _tshark(args).splitlines()
    cut = next((n for n, line in enumerate(lines) if line.startswith("=")), len(lines))
    ref = Reference([], {})
    # flow records are dated by their own packets' capture times (docs/reliability.md)
    for line in lines[:cut]:
        row = dict(zip(_FIELDS, line.split("\t"), strict=True))
        protos = row["frame.protocols"].split(":")
        l4 = next((p for p in protos if p in ("tcp", "udp")), None)
        if l4 is None:
            continue
        if "icmp" in protos[: protos.index(l4)] or "icmpv6" in protos[: protos.index(l4)]:
            ref.skipped_in_error += 1  # a quoted header inside an ICMP error
            continue
        net = "ipv6" if protos[protos.index(l4) - 1].startswith("ipv6") else "ip"
        src = _first(row[f"{net}.src"])
        dst = _first(row[f"{net}.dst"])
        sport, dport = int(_first(row[f"{l4}.srcport"])), int(_first(row[f"{l4}.dstport"]))
        _, src, sport, dst, dport = flow_key(l4, src, sport, dst, dport)
        p = Pkt(
            frame=int(row["frame.number"]),
            ts=_epoch_ns(row["frame.time_epoch"]),
            proto=l4,
            src=(src, sport),
            dst=(dst, dport),
            l4=0,
            cut=0,
        )
        if l4 == "tcp":
            p.flags = int(_first(row["tcp.flags"]), 16)
            p.payload = int(_first(row["tcp.len"]))
            p.l4 = int(_first(row["tcp.hdr_len"])) + p.payload
        else:
            p.l4 = int(_first(row["udp.length"]))
            p.payload = p.l4 - 8
            p.udp_payload = bytes.fromhex(_first(row["udp.payload"]).replace(":", ""))
        # frame.len may exceed what the headers claim (offloaded captures): only a capture that
        # ends inside the TCP/UDP bytes cuts them
        caplen = int(row["frame.cap_len"])
        if caplen < int(row["frame.len"]) and "ip.fragment" not in row["frame.protocols"]:
            p.cut = max(0, p.l4 - (caplen - _l4_offset(protos, row, l4)))
        ref.pkts.append(p)
    proto = None
    for line in lines[cut:]:
        if line.strip() in ("TCP Conversations", "UDP Conversations"):
            proto = line.split()[0].lower()
        elif proto and "<->" in line:
            # A:port <-> B:port  framesB->A bytes  framesA->B bytes  total ... ("<-" first)
            left, _, right = line.partition("<->")
            a = _node(left.strip())
            cols = right.split()
            b = _node(cols[0])
            conv = Conv(
                {b: int(cols[1]), a: int(cols[4])},
                {b: " ".join(cols[2:4]), a: " ".join(cols[5:7])},
            )
            ref.convs[(proto, frozenset([a, b]))] = conv
    return ref


_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "frame.len",
    "frame.cap_len",
    "frame.protocols",
    "ip.hdr_len",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags",
    "tcp.hdr_len",
    "tcp.len",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.payload",
)


def _epoch_ns(text: str) -> int:
    if not text:
        return 0  # no time (a pcapng Simple Packet Block)
    sec, _, frac = text.partition(".")
    return int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])


def _first(v: str) -> str:
    return v.split(",")[0]


def _l4_offset(protos: list[str], row: dict[str, str], l4: str) -> int:
    """Where the TCP/UDP header starts in a frame: link header, VLAN tags, IP header (IPv6:
    only without extension headers, which no snaplen-cut capture here has)."""
    off = _LINK[protos[0]] + 4 * protos[: protos.index(l4)].count("vlan")
    net = protos[protos.index(l4) - 1]
    if net == "ip":
        return off + int(_first(row["ip.hdr_len"]))
    assert net == "ipv6", f"cut frame with {protos}: offset unknown"
    return off + 40


@dataclass
class Conv:
    frames: dict[tuple[str, int], int]  # frames sent by each endpoint
    printed: dict[tuple[str, int], str]  # bytes sent, as printed


@dataclass
class Reference:
    pkts: list[Pkt]
    convs: dict[tuple[str, frozenset], Conv]
    skipped_in_error: int = 0  # headers quoted in ICMP errors: not packets of a conversation


def _node(text: str) -> tuple[str, int]:
    addr, _, port = text.rpartition(":")
    return (str(flow_key("tcp", addr.strip("[]"), 0, addr.strip("[]"), 0)[1]), int(port))


#: Link header lengths by the first token of frame.protocols (each "vlan" adds 4).
_LINK = {"eth": 14, "sll": 16, "null": 4, "raw": 0}


Node = tuple[str, int]


def _conv_node(text: str) -> Node:
    addr, _, port = text.rpartition(":")
    return addr.strip("[]"), int(port)


def tshark_frames(pcap: Path) -> Counter[tuple[str, Node, Node]]:
    """Frames per (proto, sender, receiver) from tshark's conversation tables."""
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-q", "-z", "conv,tcp", "-z", "conv,udp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got: Counter[tuple[str, Node, Node]] = Counter()
    proto = ""
    for line in out.splitlines():
        if line.endswith(" Conversations"):
            proto = line.split()[0].lower()
        t = line.split()
        if len(t) > 8 and t[1] == "<->":
            a, b = _conv_node(t[0]), _conv_node(t[2])
            got[proto, b, a] += int(t[3])  # "<-": B to A
            got[proto, a, b] += int(t[6])  # "->": A to B
    return +got
