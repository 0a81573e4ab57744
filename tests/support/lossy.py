"""Lossy and cut versions of real captures, made by the tests themselves.

`segments(pcap)` lists the TCP segments of a classic pcap as tshark dissects them (frame
number, stream, sender, raw sequence number, payload length, flags); the drop patterns pick
payload-carrying frames from that list, `write_without(pcap, frames, out)` copies the capture
without them (byte for byte otherwise: same header, timestamps and link type), and
`expected_holes` computes, per direction, the byte ranges that the dropped segments carried and
no kept segment covers, relative to the direction's first sequence number: the holes a
stack must report as gaps; `captured` is the independent model of what a direction's
captured segments hold. `write_from` cuts a capture in the middle (mid-stream pickup).
`binary`/`run` build a stock stack once and run its binary on a capture with an NF. Nothing
here reassembles with tshark's or the stack's code: tshark dissects, the model is ours.
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from support.captures import REPO, Run, rubikgen_command

_MOD = 1 << 32
_SYN, _FIN, _RST = 0x02, 0x01, 0x04


@dataclass(frozen=True)
class Segment:
    frame: int  # 1-based frame number
    stream: int  # tshark's tcp.stream
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int  # raw sequence number
    length: int  # TCP payload bytes
    flags: int
    ack: int = 0  # raw acknowledgment number (valid with the ACK flag)
    payload: bytes = b""  # the captured payload bytes, as tshark dissects them

    @property
    def start(self) -> int:
        """The sequence number of the first payload byte (a SYN takes one number)."""
        return (self.seq + bool(self.flags & _SYN)) % _MOD


def _frames(pcap: Path) -> tuple[bytes, list[bytes]]:
    """The global header and the records (record header + data) of a classic pcap."""
    raw = pcap.read_bytes()
    magic = raw[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{pcap}: not a classic pcap")
    pos, out = 24, []
    while pos + 16 <= len(raw):
        incl = struct.unpack_from(endian + "I", raw, pos + 8)[0]
        out.append(raw[pos : pos + 16 + incl])
        pos += 16 + incl
    return raw[:24], out


def write_without(pcap: Path, drop: Iterable[int], out: Path) -> Path:
    """Copy `pcap` to `out` without the frames numbered in `drop` (1-based)."""
    gone = set(drop)
    head, recs = _frames(pcap)
    out.write_bytes(head + b"".join(r for n, r in enumerate(recs, 1) if n not in gone))
    return out


def write_from(pcap: Path, first: int, out: Path) -> Path:
    """Copy `pcap` to `out` from frame `first` on (1-based): the capture cut in the middle."""
    return write_without(pcap, range(1, first), out)


@functools.cache
def segments(pcap: Path) -> list[Segment]:
    """Every TCP header tshark finds in `pcap` (outside ICMP errors), in frame order (cached:
    the file must not change)."""
    exe = shutil.which("tshark")
    assert exe, "tshark is not installed"
    fields = ["frame.number", "tcp.stream", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst"]
    fields += ["tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len", "tcp.flags"]
    fields += ["tcp.ack_raw", "tcp.payload"]
    args = [exe, "-n", "-r", str(pcap), "-Y", "tcp && !icmp && !icmpv6", "-T", "fields"]
    for f in fields:
        args += ["-e", f]
    env = dict(os.environ, LC_ALL="C")
    text = subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout
    out = []
    for line in text.splitlines():
        no, stream, s4, s6, d4, d6, sp, dp, seq, ln, fl, ack, data = line.split("\t")
        if "," in stream:  # a tunnel: not what these helpers are for
            continue
        out.append(
            Segment(
                int(no),
                int(stream),
                ((s4 or s6).split(",")[-1], int(sp)),  # in a tunnel: the inner header's
                ((d4 or d6).split(",")[-1], int(dp)),
                int(seq),
                int(ln),
                int(fl, 16),
                int(ack or 0),
                bytes.fromhex(data.replace(":", "")),
            )
        )
    return out


Pattern = Callable[[list[Segment]], set[int]]


def _data(segs: list[Segment]) -> list[Segment]:
    return [s for s in segs if s.length > 0 and not s.flags & (_SYN | _FIN | _RST)]


def every_nth(n: int, first: int = 0) -> Pattern:
    """Every n-th data segment of the capture (counting from `first`, both directions)."""
    return lambda segs: {s.frame for k, s in enumerate(_data(segs)) if k % n == first % n}


def burst(at: int, count: int) -> Pattern:
    """`count` consecutive data segments of one direction (the largest), starting at its
    `at`-th."""

    def pick(segs: list[Segment]) -> set[int]:
        by_dir: dict[tuple, list[Segment]] = {}
        for s in _data(segs):
            by_dir.setdefault((s.stream, s.src), []).append(s)
        longest = max(by_dir.values(), key=len, default=[])
        return {s.frame for s in longest[at : at + count]}

    return pick


def before_fin(segs: list[Segment]) -> set[int]:
    """In each direction that sends a FIN, the last data segment before its first FIN."""
    out: set[int] = set()
    last: dict[tuple, Segment] = {}
    done: set[tuple] = set()
    for s in segs:
        key = (s.stream, s.src)
        if key in done:
            continue
        if s.flags & _FIN:
            done.add(key)
            if key in last:
                out.add(last[key].frame)
        elif s.length and not s.flags & (_SYN | _RST):
            last[key] = s
    return out


def first_data(segs: list[Segment]) -> set[int]:
    """The first data segment of every direction."""
    seen, out = set(), set()
    for s in _data(segs):
        if (s.stream, s.src) not in seen:
            seen.add((s.stream, s.src))
            out.add(s.frame)
    return out


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def expected_holes(
    segs: list[Segment], dropped: set[int]
) -> dict[tuple[int, tuple[str, int]], list[tuple[int, int]]]:
    """Per (stream, sender): [(offset, length), ...] of the bytes that only dropped segments
    carried, offsets relative to the direction's first sequence number in the lossy capture
    (its first kept segment's, SYN + 1 for a SYN), holes before that start or after the last
    kept byte (which nothing shows missing) left out."""
    kept: dict[tuple, list[Segment]] = {}
    lost: dict[tuple, list[Segment]] = {}
    for s in segs:
        (lost if s.frame in dropped else kept).setdefault((s.stream, s.src), []).append(s)
    out = {}
    for key, gone in lost.items():
        mine = kept.get(key, [])
        if not mine:
            continue
        base = mine[0].start

        def rel(x: int, base: int = base) -> int:
            d = (x - base) % _MOD
            return d - _MOD if d >= _MOD // 2 else d

        have = _merge([(rel(s.start), rel(s.start) + s.length) for s in mine if s.length])
        top = max(rel(s.start) + s.length + bool(s.flags & _FIN) for s in mine)
        holes: list[tuple[int, int]] = []
        for a, b in _merge([(rel(s.start), rel(s.start) + s.length) for s in gone]):
            a, b = max(a, 0), min(b, top)
            for ha, hb in have:  # cut what kept segments cover
                if hb <= a or ha >= b:
                    continue
                if ha > a:
                    holes.append((a, ha))
                a = max(a, hb)
            if a < b:
                holes.append((a, b))
        out[key] = [(a, b - a) for a, b in _merge(holes) if b > a]
    return out


@dataclass
class Delivery:
    """What one direction's captured segments hold, in sequence order: `data` is every captured
    payload byte from the direction's first sequence number on (the first copy of a byte to
    arrive wins, bytes before the start are dropped), holes cut out; `holes` lists each hole
    before the last captured byte as (offset in the stream, length), the stream offset
    counting delivered and missing bytes alike."""

    data: bytes
    holes: list[tuple[int, int]]


def captured(segs: Iterable[Segment], dropped: set[int] = frozenset()) -> dict[tuple, Delivery]:
    """Per (sender, receiver) endpoints: the `Delivery` of the segments not in `dropped` (one
    connection per pair of endpoints: the captures used have no reused 4-tuple)."""
    by_dir: dict[tuple, list[Segment]] = {}
    for s in segs:
        if s.frame not in dropped:
            by_dir.setdefault((s.src, s.dst), []).append(s)
    out = {}
    for key, mine in by_dir.items():
        base = mine[0].start
        have: dict[int, int] = {}
        for s in mine:
            rel = (s.start - base) % _MOD
            if rel >= _MOD // 2:
                continue  # before the start: old data
            for i, b in enumerate(s.payload):
                have.setdefault(rel + i, b)
        data, holes, pos = bytearray(), [], 0
        for off in sorted(have):
            if off > pos:
                holes.append((pos, off - pos))
            data.append(have[off])
            pos = off + 1
        out[key] = Delivery(bytes(data), holes)
    return out


@functools.cache
def binary(stack: str) -> Path:
    """Build the stack once (rubikgen build: skipped when up to date) and return its binary."""
    out = REPO / "build" / stack
    argv = [*rubikgen_command(), "build", f"specs/stacks/{stack}.yaml", "-o", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / stack


def run(stack: str, pcap: Path, out: Path, nf: str = "streams") -> Run:
    argv = [str(binary(stack)), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    return Run(pcap, out, argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
