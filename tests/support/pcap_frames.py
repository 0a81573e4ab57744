"""Shared by tests; moved from runtime/test_write.py."""

from __future__ import annotations

from pathlib import Path

from scapy.utils import RawPcapNgReader, RawPcapReader


def frames(path: Path) -> list[tuple[int, bytes]]:
    """(timestamp in ns, bytes) of every frame, read by scapy."""
    with open(path, "rb") as f:
        magic = f.read(4)
    reader = RawPcapNgReader if magic == b"\x0a\x0d\x0d\x0a" else RawPcapReader
    out = []
    with reader(str(path)) as r:
        for data, meta in r:
            if reader is RawPcapReader:
                frac = meta.usec * (1 if r.nano else 1000)
                ts = meta.sec * 1_000_000_000 + frac
            else:
                ts = ((meta.tshigh << 32) | meta.tslow) * (1_000_000_000 // meta.tsresol)
            out.append((ts, bytes(data)))
    return out
