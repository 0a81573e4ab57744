"""Crafted TLS conversations over TCP, cut into segments and records any way a test asks: the
bytes each side sends (a ClientHello in one or more handshake records, a ServerHello, a
ChangeCipherSpec and encrypted records), and the frames of one IPv4 connection carrying them
(checksums right, segments in any order). The handshake messages are built field by field from
RFC 8446; the tests compare what the stack prints with tshark's dissection of these frames."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Sequence
from pathlib import Path

from support.quic_initial import client_hello, write_pcap


def server_hello(rng: random.Random, cipher: int, alpn: str | None, tls13: bool) -> bytes:
    """A ServerHello handshake message (RFC 8446 4.1.3): TLS 1.3 (supported_versions 0x0304,
    a key share) or TLS 1.2 (no supported_versions), with an ALPN choice if alpn."""

    def ext(t: int, body: bytes) -> bytes:
        return struct.pack("!HH", t, len(body)) + body

    exts = b""
    if tls13:
        exts += ext(43, b"\x03\x04")
        exts += ext(51, struct.pack("!HH", 0x001D, 32) + rng.randbytes(32))
    if alpn is not None:
        name = alpn.encode()
        exts += ext(16, struct.pack("!HB", len(name) + 1, len(name)) + name)
    body = b"\x03\x03" + rng.randbytes(32) + b"\x20" + rng.randbytes(32)
    body += struct.pack("!HB", cipher, 0) + struct.pack("!H", len(exts)) + exts
    return b"\x02" + len(body).to_bytes(3, "big") + body


def records(content: int, data: bytes, cuts: Sequence[int] = ()) -> bytes:
    """data as TLS records of one content type, cut at the given offsets (one record per part)."""
    pts = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    return b"".join(
        struct.pack("!BHH", content, 0x0301 if content == 22 else 0x0303, b - a) + data[a:b]
        for a, b in zip(pts, pts[1:], strict=False)
    )


def conversation(
    rng: random.Random, sni: str, hello_cuts: Sequence[int] = ()
) -> tuple[bytes, bytes, int]:
    """(client bytes, server bytes, the length of the client's ClientHello records) of a TLS 1.3
    1.2 handshake as a passive observer sees it (a TLS 1.3 ClientHello, a 1.2 ServerHello): the ClientHello (its handshake message cut into
    records at hello_cuts), then ChangeCipherSpec and encrypted records, among them a
    handshake-typed record after ChangeCipherSpec that must not be read as a handshake message
    (TLS 1.2 sends Finished so)."""
    ch = client_hello(rng, sni, ["h2", "http/1.1"], 512 + rng.randrange(400))
    sh = server_hello(rng, 0xC02F, "h2", False)  # TLS 1.2: Finished follows CCS encrypted
    garbage = b"\x01\x00\x00\x30" + rng.randbytes(60)  # looks like a ClientHello: encrypted
    hello = records(22, ch, hello_cuts)
    client = hello + records(20, b"\x01") + records(22, garbage)
    client += records(23, rng.randbytes(200)) + records(23, rng.randbytes(40))
    server = records(22, sh) + records(20, b"\x01") + records(23, rng.randbytes(900))
    return client, server, len(hello)


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _frame(
    src: str, dst: str, sp: int, dp: int, seq: int, ack: int, flags: int, data: bytes
) -> bytes:
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    tcp = struct.pack("!HHIIBBHHH", sp, dp, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags,
                      65535, 0, 0) + data  # fmt: skip
    c = _csum(s + d + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, s, d)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ip + tcp


def _parts(data: bytes, cuts: Sequence[int]) -> list[tuple[int, bytes]]:
    pts = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    return [(a, data[a:b]) for a, b in zip(pts, pts[1:], strict=False)]


def connection(
    sport: int,
    client: bytes,
    server: bytes,
    client_cuts: Sequence[int] = (),
    server_cuts: Sequence[int] = (),
    order: Sequence[int] | None = None,
    drop: Sequence[int] = (),
    hold: int | None = None,
    port: int = 443,
) -> list[bytes]:
    """The frames of one connection 10.9.0.1:sport -> 10.9.0.2:port: the handshake, the client's
    bytes as segments cut at client_cuts (sent in `order`, a permutation of their indexes, and
    without those in `drop`; cut at `hold` too, the segments from `hold` on after the server's segments, as
    a client sends ChangeCipherSpec after the ServerHello), the server's bytes, then FINs. The
    server's segments acknowledge all the client's bytes, so a dropped segment is a hole that
    gap recovery skips then."""
    c, s = "10.9.0.1", "10.9.0.2"
    ci, si = 1000, 5000
    out = [
        _frame(c, s, sport, port, ci, 0, 0x02, b""),
        _frame(s, c, port, sport, si, ci + 1, 0x12, b""),
        _frame(c, s, sport, port, ci + 1, si + 1, 0x10, b""),
    ]
    hold = len(client) if hold is None else hold
    segs = _parts(client, [*client_cuts, hold])  # ClientHello and the rest never share one
    idx = list(order) if order is not None else list(range(len(segs)))
    late: list[bytes] = []
    for i in idx:
        if i in drop:
            continue
        off, part = segs[i]
        f = _frame(c, s, sport, port, ci + 1 + off, si + 1, 0x18, part)
        (out if off < hold else late).append(f)
    for off, part in _parts(server, server_cuts):
        out.append(_frame(s, c, port, sport, si + 1 + off, ci + 1 + len(client), 0x18, part))
    out += late
    out.append(_frame(c, s, sport, port, ci + 1 + len(client), si + 1 + len(server), 0x11, b""))
    out.append(_frame(s, c, port, sport, si + 1 + len(server), ci + 2 + len(client), 0x11, b""))
    return out


def write(path: Path, frames: list[bytes]) -> Path:
    write_pcap(path, [(f, len(f)) for f in frames])
    return path
