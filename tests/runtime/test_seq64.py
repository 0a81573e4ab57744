"""Streams past 4 GiB: sequence numbers that wrap, captured with heavy loss (issue 27 item 3).

A small writer here (bench/flood.py's frames) makes a capture of one TCP connection carrying more than 8 GiB from the
client, of which only a few segments per GiB were kept (runs of one to three consecutive
segments, one run across each wrap of the 32-bit sequence number, one retransmitted): a few
hundred frames. The test knows the transfer it wrote, so it computes independently which bytes
were captured (in stream order) and every hole between them as true byte counts (64-bit stream
offsets, holes of up to ~600 MB), and checks that the `tcp_ip` stack with the `streams` NF

1. delivers every captured byte of the client's direction, in order, and nothing else;
2. reports the holes (`gaps` in flows.jsonl: offset, length) exactly, the last one before the
   FIN included, and the summary's `gap_bytes` adds up to the transfer length minus the
   captured bytes;
3. refuses nothing (no `seq_limit` hit, no dropped byte) and counts no overlap but the one
   retransmission.

Two variants: the receiver's ACK of each kept run kept too (the ACK-driven gap skipping), and
no receiver packet at all after the handshake (a one-way capture: the byte cap gives up holes
and the window's left edge is inferred from the largest TCP window, RFC 7323). tshark reads the
capture first: its `tcp.payload` fields, frame by frame, are the bytes the writer meant.
"""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.captures import REPO, flow_key
from support.lossy import run
from support.oracle import tshark_available

sys.path.insert(0, str(REPO / "bench"))
import flood  # noqa: E402

MSS = 1448
GIB = 1 << 30
CLIENT, SERVER = ("10.1.0.1", 40001), ("10.1.0.2", 8080)


def _frame(src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int,
           payload: bytes = b"") -> bytes:  # fmt: skip
    return flood.tcp(flood.addr(src[0]), flood.addr(dst[0]), src[1], dst[1], seq % (1 << 32),
                     ack % (1 << 32), flags, payload)  # fmt: skip


def _payload(off: int, n: int) -> bytes:
    """The transfer's bytes at stream offset off: a pattern of the offset, unlike at every
    offset modulo 2^32 (bits above 32 enter it), so that a byte delivered at the wrong wrap
    is seen."""
    return bytes(((off + i) * 2654435761 >> 13 ^ (off + i) >> 32) & 0xFF for i in range(n))


@dataclass
class Transfer:
    isn: int  # the client's initial sequence number
    length: int  # data bytes of the transfer
    runs: list[tuple[int, int]] = field(default_factory=list)  # kept (offset, length), in order

    def captured(self) -> bytes:
        return b"".join(_payload(o, n) for o, n in self.runs)

    def holes(self) -> list[tuple[int, int]]:
        """(stream offset, length) of every byte range no kept segment carried, up to the FIN."""
        out, pos = [], 0
        for o, n in self.runs:
            if o > pos:
                out.append((pos, o - pos))
            pos = max(pos, o + n)
        if self.length > pos:
            out.append((pos, self.length - pos))
        return out


def _transfer(seed: int) -> Transfer:
    """A transfer of 8.5 GiB (whole segments) starting 100 MB before the first wrap, with 3 to 5
    kept runs per GiB, one run across each wrap."""
    rng = random.Random(seed)
    isn = (1 << 32) - 100_000_000
    nseg = (8 * GIB + GIB // 2) // MSS
    t = Transfer(isn, nseg * MSS)
    starts: set[int] = set()
    for g in range(9):
        lo, hi = g * GIB // MSS, min(nseg - 3, (g + 1) * GIB // MSS)
        starts.update(rng.randrange(lo, hi) for _ in range(rng.randint(3, 5)))
    for w in (1, 2):  # the segment holding the w-th wrap starts the run
        starts.add(((1 << 32) * w - isn - 1) // MSS)
    pos = 0
    for k in sorted(starts):
        k = max(k, pos)
        n = rng.randint(1, 3)
        t.runs.append((k * MSS, n * MSS))
        pos = k + n
    return t


def _write(t: Transfer, path: Path, acks: bool) -> list[bytes]:
    """The capture: handshake, the kept runs (one retransmitted), the receiver's ACK after each
    run if `acks`, the client's FIN at the end of the transfer and the close. Returns the
    client's payloads in frame order."""
    sisn = 0x12345678
    c, s = CLIENT, SERVER
    frames = [
        _frame(c, s, t.isn, 0, 0x02),
        _frame(s, c, sisn, t.isn + 1, 0x12),
        _frame(c, s, t.isn + 1, sisn + 1, 0x10),
    ]
    base = t.isn + 1
    sent: list[bytes] = []
    for i, (o, n) in enumerate(t.runs):
        for k in range(0, n, MSS):
            seg = _frame(c, s, base + o + k, sisn + 1, 0x18, _payload(o + k, MSS))
            frames.append(seg)
            sent.append(_payload(o + k, MSS))
            if i == len(t.runs) // 2 and k == 0:
                frames.append(seg)  # a retransmission: one overlap, same bytes
                sent.append(_payload(o + k, MSS))
        if acks:
            frames.append(_frame(s, c, sisn + 1, base + o + n, 0x10))
    fin = base + t.length
    frames += [
        _frame(c, s, fin, sisn + 1, 0x11),
        _frame(s, c, sisn + 1, fin + 1, 0x11),
        _frame(c, s, fin + 1, sisn + 2, 0x10),
    ]
    flood.write_pcap(path, frames)
    return sent


def _tshark_payload(path: Path) -> bytes:
    """The client's payload bytes as tshark dissects them, frame by frame."""

    args = ["tshark", "-n", "-r", str(path), "-Y", f"tcp.srcport == {CLIENT[1]} && tcp.len > 0"]
    args += ["-T", "fields", "-e", "tcp.payload"]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return b"".join(bytes.fromhex(x.replace(":", "")) for x in text.split())


@pytest.mark.parametrize("acks", [True, False], ids=["acks", "one-way"])
def test_wrapping_lossy_transfer_delivers_every_captured_byte(tmp_path: Path, acks: bool) -> None:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    t = _transfer(27)
    assert t.length > 8 * GIB and t.isn + t.length > 2 * (1 << 32)  # two wraps
    pcap = tmp_path / "seq64.pcap"
    sent = _write(t, pcap, acks)
    # the capture is what the writer meant
    assert _tshark_payload(pcap) == b"".join(sent)
    want = t.captured()
    r = run("tcp_ip", pcap, tmp_path / "out")
    assert r.returncode == 0, r.describe()
    key = flow_key("tcp", CLIENT[0], CLIENT[1], SERVER[0], SERVER[1])
    recs = [rec for k, rec in r.directions() if k == key]
    assert len(recs) == 1, r.records()
    rec = recs[0]
    data = r.data(rec)
    assert len(data) == len(want), (len(data), len(want))
    assert data == want, "the captured bytes are not delivered in order"
    gaps = [(int(o), int(n)) for o, n in rec.get("gaps", [])]
    holes = t.holes()
    assert gaps == holes, f"gaps {gaps[:6]}... != holes {holes[:6]}..."
    assert sum(n for _, n in gaps) == t.length - len(want)
    summary = r.summary()
    assert summary["gap_bytes"] == t.length - len(want)
    tcp = summary["layers"]["tcp"]
    mem = tcp["memory"]
    assert mem["seq_limit_hits"] == 0, mem
    assert mem["seq_bytes_dropped"] == 0, mem
    assert mem["overlaps"]["different"] == 0 and mem["overlaps"]["same"] == 1, mem
