#!/usr/bin/env python3
"""Hostile-traffic captures for the reassembly memory model.

    python bench/flood.py --kind far-ahead [--conns 20000] [--segs 4] [--ahead 1000000]
                          [--out far_ahead.pcap]

Kinds:

far-ahead  N TCP connections (client 10.X.Y.Z:P -> server 10.255.0.1:80), each: SYN, SYN-ACK
           (window 65535, scale 7, so the receiver allows 8 MiB), ACK, then `--segs` one-byte
           client segments that all lie far ahead of the next expected byte (the first at
           ISN + 1 + `--ahead`, then 4,096 bytes apart, downwards), never filling the hole at
           ISN + 1. Connections are opened one after another and never closed, so every
           connection's out-of-order bytes are held at the same time at the end of the capture.
           A reassembler whose memory follows the sequence offset reserves about `--ahead`
           bytes per connection; one whose memory follows the data holds `--segs` bytes.

Frames: Ethernet, IPv4 (valid header checksum), TCP (valid checksum); classic pcap,
microsecond timestamps, link type Ethernet. The same arguments give byte-identical files.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

T0 = 1_700_000_000
SYN, ACK, PSH = 0x02, 0x10, 0x08
ETH = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_frame(
    src: bytes,
    dst: bytes,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    opts: bytes = b"",
    ip_id: int = 0,
) -> bytes:
    """One Ethernet/IPv4/TCP frame with valid checksums."""
    off = (20 + len(opts)) // 4
    tcp = struct.pack(
        "!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, off << 4, flags, 65535, 0, 0
    )
    seg = tcp + opts + payload
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(seg))
    seg = seg[:16] + struct.pack("!H", _csum(pseudo + seg)) + seg[18:]
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), ip_id & 0xFFFF, 0x4000, 64, 6, 0, src, dst
    )
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return ETH + ip + seg


def far_ahead(conns: int, segs: int, ahead: int) -> Iterator[bytes]:
    """The frames of the far-ahead flood, in capture order."""
    server = bytes([10, 255, 0, 1])
    syn_opts = b"\x02\x04\x05\xb4" + b"\x01\x03\x03\x07"  # MSS 1460, NOP, window scale 7
    for i in range(conns):
        client = bytes([10, (i >> 16) & 0xFF, (i >> 8) & 0xFF, (i & 0xFF) or 1])
        sport = 1024 + (i * 7919) % 64000
        cisn = (i * 2654435761) & 0xFFFFFFFF
        sisn = (i * 40503 + 12345) & 0xFFFFFFFF
        yield tcp_frame(client, server, sport, 80, cisn, 0, SYN, opts=syn_opts)
        yield tcp_frame(server, client, 80, sport, sisn, cisn + 1, SYN | ACK, opts=syn_opts)
        yield tcp_frame(client, server, sport, 80, cisn + 1, sisn + 1, ACK)
        for k in range(segs):
            seq = cisn + 1 + ahead - k * 4096
            yield tcp_frame(
                client, server, sport, 80, seq, sisn + 1, PSH | ACK, bytes([0x41 + k % 26])
            )


KINDS = {"far-ahead": far_ahead}


def write_pcap(path: Path, frames: Iterator[bytes]) -> int:
    """Classic pcap, microsecond timestamps 10 us apart; returns the number of frames."""
    n = 0
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            us = n * 10
            f.write(struct.pack("<IIII", T0 + us // 1_000_000, us % 1_000_000, len(fr), len(fr)))
            f.write(fr)
            n += 1
    return n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=sorted(KINDS), default="far-ahead")
    ap.add_argument("--conns", type=int, default=20_000)
    ap.add_argument(
        "--segs", type=int, default=4, help="far-ahead: one-byte segments per connection"
    )
    ap.add_argument("--ahead", type=int, default=1_000_000, help="far-ahead: offset past the hole")
    ap.add_argument("--out", type=Path, default=None, help="output pcap (default: KIND.pcap)")
    a = ap.parse_args(argv)
    if a.conns < 1 or a.segs < 1 or not 4096 * a.segs <= a.ahead < 1 << 30:
        ap.error("need --conns >= 1, --segs >= 1 and 4096 * segs <= --ahead < 2^30")
    out = a.out or Path(f"{a.kind.replace('-', '_')}.pcap")
    n = write_pcap(out, KINDS[a.kind](a.conns, a.segs, a.ahead))
    print(f"{out}: {n} frames", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
