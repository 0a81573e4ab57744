"""Shared by tests; moved from e2e/test_rules.py."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from support.oracle.tshark import _tshark

RULES = """\
spec: {stack}
rules:
  - name: google-syn
    match: "ip.header.daddr == 216.239.38.120 && tcp.dport == 443 && tcp.syn"
    action: count
  - {{name: dns, match: "udp.dport == 53 || udp.sport == 53", action: count}}
  - {{name: lan-http, match: "ip.saddr == 192.168.0.0/16 && tcp.dport == 80", action: count}}
  - {{name: google-any, match: "ip.daddr == 216.239.38.120 && tcp.dport == 443", action: pass}}
  - {{name: sp-a, match: "tcp.sport >= 33000 && tcp.sport < 34000", action: count}}
  - {{name: sp-b, match: "tcp.sport >= 40000 && tcp.sport <= 50000 && ip.ttl > 60", action: count}}
  - {{name: sp-c, match: "tcp.sport > 50000", action: count}}
  - {{name: sp-d, match: "1000 <= tcp.sport && tcp.sport <= 2000", action: count}}
  - {{name: sp-e, match: "tcp.sport >= 30000 && tcp.sport <= 60000", action: count}}
  - {{name: hiports, match: "tcp.sport >= 32768 && tcp.dport >= 1024 && tcp.dport <= 65535",
      action: count}}
  - {{name: socks-c2s, match: "tcp.sport == 1637 && tcp.dport == 21477", action: count}}
  - {{name: socks-late, match: "tcp.dport == 21477 && ip.ttl == 126 && tcp.sport == 1637",
      action: count}}
  - {{name: net10-frag, match: "ip.saddr == 10.0.0.0/8 && !tcp", action: count}}
  - {{name: lowttl, match: "ip.ttl < 64", action: count}}
  - {{name: v6, match: "ipv6", action: count}}
"""


PREDICATES: list[tuple[str, Callable[[Frame], bool]]] = [
    ("google-syn", lambda f: _tcp(f) and f["ip.dst"] == "216.239.38.120"
        and _num(f, "tcp.dstport") == 443 and f["tcp.flags.syn"] in ("1", "True")),
    ("dns", lambda f: _udp(f) and 53 in (_num(f, "udp.dstport"), _num(f, "udp.srcport"))),
    ("lan-http", lambda f: _tcp(f) and _in_net(f["ip.src"], "192.168.0.0", 16)
        and _num(f, "tcp.dstport") == 80),
    ("google-any", lambda f: _tcp(f) and f["ip.dst"] == "216.239.38.120"
        and _num(f, "tcp.dstport") == 443),
    # a range group (rules_c.py): a binary search over the sport boundaries
    ("sp-a", lambda f: _tcp(f) and 33000 <= (_num(f, "tcp.srcport") or 0) < 34000),
    ("sp-b", lambda f: _tcp(f) and 40000 <= (_num(f, "tcp.srcport") or 0) <= 50000
        and (_num(f, "ip.ttl") or 0) > 60),
    ("sp-c", lambda f: _tcp(f) and (_num(f, "tcp.srcport") or 0) > 50000),
    ("sp-d", lambda f: _tcp(f) and 1000 <= (_num(f, "tcp.srcport") or 0) <= 2000),
    ("sp-e", lambda f: _tcp(f) and 30000 <= (_num(f, "tcp.srcport") or 0) <= 60000),
    ("hiports", lambda f: _tcp(f) and (_num(f, "tcp.srcport") or 0) >= 32768
        and (_num(f, "tcp.dstport") or 0) >= 1024),
    ("socks-c2s", lambda f: _tcp(f) and _num(f, "tcp.srcport") == 1637
        and _num(f, "tcp.dstport") == 21477),
    ("socks-late", lambda f: False),  # socks-c2s takes all its packets first
    ("net10-frag", lambda f: _ip4(f) and _in_net(f["ip.src"], "10.0.0.0", 8) and not _tcp(f)),
    ("lowttl", lambda f: _ip4(f) and (_num(f, "ip.ttl") or 255) < 64),
    ("v6", lambda f: "ipv6" in f["protos"]),
]  # fmt: skip


CAPTURES = ["mixed-android-mobile.pcap", "ipv4-frag-socks5-http.pcap", "http-post-upload.pcap"]


def tshark_frames(pcap: Path) -> list[Frame]:
    args = ["-r", str(pcap), "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for k in FIELDS:
        args += ["-e", k]
    out = []
    for line in _tshark(args).splitlines():
        vals = line.split("\t")
        f = dict(zip(FIELDS, vals + [""] * (len(FIELDS) - len(vals)), strict=True))
        f["protos"] = f["frame.protocols"].split(":")  # type: ignore[assignment]
        out.append(f)
    return out


def expected_rule(f: Frame) -> str | None:
    return next((name for name, p in PREDICATES if p(f)), None)


def run_json(binary: Path, pcap: Path, *extra: str) -> dict[str, object]:
    proc = subprocess.run(
        [str(binary), str(pcap), "--nf", "count", "--summary", "json", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


DROPS = """\
rules:
  - {{name: google-https, match: "ip.daddr == 216.239.38.120 && tcp.dport == 443", action: drop}}
  - {{name: dns-query, match: "udp.dport == 53", action: drop}}
  - {{name: upload-replies, match: "tcp.sport == 8080", action: drop}}
  - {{name: v6, match: "ipv6", action: drop-flow}}
  - {{name: keep, match: "true", action: pass}}
  - {{name: syn-flows, stateful: true, action: drop,
      match: "tcp.syn && !tcp.ack && ip.daddr == 172.217.21.202"}}
