"""Reject replies judged by tshark (tests/e2e/test_rules_reject.py): which frames a rules file
rejects and how many replies each must get, computed from tshark's dissection of the input,
and the checks of each reply against RFC 9293 3.10.7.1 / RFC 5961 (RSTs) and RFC 792 / 4443
(ICMP quotes), with tshark's checksum verification."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from support.oracle.tshark import _tshark

FIELDS = [
    "frame.number", "frame.protocols", "eth.src", "eth.dst", "ip.src", "ip.dst", "ip.hdr_len",
    "ip.len", "ip.flags.mf", "ip.frag_offset", "ip.checksum.status", "ipv6.src", "ipv6.dst",
    "ipv6.plen", "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.len",
    "tcp.flags", "tcp.checksum.status", "udp.srcport", "udp.dstport", "icmp.type", "icmp.code",
    "icmp.checksum.status", "icmpv6.type", "icmpv6.code", "icmpv6.checksum.status", "sll.pkttype",
]  # fmt: skip
PREFS = ["-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
         "-o", "udp.check_checksum:TRUE", "-o", "tcp.relative_sequence_numbers:FALSE"]  # fmt: skip

Frame = dict[str, str]


def frames(pcap: object) -> list[Frame]:
    """tshark's first value of each field, per frame (checksums verified)."""
    args = ["-r", str(pcap), *PREFS, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for k in FIELDS:
        args += ["-e", k]
    out = []
    for line in _tshark(args).splitlines():
        vals = line.split("\t")
        out.append(dict(zip(FIELDS, vals + [""] * (len(FIELDS) - len(vals)), strict=True)))
    return out


def protos(f: Frame) -> list[str]:
    return f["frame.protocols"].split(":")


def num(f: Frame, k: str) -> int:
    v = f[k]
    return int(v, 0) if v else -1


def l4(f: Frame) -> str | None:
    """tcp, udp, tcp6, udp6: the stack's layer the frame reaches (ICMP quotes excluded)."""
    p = protos(f)
    if "icmp" in p or "icmpv6" in p:
        return None
    v6 = "ipv6" in p
    for x in ("tcp", "udp"):
        if x in p:
            return x + ("6" if v6 else "")
    return None


def sport(f: Frame) -> int:
    return num(f, "tcp.srcport") if f["tcp.srcport"] else num(f, "udp.srcport")


def dport(f: Frame) -> int:
    return num(f, "tcp.dstport") if f["tcp.dstport"] else num(f, "udp.dstport")


@dataclass(frozen=True)
class Rule:
    name: str
    match: Callable[[Frame], bool]
    both: bool = False
    admin: bool = False


def rejected(f: Frame, rules: list[Rule]) -> Rule | None:
    return next((r for r in rules if r.match(f)), None)


def _unicast(addr: str, tcp: bool) -> bool:
    """A single host (RFC 1122 3.2.2); loopback for a TCP RST, which is no ICMP error."""
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        return not (a.packed[0] == 0 or a.packed[0] >= 224 or (a.is_loopback and not tcp))
    return not (a.is_multicast or a.is_unspecified or (a.is_loopback and not tcp))


def expected_replies(f: Frame, rule: Rule) -> int:
    """How many frames answer a rejected frame (RFC 1122 3.2.2, RFC 4443 2.4 e, RFC 9293)."""
    p = protos(f)
    if f["eth.dst"] and int(f["eth.dst"].split(":")[0], 16) & 1:
        return 0  # link broadcast or multicast
    src, dst = (f["ipv6.src"], f["ipv6.dst"]) if "ipv6" in p else (f["ip.src"], f["ip.dst"])
    if not (_unicast(src, "tcp" in p) and _unicast(dst, "tcp" in p)):
        return 0
    if "ip" in p and num(f, "ip.frag_offset") > 0:
        return 0
    if "icmp" in p or "icmpv6" in p:
        # an ICMP error is never answered (RFC 1122 3.2.2, RFC 4443 2.4 e): only queries
        t = num(f, "icmpv6.type") if "icmpv6" in p else num(f, "icmp.type")
        return int(t >= 128 if "icmpv6" in p else t in (0, 8, 9, 10, 13, 14, 15, 16, 17, 18))
    if "tcp" in p:
        flags = num(f, "tcp.flags")
        if flags & 0x04:
            return 0  # a RST is never answered
        if f["ip.flags.mf"] in ("1", "True") and not flags & 0x10:
            return 0  # SEG.LEN is not in a first fragment
        return 1 + (1 if rule.both and flags & 0x10 else 0)
    return 1


def check_rst(off: Frame, rst: Frame, to_receiver: bool) -> None:
    """A RST is well formed (tshark: checksums good) and acceptable to whom it goes to."""
    assert rst["tcp.checksum.status"] == "1", rst
    if rst["ip.src"]:
        assert rst["ip.checksum.status"] == "1", rst
    flags = num(rst, "tcp.flags")
    assert flags & 0x04 and num(rst, "tcp.len") == 0, rst
    ip = "ipv6" if off["ipv6.src"] else "ip"
    seq, ack = num(off, "tcp.seq_raw"), num(off, "tcp.ack_raw")
    oflags = num(off, "tcp.flags")
    if to_receiver:
        # as the sender would: RCV.NXT of the receiver is the dropped segment's SEG.SEQ
        assert (rst[f"{ip}.src"], rst[f"{ip}.dst"]) == (off[f"{ip}.src"], off[f"{ip}.dst"])
        assert (sport(rst), dport(rst)) == (sport(off), dport(off))
        assert num(rst, "tcp.seq_raw") == seq, (off, rst)
        if off["eth.src"]:
            assert (rst["eth.src"], rst["eth.dst"]) == (off["eth.src"], off["eth.dst"])
        return
    assert (rst[f"{ip}.src"], rst[f"{ip}.dst"]) == (off[f"{ip}.dst"], off[f"{ip}.src"])
    assert (sport(rst), dport(rst)) == (dport(off), sport(off))
    if off["eth.src"]:
        assert (rst["eth.src"], rst["eth.dst"]) == (off["eth.dst"], off["eth.src"])
    if oflags & 0x10:
        # RFC 5961 3.2: acceptable when SEG.SEQ is exactly the sender's RCV.NXT, which its
        # segment acknowledged
        assert num(rst, "tcp.seq_raw") == ack and not flags & 0x10, (off, rst)
    else:
        # SYN-SENT (RFC 9293 3.10.7.3): acceptable when it acknowledges everything sent,
        # SND.NXT = SEG.SEQ + data + SYN + FIN
        seglen = num(off, "tcp.len") + (oflags & 0x02 != 0) + (oflags & 0x01 != 0)
        assert flags & 0x10 and num(rst, "tcp.ack_raw") == (seq + seglen) % 2**32, (off, rst)


def check_icmp(off: Frame, off_bytes: bytes, rep: Frame, rep_bytes: bytes, admin: bool) -> None:
    """An ICMP(v6) destination unreachable from the offending datagram's destination, checksum
    good, quoting the datagram's first bytes exactly (RFC 792: header + 64 bits; RFC 4443: as
    much as fits in 1280 bytes)."""
    if off["ipv6.src"]:
        assert (rep["ipv6.src"], rep["ipv6.dst"]) == (off["ipv6.dst"], off["ipv6.src"])
        assert (rep["icmpv6.type"], rep["icmpv6.code"]) == ("1", "1" if admin else "4"), rep
        assert rep["icmpv6.checksum.status"] == "1", rep
        l2 = len(rep_bytes) - 40 - num(rep, "ipv6.plen")
        quote = rep_bytes[l2 + 48 :]
        want = min(40 + num(off, "ipv6.plen"), 1280 - 48)
        assert len(rep_bytes) - l2 <= 1280
    else:
        assert (rep["ip.src"], rep["ip.dst"]) == (off["ip.dst"], off["ip.src"])
        assert (rep["icmp.type"], rep["icmp.code"]) == ("3", "13" if admin else "3"), rep
        assert rep["icmp.checksum.status"] == "1" and rep["ip.checksum.status"] == "1", rep
        l2 = len(rep_bytes) - num(rep, "ip.len")
        quote = rep_bytes[l2 + 20 + 8 :]
        want = min(num(off, "ip.hdr_len") + 8, num(off, "ip.len"))
    assert len(quote) == want, (off, rep)
    assert quote == off_bytes[l2 : l2 + want]  # the same link header length


# -- a crafted capture: the cases real captures rarely hold -----------------------------------


def _sum16(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def _ip4(src: str, dst: str, proto: int, payload: bytes) -> bytes:
    h = bytearray(20)
    h[0], h[8], h[9] = 0x45, 64, proto
    h[2:4] = (20 + len(payload)).to_bytes(2, "big")
    h[12:16], h[16:20] = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    h[10:12] = _sum16(bytes(h)).to_bytes(2, "big")
    if proto in (6, 17):
        ph = h[12:20] + bytes([0, proto]) + len(payload).to_bytes(2, "big")
        off = 16 if proto == 6 else 6
        p = bytearray(payload)
        p[off : off + 2] = _sum16(bytes(ph) + bytes(p)).to_bytes(2, "big")
        payload = bytes(p)
    return bytes(h) + payload


def _ip6(src: str, dst: str, nh: int, payload: bytes) -> bytes:
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    h = bytes([0x60, 0, 0, 0]) + len(payload).to_bytes(2, "big") + bytes([nh, 64]) + s + d
    if nh in (6, 17):
        ph = s + d + len(payload).to_bytes(4, "big") + bytes([0, 0, 0, nh])
        off = 16 if nh == 6 else 6
        p = bytearray(payload)
        p[off : off + 2] = _sum16(ph + bytes(p)).to_bytes(2, "big")
        payload = bytes(p)
    return h + payload


def _tcp(sp: int, dp: int, seq: int, ack: int, flags: int, data: bytes = b"") -> bytes:
    return (sp.to_bytes(2, "big") + dp.to_bytes(2, "big") + seq.to_bytes(4, "big")
            + ack.to_bytes(4, "big") + bytes([5 << 4, flags]) + (65535).to_bytes(2, "big")
            + bytes(4) + data)  # fmt: skip


def _udp(sp: int, dp: int, data: bytes) -> bytes:
    return (
        sp.to_bytes(2, "big")
        + dp.to_bytes(2, "big")
        + (8 + len(data)).to_bytes(2, "big")
        + (b"\0\0" + data)
    )


A, B = bytes.fromhex("020000000aaa"), bytes.fromhex("020000000bbb")


def _eth(ip: bytes, v6: bool = False, vlan: int | None = None, dst: bytes = B) -> bytes:
    et = b"\x86\xdd" if v6 else b"\x08\x00"
    tag = b"\x81\x00" + vlan.to_bytes(2, "big") if vlan is not None else b""
    return dst + A + tag + et + ip


def crafted_frames() -> list[bytes]:
    """Ethernet frames, 10.9.0.1/2001:db8::1 (A) to 10.9.0.2/2001:db8::2 (B)."""
    a, b, a6, b6 = "10.9.0.1", "10.9.0.2", "2001:db8::1", "2001:db8::2"
    return [
        _eth(_ip4(a, b, 6, _tcp(40001, 81, 0xFFFFFFFE, 0, 0x03, b"hello"))),  # SYN+FIN, data
        _eth(_ip4(a, b, 6, _tcp(40002, 81, 1000, 5000, 0x18, b"x" * 100))),  # PSH ACK
        _eth(_ip4(a, b, 6, _tcp(40003, 81, 1000, 5000, 0x14))),  # a RST: no reply
        _eth(_ip4(a, b, 6, _tcp(40004, 81, 77, 0, 0x02)), vlan=42),  # a tagged SYN
        _eth(_ip6(a6, b6, 6, _tcp(40005, 81, 9, 10, 0x10, b"y" * 10)), v6=True),
        _eth(_ip6(a6, b6, 17, _udp(5000, 9999, bytes(range(256)) * 8)), v6=True),  # quote: 1232
        _eth(_ip4(a, b, 17, _udp(5000, 9999, b"q" * 30))),
        _eth(_ip4(a, "255.255.255.255", 17, _udp(68, 9999, b"b")), dst=b"\xff" * 6),  # broadcast
        _eth(_ip4(a, b, 1, bytes([8, 0, 0, 0, 0, 1, 0, 1]) + b"ping")),  # echo: answered
        _eth(_ip4(a, b, 1, bytes([3, 3, 0, 0, 0, 0, 0, 0]) + _ip4(b, a, 17, _udp(1, 2, b"")))),
    ]


def write_pcap(path: object, frames_: list[bytes], step_us: int = 1_000_000) -> None:
    """A microsecond pcap of Ethernet frames, step_us apart."""
    import struct

    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames_):
        t = 1_700_000_000 * 1_000_000 + i * step_us
        out.append(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(f), len(f)) + f)
    with open(str(path), "wb") as fh:
        fh.write(b"".join(out))
