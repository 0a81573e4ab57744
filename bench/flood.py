"""Hostile-traffic generators: captures that try to make a stack fall over without one
malformed byte (issue 14).

    python bench/flood.py --kind KIND [--count N] [--out FILE.pcap] [--seed S] [--mix K]
    python bench/flood.py --kind far-ahead [--conns 20000] [--segs 4] [--ahead 1000000]

Kinds (KINDS below; each yields (timestamp ns, Ethernet frame)):

  syn           N TCP SYNs, each from a distinct source address and port: one half-open
                connection per packet (the instance tables fill, eviction runs).
  frag          N IPv4 fragments of N distinct datagrams (source, id), none ever completed:
                alternately a first fragment (offset 0, more fragments) and a last one at an
                offset up to 65,000 bytes (the datagram's end is far away).
  frag-overlap  overlap storms: datagrams of 8 fragments each whose offsets overlap in every
                relative position (same start, inside, across either end) with differing
                bytes, the last fragment closing the datagram; N fragments in all.
  future-ts     normal TCP connections (handshake, data both ways, FIN) with, in the middle,
                one packet dated a year ahead and, later, one dated a day back: the clock
                guard's case.

  far-ahead     --conns TCP connections, each: SYN, SYN-ACK (window 65535, scale 7: the
                receiver allows 8 MiB), ACK, then --segs one-byte client segments far ahead of
                the next expected byte (the first at ISN + 1 + --ahead, then 4,096 bytes apart,
                downwards), the hole at ISN + 1 never filled and no connection closed: a
                reassembler whose memory follows the sequence offset reserves about --ahead
                bytes per connection, one whose memory follows the data --segs bytes.
                frames(): as many connections of the default shape as --count frames hold.

--mix K interleaves a normal TCP connection's packets with the flood, one every K flood
packets (default 0: the flood alone; future-ts is normal traffic already).  The frames are
written by hand (struct), not with scapy, so that a million of them take seconds.
"""

from __future__ import annotations

import argparse
import itertools
import random
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
STEP = 1000  # ns between frames: 1M frames span one second
MAC = bytes.fromhex("020000000001") + bytes.fromhex("020000000002")
Frames = Iterator[tuple[int, bytes]]


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src: int, dst: int, proto: int, payload: bytes, *, ident: int = 0, frag: int = 0) -> bytes:
    """An Ethernet frame holding an IPv4 packet; frag = flags and offset field (MF = 0x2000)."""
    hdr = struct.pack(
        "!BBHHHBBHII", 0x45, 0, 20 + len(payload), ident, frag, 64, proto, 0, src, dst
    )
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    return MAC + b"\x08\x00" + hdr + payload


def tcp(
    src: int,
    dst: int,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    data: bytes = b"",
    *,
    opts: bytes = b"",
) -> bytes:
    """An Ethernet/IPv4/TCP frame with correct checksums (flags: FIN 1, SYN 2, RST 4, PSH 8,
    ACK 16)."""
    off = (20 + len(opts)) // 4
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, 65535, 0, 0)
    seg += opts + data
    pseudo = struct.pack("!IIBBH", src, dst, 0, 6, len(seg))
    seg = seg[:16] + struct.pack("!H", _csum(pseudo + seg)) + seg[18:]
    return ipv4(src, dst, 6, seg, ident=seq & 0xFFFF)