"""


# The same drops in tshark's own filter language (tcp/udp: over IPv4, as the stack's layers)
DROP_FILTER = (
    "(ip.dst == 216.239.38.120 && tcp.dstport == 443) || (udp.dstport == 53 && !ipv6)"
    " || (tcp.srcport == 8080 && !ipv6) || ipv6"
)


DROP_CAPTURES = ["mixed-android-mobile.pcap", "http-post-upload.pcap"]


def tshark_numbers(pcap: Path, flt: str) -> set[int]:
    out = _tshark(["-r", str(pcap), "-Y", flt, "-T", "fields", "-e", "frame.number"])
    return {int(x) for x in out.split()}


def pcap_frames(path: Path) -> list[tuple[int, bytes]]:
    from support.pcap_frames import frames

    return frames(path)


def _voip_capture(path: Path) -> None:
    """Telnet, a web connection on port 80, SIP and RTP, DNS and HTTPS, built with scapy."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    def tcp(src: str, dst: str, sp: int, dp: int, flags: str, load: bytes = b"") -> object:
        return Ether() / IP(src=src, dst=dst, ttl=64) / TCP(sport=sp, dport=dp, flags=flags,
                                                            seq=1000, ack=1) / load  # fmt: skip

    c, t, w, v = "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"
    pkts = [
        tcp(c, t, 40000, 23, "S"), tcp(t, c, 23, 40000, "SA"), tcp(c, t, 40000, 23, "PA", b"ls\r\n"),
        tcp(c, w, 40001, 80, "S"), tcp(w, c, 80, 40001, "SA"), tcp(c, w, 40001, 80, "A"),
        tcp(c, w, 40001, 80, "PA", b"GET / HTTP/1.1\r\n\r\n"),
        tcp(w, c, 80, 40001, "PA", b"HTTP/1.1 200 OK\r\n\r\n"),
        Ether() / IP(src=c, dst=v) / UDP(sport=5060, dport=5060) / b"INVITE sip:a@b SIP/2.0\r\n",
        Ether() / IP(src=v, dst=c) / UDP(sport=5060, dport=5060) / b"SIP/2.0 200 OK\r\n",
        Ether() / IP(src=c, dst=v, tos=0x02) / UDP(sport=20000, dport=20002) / (b"\x80" + bytes(171)),
        Ether() / IP(src=v, dst=c) / UDP(sport=20002, dport=20000) / (b"\x80" + bytes(171)),
        Ether() / IP(src=c, dst="10.0.0.53") / UDP(sport=33333, dport=53) / bytes(20),
        tcp(c, w, 40002, 443, "S"),
    ]  # fmt: skip
    wrpcap(str(path), pkts)


# First match wins; each rule's predicate over tshark's fields, written independently of the
# compiler (Frame: first value of each field; `l4` only for TCP/UDP over IPv4, as the stack's
# tcp and udp layers are).
Frame = dict[str, str]


def _ip4(f: Frame) -> bool:
    return "ip" in f["protos"] and "ipv6" not in f["protos"]


def _num(f: Frame, k: str) -> int | None:
    v = f.get(k, "")
    return int(v, 0) if v else None


def _tcp(f: Frame) -> bool:
    return _ip4(f) and "tcp" in f["protos"]


def _udp(f: Frame) -> bool:
    return _ip4(f) and "udp" in f["protos"]


def _in_net(addr: str, net: str, bits: int) -> bool:
    def v(a: str) -> int:
        return int.from_bytes(bytes(int(x) for x in a.split(".")), "big")

    mask = ((1 << bits) - 1) << (32 - bits)
    return bool(addr) and (v(addr) & mask) == v(net)


FIELDS = ["frame.number", "frame.protocols", "ip.src", "ip.dst", "ip.ttl", "tcp.srcport",
          "tcp.dstport", "tcp.flags.syn", "udp.srcport", "udp.dstport"]  # fmt: skip
