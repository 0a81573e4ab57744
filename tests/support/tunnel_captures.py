"""Crafted captures for the encapsulations no real capture in ../shared/traces carries:
Geneve (with an option, Ethernet and IPv4 payloads), GRE (IPv4, IPv6, transparent Ethernet
bridging), IP in IP (4in4, 6in6), an MPLS label stack over Ethernet, PPPoE with IPv6 under
802.1ad QinQ, VXLAN over IPv6, Teredo with authentication and origin indications, AYIYA
carrying IPv6 and IPv4, GRE inside GRE inside GRE (IPv4 and IPv6 delivery headers) and PPP in
GRE. Each carries one TCP connection (handshake, data both ways
in several segments, FIN both ways) and one UDP exchange inside the tunnel; tshark dissects them
and is the reference (tests/e2e/test_e2e_tunnels.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE
from scapy.packet import Packet, Raw

from support.captures import Capture

Wrap = Callable[[Packet, bool], Packet]  # inner IP packet, sent by the server? -> frame

C4, S4 = "10.1.0.1", "10.2.0.2"
C6, S6 = "2001:db8:1::1", "2001:db8:2::2"
O4 = ("192.0.2.1", "192.0.2.2")  # outer tunnel endpoints
O6 = ("2001:db8:ff::1", "2001:db8:ff::2")


def _inner(v6: bool) -> list[tuple[Packet, bool]]:
    """One TCP connection and one UDP exchange, as (inner IP packet, from the server)."""
    ip = (lambda s, d: IPv6(src=s, dst=d)) if v6 else (lambda s, d: IP(src=s, dst=d))
    c, s = (C6, S6) if v6 else (C4, S4)
    req = bytes(range(256)) * 2 + b"request-end"
    resp = b"response:" + bytes(range(255, -1, -1)) * 3
    cs, ss = 1000, 5000
    pk: list[tuple[Packet, bool]] = []

    def tcp(server: bool, flags: str, seq: int, ack: int, data: bytes = b"") -> None:
        src, dst = (s, c) if server else (c, s)
        sp, dp = (80, 40000) if server else (40000, 80)
        p = ip(src, dst) / TCP(sport=sp, dport=dp, flags=flags, seq=seq, ack=ack)
        pk.append((p / Raw(data) if data else p, server))

    tcp(False, "S", cs, 0)
    tcp(True, "SA", ss, cs + 1)
    tcp(False, "A", cs + 1, ss + 1)
    tcp(False, "PA", cs + 1, ss + 1, req[:300])
    tcp(False, "PA", cs + 301, ss + 1, req[300:])
    tcp(True, "PA", ss + 1, cs + 1 + len(req), resp[:400])
    tcp(True, "PA", ss + 401, cs + 1 + len(req), resp[400:])
    tcp(False, "FA", cs + 1 + len(req), ss + 1 + len(resp))
    tcp(True, "FA", ss + 1 + len(resp), cs + 2 + len(req))
    tcp(False, "A", cs + 2 + len(req), ss + 2 + len(resp))
    for server, data in ((False, b"ping over udp"), (True, b"pong over udp, longer")):
        src, dst = (s, c) if server else (c, s)
        sp, dp = (53, 33333) if server else (33333, 53)
        pk.append((ip(src, dst) / UDP(sport=sp, dport=dp) / Raw(data), server))
    return pk


def _outer4(server: bool, proto: int) -> IP:
    a, b = O4[::-1] if server else O4
    return IP(src=a, dst=b, proto=proto)


def _outer6(server: bool, nh: int) -> IPv6:
    a, b = O6[::-1] if server else O6
    return IPv6(src=a, dst=b, nh=nh)


def _udp(server: bool, port: int) -> UDP:
    return UDP(sport=50001 if not server else 50002, dport=port)


def _eth(p: Packet, ethertype: int | None = None) -> Packet:
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if ethertype is not None:
        e.type = ethertype
    return e / p


def _inner_eth(p: Packet) -> bytes:
    return bytes(Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:02") / p)


def _geneve(proto: int, payload: bytes) -> bytes:
    # version 0, 2 words of options, protocol, VNI 0x1234; one option: class 0x0102, type
    # 0x80 (critical bit), 1 word of data
    opt = struct.pack("!HBB", 0x0102, 0x80, 1) + b"\x0a\x0b\x0c\x0d"
    return struct.pack("!BBHI", 2, 0, proto, 0x1234 << 8) + opt + payload


def _mpls(label: int, bos: int) -> bytes:
    return struct.pack("!I", label << 12 | bos << 8 | 64)


def _teredo(server: bool, payload: bytes) -> bytes:
    """RFC 4380 5.1.1: the client authenticates (id and value of 4 bytes), the server's packets
    carry both indications (authentication first, then the origin: port 40000, 192.0.2.77, each
    bit inverted)."""
    auth = struct.pack("!HBB", 1, 4, 4) + b"cid1" + b"auth" + bytes(range(8)) + b"\x00"
    origin = struct.pack("!HHI", 0, 40000 ^ 0xFFFF, 0xC000024D ^ 0xFFFFFFFF)
    return auth + (origin if server else b"") + payload


def _ayiya(payload: bytes, next_header: int) -> bytes:
    # identity of 2^4 = 16 bytes (ASCII), a SHA-1 signature of 5 words, shared secret, forward
    hdr = struct.pack("!BBBBI", 4 << 4 | 2, 5 << 4 | 2, 1 << 4 | 1, next_header, 1700000000)
    return hdr + b"sixxs-tunnel-id!" + bytes(range(20)) + payload


def _gre_in_gre(p: Packet, server: bool) -> Packet:
    """Three GRE levels: outer IPv4, then an IPv6 and an IPv4 delivery header inside."""
    inner = GRE(proto=0x0800) / p
    mid4 = IP(src="198.51.100.1", dst="198.51.100.2", proto=47) / inner
    mid6 = IPv6(src="2001:db8:aa::1", dst="2001:db8:aa::2", nh=47) / GRE(proto=0x0800) / mid4
    return _eth(_outer4(server, 47) / GRE(proto=0x86DD) / mid6)


WRAPS: dict[str, tuple[bool, Wrap]] = {
    # name: (inner is IPv6, wrap)
    "geneve-eth": (
        False,
        lambda p, s: _eth(_outer4(s, 17) / _udp(s, 6081) / Raw(_geneve(0x6558, _inner_eth(p)))),
    ),
    "geneve-ip": (
        False,
        lambda p, s: _eth(_outer4(s, 17) / _udp(s, 6081) / Raw(_geneve(0x0800, bytes(p)))),
    ),
    "gre-teb": (
        False,
        lambda p, s: _eth(_outer4(s, 47) / GRE(proto=0x6558) / Raw(_inner_eth(p))),
    ),
    "gre-ip": (False, lambda p, s: _eth(_outer4(s, 47) / GRE(proto=0x0800) / p)),
    "gre6-ipv6": (True, lambda p, s: _eth(_outer6(s, 47) / GRE(proto=0x86DD) / p)),
    "gre-ppp": (
        False,
        lambda p, s: _eth(_outer4(s, 47) / GRE(proto=0x880B) / PPP(proto=0x0021) / p),
    ),
    "gre-in-gre": (False, _gre_in_gre),
    "teredo-auth-origin": (
        True,
        lambda p, s: _eth(_outer4(s, 17) / _udp(s, 3544) / Raw(_teredo(s, bytes(p)))),
    ),
    "ayiya-ipv6": (
        True,
        lambda p, s: _eth(_outer4(s, 17) / _udp(s, 5072) / Raw(_ayiya(bytes(p), 41))),
    ),
    "ayiya-ipv4-over-ipv6": (
        False,
        lambda p, s: _eth(_outer6(s, 17) / _udp(s, 5072) / Raw(_ayiya(bytes(p), 4))),
    ),
    "ipip-4in4": (False, lambda p, s: _eth(_outer4(s, 4) / p)),
    "ipip-6in6": (True, lambda p, s: _eth(_outer6(s, 41) / p)),
    "mpls-stack": (
        False,
        lambda p, s: _eth(Raw(_mpls(100, 0) + _mpls(200, 1) + bytes(p)), 0x8847),
    ),
    "qinq-pppoe-ipv6": (
        True,
        lambda p, s: _eth(
            Dot1Q(vlan=10, type=0x8100)
            / Dot1Q(vlan=20, type=0x8864)
            / PPPoE(sessionid=0x42, len=len(bytes(p)) + 2)
            / PPP(proto=0x0057)
            / p,
            0x88A8,
        ),
    ),
    "vxlan-over-ipv6": (
        False,
        lambda p, s: _eth(
            _outer6(s, 17)
            / _udp(s, 4789)
            / Raw(b"\x08\x00\x00\x00\x00\x12\x34\x00" + _inner_eth(p))
        ),
    ),
}


def _gtpu(payload: bytes, seq: bool) -> bytes:
    """A G-PDU (3GPP TS 29.281 5.1): version 1, PT 1, with or without a sequence number."""
    if seq:
        return struct.pack("!BBHIHBB", 0x32, 255, len(payload) + 4, 0x1A2B3C4D, 7, 0, 0) + payload
    return struct.pack("!BBHI", 0x30, 255, len(payload), 0x1A2B3C4D) + payload


#: GTP-U user planes for the gtp stack (tests/e2e/test_e2e_gtp_pptp.py): inner TCP and UDP, IPv4
#: and IPv6, over an IPv4 or an IPv6 transport
GTP_WRAPS: dict[str, tuple[bool, Wrap]] = {
    "gtp-u-inner-v4": (
        False,
        lambda p, s: _eth(
            _outer4(s, 17) / UDP(sport=2152, dport=2152) / Raw(_gtpu(bytes(p), False))
        ),
    ),
    "gtp-u-inner-v6": (
        True,
        lambda p, s: _eth(
            _outer4(s, 17) / UDP(sport=2152, dport=2152) / Raw(_gtpu(bytes(p), True))
        ),
    ),
    "gtp-u-v6-inner-v6": (
        True,
        lambda p, s: _eth(
            _outer6(s, 17) / UDP(sport=2152, dport=2152) / Raw(_gtpu(bytes(p), False))
        ),
    ),
}


def write(name: str, out: Path) -> Path:
    v6, wrap = WRAPS[name] if name in WRAPS else GTP_WRAPS[name]
    cap = Capture()
    for p, server in _inner(v6):
        cap.add(wrap(p, server))
    return cap.write(out / f"{name}.pcap")
