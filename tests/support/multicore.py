"""Shared by tests; moved from runtime/test_multicore.py."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from support.sources import (
    _eal,
)

SYMMETRIC_KEY = bytes([0x6D, 0x5A] * 20)


def _lcores(n: int) -> list[str]:
    """EAL arguments for a main lcore and n worker lcores on the cores this process may use
    (threads share cores when there are fewer: a test needs no speed)."""
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    return ["--lcores", f"(0-{n})@({cpus})"]


def _eal_workers(tmp: Path, n: int, *vdevs: str) -> list[str]:
    args = _eal(tmp, *vdevs)
    i = args.index("-l")
    return [*args[:i], *args[i + 2 :], *_lcores(n)]


def toeplitz(key: bytes, data: bytes) -> int:
    """The Toeplitz hash of Microsoft's RSS specification: for every set bit i of the input
    (most significant first), XOR in the 32 key bits starting at bit i."""
    k = int.from_bytes(key, "big")
    klen = len(key) * 8
    h = 0
    for i in range(len(data) * 8):
        if data[i // 8] >> (7 - i % 8) & 1:
            h ^= (k >> (klen - 32 - i)) & 0xFFFFFFFF
    return h


def parse(frame: bytes) -> Parsed | None:
    """Ethernet (802.1Q/ad tags) carrying IPv4 or IPv6 (its Fragment header found through the
    hop-by-hop, routing and destination options headers); None for anything else."""
    off, etype = 12, struct.unpack_from("!H", frame, 12)[0]
    while etype in (0x8100, 0x88A8) and len(frame) >= off + 6:
        off += 4
        etype = struct.unpack_from("!H", frame, off)[0]
    off += 2
    if etype == 0x0800 and len(frame) >= off + 20:
        ihl = (frame[off] & 15) * 4
        ident, fl = struct.unpack_from("!HH", frame, off + 4)
        proto, src, dst = frame[off + 9], frame[off + 12 : off + 16], frame[off + 16 : off + 20]
        l4 = off + ihl
        if fl & 0x3FFF:  # MF or an offset: a fragment
            p = Parsed(src, dst, proto, None)
            p.frag = (src, dst, ident)
            return p
    elif etype == 0x86DD and len(frame) >= off + 40:
        src, dst, proto = frame[off + 8 : off + 24], frame[off + 24 : off + 40], frame[off + 6]
        l4 = off + 40
        while proto in (0, 43, 60) and len(frame) >= l4 + 8:
            proto, l4 = frame[l4], l4 + (frame[l4 + 1] + 1) * 8
        if proto == 44 and len(frame) >= l4 + 8:
            fo, ident = struct.unpack_from("!HI", frame, l4 + 2)
            if fo & 0xFFF9:  # an offset or M: a fragment (an atomic one is not)
                p = Parsed(src, dst, frame[l4], None)
                p.frag = (src, dst, ident)
                return p
            proto, l4 = frame[l4], l4 + 8
    else:
        return None
    ports = None
    if proto in (6, 17, 132) and len(frame) >= l4 + 4:
        ports = struct.unpack_from("!HH", frame, l4)
    return Parsed(src, dst, proto, ports)


class Parsed:
    """What the test reads of a frame: its addresses, its 5-tuple (None for fragments and
    non-port protocols) and, for a fragment, the datagram it belongs to."""

    def __init__(self, src: bytes, dst: bytes, proto: int, ports: tuple[int, int] | None):
        self.src, self.dst, self.proto, self.ports = src, dst, proto, ports
        self.frag: tuple[bytes, bytes, int] | None = None
