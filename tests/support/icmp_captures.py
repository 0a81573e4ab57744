"""A crafted capture of ICMP and ICMPv6 (tests/e2e/test_e2e_icmp.py): a TCP connection and a UDP
exchange over IPv4 and over IPv6, errors of every kind quoting their datagrams (in both
directions: an error may answer the client's or the server's packet), errors quoting nothing
the stack knows, and echo conversations (two identifiers over IPv4, one over IPv6). tshark
dissects it and is the reference; nothing here says what the stack should attach.
"""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    IPv6,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from support.captures import Capture

C4, S4, R4 = "10.1.0.1", "10.2.0.2", "10.9.9.9"  # client, server, a router on the path
C6, S6, R6 = "2001:db8:1::1", "2001:db8:2::2", "2001:db8:9::9"


def _eth(p: Packet) -> Packet:
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p


def write(out: Path) -> Path:
    cap = Capture()
    for v6 in (False, True):
        ip = (lambda s, d: IPv6(src=s, dst=d)) if v6 else (lambda s, d: IP(src=s, dst=d))
        c, s, r = (C6, S6, R6) if v6 else (C4, S4, R4)
        syn = ip(c, s) / TCP(sport=40000, dport=80, flags="S", seq=1000)
        cap.add(_eth(syn))
        synack = ip(s, c) / TCP(sport=80, dport=40000, flags="SA", seq=5000, ack=1001)
        cap.add(_eth(synack))
        cap.add(_eth(ip(c, s) / TCP(sport=40000, dport=80, flags="A", seq=1001, ack=5001)))
        data = (
            ip(c, s) / TCP(sport=40000, dport=80, flags="PA", seq=1001, ack=5001) / Raw(b"x" * 1400)
        )
        cap.add(_eth(data))
        reply = ip(s, c) / TCP(sport=80, dport=40000, flags="PA", seq=5001, ack=2401) / Raw(b"ok")
        cap.add(_eth(reply))
        q = ip(c, s) / UDP(sport=33333, dport=53) / Raw(b"query")
        cap.add(_eth(q))
        a = ip(s, c) / UDP(sport=53, dport=33333) / Raw(b"answer")
        cap.add(_eth(a))
        stray = ip(c, "192.0.2.99" if not v6 else "2001:db8:ee::1") / UDP(sport=1, dport=2)
        if v6:
            errors = [
                (r, c, ICMPv6PacketTooBig(mtu=1280), data),  # PTB for the 1400-byte segment
                (s, c, ICMPv6DestUnreach(code=4), q),  # port unreachable
                (r, s, ICMPv6TimeExceeded(code=0), a),  # the server's answer, on its way back
                (s, c, ICMPv6ParamProblem(code=0, ptr=6), syn),
                (r, c, ICMPv6DestUnreach(code=0), stray),  # no flow of the stack
            ]
            for src, dst, msg, quoted in errors:
                cap.add(_eth(IPv6(src=src, dst=dst) / msg / bytes(quoted)[:1232]))
            for i in range(3):
                cap.add(_eth(IPv6(src=c, dst=s) / ICMPv6EchoRequest(id=0x77, seq=i) / b"ping6"))
                cap.add(_eth(IPv6(src=s, dst=c) / ICMPv6EchoReply(id=0x77, seq=i) / b"ping6"))
        else:
            errors = [
                (r, c, ICMP(type=3, code=4, nexthopmtu=1300), data),  # fragmentation needed
                (s, c, ICMP(type=3, code=3), q),  # port unreachable
                (r, s, ICMP(type=11, code=0), synack),  # the server's SYN-ACK expired
                (r, c, ICMP(type=11, code=1), data),
                (s, c, ICMP(type=12, code=0, ptr=9), q),
                (r, c, ICMP(type=3, code=1), stray),  # no flow of the stack
            ]
            for src, dst, msg, quoted in errors:
                # RFC 792: the IP header and the first 8 bytes of the datagram (what a router
                # quotes)
                qb = bytes(quoted)
                cap.add(_eth(IP(src=src, dst=dst) / msg / Raw(qb[: (qb[0] & 15) * 4 + 8])))
            for ident, n in ((0x1234, 3), (0x4321, 2)):
                for i in range(n):
                    cap.add(_eth(IP(src=c, dst=s) / ICMP(type=8, id=ident, seq=i) / b"ping"))
                    cap.add(_eth(IP(src=s, dst=c) / ICMP(type=0, id=ident, seq=i) / b"ping"))
            cap.add(_eth(IP(src=c, dst=r) / ICMP(type=8, id=0x1234, seq=9)))  # unanswered
    return cap.write(out / "icmp-errors-echo.pcap")
