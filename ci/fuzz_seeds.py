"""Cut fuzzing seeds from real captures (captures/ and ../shared/traces).

    python ci/fuzz_seeds.py OUT_DIR

OUT_DIR/stack: inputs of runtime-c/fuzz/fuzz_stack.c: a link kind byte, then up to FRAMES
consecutive frames of one capture as [u16 len][u32 time delta in microseconds][bytes] (little
endian), a few windows per capture. OUT_DIR/pcap: inputs of fuzz_pcap.c: each capture's file
header and first records (pcap) or blocks (pcapng), at most MAX_FILE bytes. OUT_DIR/reject:
inputs of fuzz_reject.c: [u16 link type, little endian][flags byte][one frame], a few frames
per capture.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "captures", REPO.parent / "shared" / "traces"]
FRAMES = 8  # frames per stack seed
WINDOWS = 4  # stack seeds per capture
MAX_FRAME = 2048
MAX_FILE = 16384
# rg_api.h enum rg_link_kind, by pcap link type (raw IP: by the version nibble)
KIND = {1: 0, 0: 1, 108: 1, 113: 4, 276: 5}
RAW = {101, 12, 14, 228, 229}


def records(data: bytes) -> Iterator[tuple[int, int, bytes, int]]:
    """(link type, timestamp in us, frame, end offset in the file) of a pcap or pcapng file."""
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        yield from _pcapng(data)
        return
    magic = data[:4]
    end = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack(end + "I", data[20:24])[0] & 0xFFFF
    off = 24
    while off + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack(end + "IIII", data[off : off + 16])
        frame = data[off + 16 : off + 16 + caplen]
        off += 16 + caplen
        yield link, sec * 1_000_000 + (frac // 1000 if nano else frac), frame, off


def _pcapng(data: bytes) -> Iterator[tuple[int, int, bytes, int]]:
    off, links, end = 0, [], "<"
    while off + 12 <= len(data):
        btype = data[off : off + 4]
        if btype == b"\x0a\x0d\x0d\x0a":
            end = "<" if data[off + 8 : off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            links = []
        btype_n, blen = struct.unpack(end + "II", data[off : off + 8])
        if blen < 12 or off + blen > len(data):
            return
        body = data[off + 8 : off + blen - 4]
        if btype_n == 1:
            links.append(struct.unpack(end + "H", body[:2])[0])
        elif btype_n == 6 and len(body) >= 20:
            ifid, hi, lo, caplen, _ = struct.unpack(end + "IIIII", body[:20])
            if ifid < len(links):  # ticks taken as microseconds (the default resolution)
                yield links[ifid], (hi << 32 | lo), body[20 : 20 + caplen], off + blen
        off += blen


def kind_of(link: int, frame: bytes) -> int | None:
    if link in RAW:
        v = frame[0] >> 4 if frame else 0
        return 2 if v == 4 else 3 if v == 6 else None
    return KIND.get(link)


def stack_seeds(data: bytes) -> Iterator[bytes]:
    recs = [(kind_of(link, f), ts, f) for link, ts, f, _ in records(data)]
    step = max(1, len(recs) // WINDOWS)
    for start in range(0, len(recs), step):
        window = recs[start : start + FRAMES]
        kind = window[0][0] if window else None
        if kind is None:
            continue
        out, prev = [bytes([kind])], window[0][1]
        for k, ts, frame in window:
            if k != kind:
                break
            delta = min(max(ts - prev, 0), 0x7FFFFFFF)
            prev = ts
            frame = frame[:MAX_FRAME]
            out.append(struct.pack("<HI", len(frame), delta) + frame)
        yield b"".join(out)


def reject_seeds(data: bytes) -> Iterator[bytes]:
    recs = list(records(data))
    for _link, _ts, frame, _ in recs[:: max(1, len(recs) // WINDOWS)]:
        yield struct.pack("<HB", _link, len(frame) & 3) + frame[:MAX_FRAME]


def pcap_seed(data: bytes) -> bytes:
    end = 0
    for _, _, _, off in records(data):
        if off > MAX_FILE:
            break
        end = off
    return data[: max(end, min(len(data), 64))]


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else REPO / "build" / "fuzz" / "seeds"
    for sub in ("stack", "pcap", "reject"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    n = {"stack": 0, "pcap": 0, "reject": 0}

    def put(sub: str, blob: bytes) -> None:
        (out / sub / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
        n[sub] += 1

    for src in SOURCES:
        for path in sorted(src.glob("*.pcap*")) if src.is_dir() else []:
            data = path.read_bytes()
            try:
                for seed in stack_seeds(data):
                    put("stack", seed)
                for seed in reject_seeds(data):
                    put("reject", seed)
            except (struct.error, IndexError):  # a capture this cutter cannot read: skip it
                pass
            put("pcap", pcap_seed(data))
    print(f"fuzz seeds: {n['stack']} stack inputs, {n['pcap']} capture files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
