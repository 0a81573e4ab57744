"""Captures of every link type and capture format the capture driver reads, made from real
captures by rewriting their frames (struct only: no library's idea of a link header).

`ip_packets(pcap)` strips the link header of a real capture's frames and keeps the IP packets
with their timestamps; `Frame` then wraps one in any link header (`wrap`), and `write_pcap` /
`write_pcapng` write classic pcap (both byte orders, µs or ns) and pcapng (sections of either
byte order, several interfaces of different link types, Enhanced and Simple Packet Blocks,
`if_tsresol`, `if_tsoffset`). tests/e2e/test_e2e_links.py runs the tcp_ip stack and tshark on
each and compares them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

# pcap link types (https://www.tcpdump.org/linktypes.html)
LT_NULL, LT_ETHERNET, LT_LOOP = 0, 1, 108
LT_RAW, LT_RAW_12, LT_RAW_14 = 101, 12, 14  # LINKTYPE_RAW and the two DLT_RAW values
LT_IPV4, LT_IPV6 = 228, 229
LT_SLL, LT_SLL2 = 113, 276
LT_USER0 = 147
LT_PPP, LT_PPP_HDLC = 9, 50

SNAPLEN = 262144
AF_INET = 2
AF_INET6 = {"linux": 10, "openbsd": 24, "freebsd": 28, "macos": 30}


@dataclass(frozen=True)
class Frame:
    """One captured IP packet: its time (ns), the captured bytes and the length on the wire."""

    ts_ns: int
    ip: bytes
    wire: int

    @property
    def version(self) -> int:
        return self.ip[0] >> 4

    @property
    def ethertype(self) -> int:
        return 0x86DD if self.version == 6 else 0x0800


def _read_pcap(path: Path) -> tuple[int, list[tuple[int, bytes, int]]]:
    """(link type, [(ts_ns, captured bytes, wire length)]) of a classic pcap."""
    raw = path.read_bytes()
    magic = raw[:4]
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<"}.get(magic, ">")
    nsec = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack_from(order + "I", raw, 20)[0] & 0xFFFF
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, frac, incl, orig = struct.unpack_from(order + "IIII", raw, off)
        off += 16
        out.append((sec * 10**9 + (frac if nsec else frac * 1000), raw[off : off + incl], orig))
        off += incl
    return linktype, out


def ip_packets(path: Path) -> list[Frame]:
    """The IP packets of a real NULL, raw-IP or Ethernet (untagged) capture."""
    linktype, recs = _read_pcap(path)
    strip = {LT_NULL: 4, LT_LOOP: 4, LT_RAW: 0, LT_ETHERNET: 14}[linktype]
    out = []
    for ts, data, wire in recs:
        if linktype == LT_ETHERNET and data[12:14] not in (b"\x08\x00", b"\x86\xdd"):
            continue
        out.append(Frame(ts, data[strip:], wire - strip))
    return out


def wrap(f: Frame, link: str) -> tuple[int, bytes, int]:
    """(link type, captured bytes, wire length) of `f` in the link encapsulation `link`."""
    mac_a, mac_b = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
    et = struct.pack(">H", f.ethertype)
    family = AF_INET if f.version == 4 else AF_INET6["macos"]
    ppp_proto = b"\x00\x21" if f.version == 4 else b"\x00\x57"
    hdrs: dict[str, tuple[int, bytes]] = {
        "ethernet": (LT_ETHERNET, mac_a + mac_b + et),
        # 802.1Q: TPID 0x8100, PCP 3, VID 100
        "vlan": (LT_ETHERNET, mac_a + mac_b + b"\x81\x00" + struct.pack(">H", 3 << 13 | 100) + et),
        # QinQ: an 802.1ad S-tag (0x88a8, VID 200), then an 802.1Q C-tag (VID 100)
        "qinq": (
            LT_ETHERNET,
            mac_a + mac_b + b"\x88\xa8\x00\xc8" + b"\x81\x00\x00\x64" + et,
        ),
        # Linux cooked v1: packet type, ARPHRD_ETHER, address length, 8 address bytes, protocol
        "sll": (LT_SLL, struct.pack(">HHH", 0, 1, 6) + mac_a + b"\0\0" + et),
        # v2: protocol, reserved, ifindex, ARPHRD_ETHER, packet type, address length, address
        "sll2": (LT_SLL2, et + b"\0\0" + struct.pack(">IHBB", 2, 1, 0, 6) + mac_a + b"\0\0"),
        "null_le": (LT_NULL, struct.pack("<I", family)),
        "null_be": (LT_NULL, struct.pack(">I", family)),
        "null_linux": (LT_NULL, struct.pack("<I", AF_INET if f.version == 4 else 10)),
        "loop": (LT_LOOP, struct.pack(">I", family)),
        "loop_openbsd": (LT_LOOP, struct.pack(">I", AF_INET if f.version == 4 else 24)),
        "raw": (LT_RAW, b""),
        "raw12": (LT_RAW_12, b""),
        "raw14": (LT_RAW_14, b""),
        "ipv4": (LT_IPV4, b""),
        "ipv6": (LT_IPV6, b""),
        # PPP (RFC 1661/1662): address/control 0xFF 0x03 and a 2-byte protocol; without the
        # address/control bytes (ACFC); with a 1-byte protocol (PFC); PPP in HDLC framing (50)
        "ppp": (LT_PPP, b"\xff\x03" + ppp_proto),
        "ppp_acfc": (LT_PPP, ppp_proto),
        "ppp_pfc": (LT_PPP, b"\xff\x03" + ppp_proto[1:]),
        "ppp_hdlc": (LT_PPP_HDLC, b"\xff\x03" + ppp_proto),
        "user0": (LT_USER0, b""),  # a link type no stack has an entry for
    }
    lt, hdr = hdrs[link]
    return lt, hdr + f.ip, f.wire + len(hdr)


def write_pcap(path: Path, link: str, frames: list[Frame], *, big: bool = False,
               nsec: bool = False) -> Path:  # fmt: skip
    o = ">" if big else "<"
    recs = [wrap(f, link) for f in frames]
    lt = recs[0][0] if recs else LT_ETHERNET
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, SNAPLEN, lt)]
    for f, (_, data, wire) in zip(frames, recs, strict=True):
        sec, ns = divmod(f.ts_ns, 10**9)
        out.append(struct.pack(o + "IIII", sec, ns if nsec else ns // 1000, len(data), wire))
        out.append(data)
    path.write_bytes(b"".join(out))
    return path


# ---------------------------------------------------------------------------------------------
# pcapng (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html)
# ---------------------------------------------------------------------------------------------


def _pad4(b: bytes) -> bytes:
    return b + bytes(-len(b) % 4)


def _block(o: str, btype: int, body: bytes) -> bytes:
    body = _pad4(body)
    n = 12 + len(body)
    return struct.pack(o + "II", btype, n) + body + struct.pack(o + "I", n)


def _option(o: str, code: int, value: bytes) -> bytes:
    return struct.pack(o + "HH", code, len(value)) + _pad4(value)


@dataclass
class Interface:
    """An IDB: its link encapsulation (a `wrap` name) and timestamp options. `tsresol` is the
    if_tsresol byte (None: option absent, microseconds); `tsoffset` is if_tsoffset in seconds."""

    link: str
    tsresol: int | None = None
    tsoffset: int = 0
    snaplen: int = SNAPLEN

    def units(self) -> tuple[int, int]:
        """Timestamp units per second as (numerator base, exponent): 10**n or 2**n."""
        r = 6 if self.tsresol is None else self.tsresol
        return (2, r & 0x7F) if r & 0x80 else (10, r)

    def ticks(self, ts_ns: int) -> int:
        """The pcapng timestamp of packet time ts_ns (exact for the resolutions used here)."""
        base, exp = self.units()
        rel = ts_ns - self.tsoffset * 10**9
        return rel * base**exp // 10**9

    def ns(self, ticks: int) -> int:
        """What a reader must make of `ticks`: the time in ns (truncated)."""
        base, exp = self.units()
        return ticks * 10**9 // base**exp + self.tsoffset * 10**9


def _idb(o: str, itf: Interface, linktype: int) -> bytes:
    opts = b""
    if itf.tsresol is not None:
        opts += _option(o, 9, bytes([itf.tsresol]))
    if itf.tsoffset:
        opts += _option(o, 14, struct.pack(o + "q", itf.tsoffset))
    if opts:
        opts += _option(o, 0, b"")
    return _block(o, 1, struct.pack(o + "HHI", linktype, 0, itf.snaplen) + opts)


@dataclass
class Section:
    """One section: its byte order, its interfaces, and its packets as (interface index, frame,
    'epb' or 'spb'). An SPB belongs to interface 0 and has no timestamp."""

    interfaces: list[Interface]
    packets: list[tuple[int, Frame, str]]
    big: bool = False


def pcapng_bytes(sections: list[Section]) -> bytes:
    out = []
    for sec in sections:
        o = ">" if sec.big else "<"
        shb = struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1)
        out.append(_block(o, 0x0A0D0D0A, shb))
        for itf in sec.interfaces:
            # the link type of an interface comes from its encapsulation
            probe = Frame(0, bytes([0x45]) + bytes(19), 20)
            out.append(_idb(o, itf, wrap(probe, itf.link)[0]))
        for idx, f, kind in sec.packets:
            itf = sec.interfaces[idx]
            _, data, wire = wrap(f, itf.link)
            cap = data[: itf.snaplen]
            if kind == "spb":
                assert idx == 0, "an SPB belongs to interface 0"
                out.append(_block(o, 3, struct.pack(o + "I", wire) + cap))
                continue
            t = itf.ticks(f.ts_ns)
            body = struct.pack(o + "IIIII", idx, t >> 32, t & 0xFFFFFFFF, len(cap), wire) + cap
            out.append(_block(o, 6, body))
    return b"".join(out)


def write_pcapng(path: Path, sections: list[Section], *, cut: int = 0) -> Path:
    """Write the sections; `cut` drops that many bytes from the end (a truncated last block)."""
    data = pcapng_bytes(sections)
    path.write_bytes(data[: len(data) - cut] if cut else data)
    return path