def addr(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d


SERVER = addr("192.0.2.1")


def connection(rng: random.Random, k: int) -> list[bytes]:
    """A normal TCP connection's frames: handshake, data both ways, FIN exchange."""
    cli, port = addr("198.51.100.1") + k % 200, 1024 + k % 60000
    ci, si = rng.getrandbits(32), rng.getrandbits(32)
    body = bytes(rng.getrandbits(8) for _ in range(256))
    req = b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % k
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 256\r\n\r\n" + body
    c, s = (ci + 1) & 0xFFFFFFFF, (si + 1) & 0xFFFFFFFF
    out = [
        tcp(cli, SERVER, port, 80, ci, 0, 2),
        tcp(SERVER, cli, 80, port, si, c, 18),
        tcp(cli, SERVER, port, 80, c, s, 16),
        tcp(cli, SERVER, port, 80, c, s, 24, req),
    ]
    c = (c + len(req)) & 0xFFFFFFFF
    out += [tcp(SERVER, cli, 80, port, s, c, 24, resp)]
    s = (s + len(resp)) & 0xFFFFFFFF
    out += [
        tcp(cli, SERVER, port, 80, c, s, 17),
        tcp(SERVER, cli, 80, port, s, (c + 1) & 0xFFFFFFFF, 17),
        tcp(cli, SERVER, port, 80, (c + 1) & 0xFFFFFFFF, (s + 1) & 0xFFFFFFFF, 16),
    ]
    return out


def far_ahead(conns: int, segs: int, ahead: int) -> Iterator[bytes]:
    """The frames of the far-ahead flood, in capture order (deterministic)."""
    server = addr("10.255.0.1")
    syn_opts = b"\x02\x04\x05\xb4" + b"\x01\x03\x03\x07"  # MSS 1460, NOP, window scale 7
    for i in range(conns):
        client = addr("10.0.0.0") + (i & 0xFFFFFF) + (0 if i & 0xFF else 1)
        sport = 1024 + (i * 7919) % 64000
        cisn = (i * 2654435761) & 0xFFFFFFFF
        sisn = (i * 40503 + 12345) & 0xFFFFFFFF
        yield tcp(client, server, sport, 80, cisn, 0, 2, opts=syn_opts)
        yield tcp(server, client, 80, sport, sisn, cisn + 1, 18, opts=syn_opts)
        yield tcp(client, server, sport, 80, cisn + 1, sisn + 1, 16)
        for k in range(segs):
            seq = (cisn + 1 + ahead - k * 4096) & 0xFFFFFFFF
            yield tcp(client, server, sport, 80, seq, sisn + 1, 24, bytes([0x41 + k % 26]))


def gen_syn(count: int, rng: random.Random) -> Iterator[bytes]:
    base = addr("10.0.0.0")
    for i in range(count):  # distinct sources: 10.0.0.0/8 holds 16M
        yield tcp(
            base + i % (1 << 24), SERVER, 1024 + rng.randrange(60000), 80, rng.getrandbits(32), 0, 2
        )


def gen_frag(count: int, rng: random.Random) -> Iterator[bytes]:
    base = addr("172.16.0.0")
    for i in range(count):
        src, ident = base + (i >> 16) % (1 << 20), i & 0xFFFF
        payload = bytes(rng.getrandbits(8) for _ in range(16))
        if i % 2 == 0:
            frag = 0x2000  # first fragment: offset 0, more fragments
        else:
            frag = rng.randrange(8, 8125)  # last fragment far out (offset in 8-byte units)
        yield ipv4(src, SERVER, 17, payload, ident=ident, frag=frag)


# (offset, length) in 8-byte units around a first fragment [0, 4): every relative position
OVERLAPS = [(0, 4), (0, 2), (1, 2), (2, 4), (3, 3), (0, 6), (5, 2)]


def gen_frag_overlap(count: int, rng: random.Random) -> Iterator[bytes]:
    base = addr("172.20.0.0")
    for i in range(count):
        d, k = divmod(i, len(OVERLAPS) + 1)
        src, ident = base + d % (1 << 16), d & 0xFFFF
        if k < len(OVERLAPS):
            off, n = OVERLAPS[k]
            data = bytes([rng.getrandbits(8)]) * (8 * n)  # differs from the other copies
            yield ipv4(src, SERVER, 17, data, ident=ident, frag=0x2000 | off)
        else:  # the last fragment: the datagram is 8 * 8 bytes long
            yield ipv4(src, SERVER, 17, b"z" * 8, ident=ident, frag=7)


def _interleave(flood: Iterator[bytes], mix: int, rng: random.Random) -> Frames:
    pending: list[bytes] = []
    k = 0
    t = T0
    for i, frame in enumerate(flood):
        if mix and i % mix == 0:
            if not pending:
                pending = connection(rng, k)
                k += 1
            yield t, pending.pop(0)
            t += STEP
        yield t, frame
        t += STEP


def future_ts(count: int, rng: random.Random) -> Frames:
    """Normal connections; frame count // 2 is dated a year ahead, frame 3 * count // 4 a day
    back (and the capture goes on from there)."""
    t, i, k = T0, 0, 0
    back = 0
    while i < count:
        for frame in connection(rng, k):
            if i == count:
                break
            if i == count // 2:
                yield t + 365 * 86400 * NS, frame
            else:
                if i == 3 * count // 4:
                    back = 86400 * NS
                yield t - back, frame
            t += 10 * NS // 1000  # 10 us
            i += 1
        k += 1


def gen_far_ahead(count: int, rng: random.Random) -> Iterator[bytes]:
    """The far-ahead flood cut to count frames (default shape: 4 segments 1 MB ahead)."""
    del rng  # deterministic
    return itertools.islice(far_ahead(max(1, count // 7), 4, 1_000_000), count)


KINDS: dict[str, Callable[[int, random.Random], Iterator[bytes]]] = {
    "syn": gen_syn,
    "frag": gen_frag,
    "frag-overlap": gen_frag_overlap,
    "far-ahead": gen_far_ahead,
}
TIMED: dict[str, Callable[[int, random.Random], Frames]] = {"future-ts": future_ts}


def frames(kind: str, count: int, *, seed: int = 1, mix: int = 0) -> Frames:
    """The frames of one flood, with their timestamps."""
    rng = random.Random(seed)
    if kind in TIMED:
        return TIMED[kind](count, rng)
    if kind not in KINDS:
        raise ValueError(f"unknown flood kind {kind!r} (kinds: {', '.join([*KINDS, *TIMED])})")
    return _interleave(KINDS[kind](count, rng), mix, rng)


def write_pcap(path: Path, items: Iterable[tuple[int, bytes]] | Iterable[bytes]) -> int:
    """Write a nanosecond pcap (Ethernet); returns the number of frames. Items are (timestamp
    ns, frame), or frames alone (then STEP ns apart from T0)."""
    n = 0
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        for item in items:
            ts, frame = (T0 + n * STEP, item) if isinstance(item, bytes) else item
            f.write(struct.pack("<IIII", ts // NS, ts % NS, len(frame), len(frame)))
            f.write(frame)
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", required=True, choices=[*KINDS, *TIMED])
    ap.add_argument("--count", type=int, default=1_000_000, help="flood packets (default 1M)")
    ap.add_argument("--out", type=Path, default=None, help="output pcap (default: KIND.pcap)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mix", type=int, default=0, help="a normal connection's packet every K")
    ap.add_argument("--conns", type=int, default=20_000, help="far-ahead: connections")
    ap.add_argument("--segs", type=int, default=4, help="far-ahead: one-byte segments each")
    ap.add_argument("--ahead", type=int, default=1_000_000, help="far-ahead: offset past the hole")
    a = ap.parse_args(argv)
    a.out = a.out or Path(f"{a.kind.replace('-', '_')}.pcap")
    if a.kind == "far-ahead":
        if a.conns < 1 or a.segs < 1 or not 4096 * a.segs <= a.ahead < 1 << 30:
            ap.error("need --conns >= 1, --segs >= 1 and 4096 * segs <= --ahead < 2^30")
        flood = far_ahead(a.conns, a.segs, a.ahead)
        n = write_pcap(a.out, _interleave(flood, a.mix, random.Random(a.seed)))
    else:
        n = write_pcap(a.out, frames(a.kind, a.count, seed=a.seed, mix=a.mix))
    print(f"{a.out}: {n} frames ({a.kind})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
