#!/usr/bin/env python3
"""Deterministic benchmark captures: many short HTTP-like TCP connections, interleaved.

    python bench/gen.py [--out bench/captures] [--connections N] [--seed S] [WORKLOAD ...]

writes `<workload>.pcap` for each workload asked for (default: all five) and updates
`MANIFEST.json` in the output directory (default: `captures/` beside this file). The same
arguments always give byte-identical files: everything random comes from `random.Random`
objects seeded from `--seed`, and no clock is read.

Workloads (N connections each, 20,000 by default):

a  each connection: SYN, SYN-ACK (MSS, SACK-permitted, timestamps, window scale, laid out as
   Linux does), ACK, a 100-byte request, a 1,024-byte response in one segment, the server's
   FIN/ACK, the client's ACK of it, the client's FIN/ACK and the server's last ACK (9 packets);
b  the same with 8,192-byte responses in 1,448-byte segments (6 segments; the client ACKs every
   second one, as Linux does: 16 packets);
c  a with 2% of the data segments reordered (the segment is delayed past the next packet its
   sender sent: for the last segment of a response, that is the FIN, which then overtakes the
   data) and 1% retransmitted (an exact copy of the frame emitted 1 to 3 packets of the
   connection later, before its last packet). Every byte still arrives;
d  b likewise;
e  a wrapped in GTP-U: Ethernet / IPv4 10.200.0.1 <-> 10.200.0.2 / UDP 2152 <-> 2152 (checksum
   0) / GTPv1-U G-PDU (TEID per connection and direction) / the frame of a without its
   Ethernet header. Same connections, same schedule, same timestamps as a.

Connections: client 10.0.X.Y (Y in 1..254), port 1024..65535, server 10.1.0.1..4 port 80; every
4-tuple occurs once in the whole capture (no reuse), and the connection parameters (addresses,
ports, initial sequence numbers, timestamp and IP ID bases, payloads) are the same in all five
workloads. Requests and responses are HTTP/1.1 text whose headers name the connection
(`GET /bench/00000012` and `X-Conn: 00000012`).

Schedule: a connection opens by emitting its SYN; every other step emits the next packet of an
open connection chosen at random. A target (redrawn every 4,096 packets, between 65 and 200)
says how many are open: below it, the step opens a new one. So, once the first ones are open
and until the last one opened, 64 to 200 connections are open at a time (the manifest records
what happened). Capture timestamps advance 2 to 5 microseconds per packet.

Frames: Ethernet (fixed MACs), IPv4 (DF, TTL 64, IP ID incrementing per connection and
direction, valid header checksum), TCP with a valid checksum; every segment after the SYN and
SYN-ACK carries NOP, NOP, timestamps. TSval advances by one per packet of the connection (each
side starts at its own random base); TSecr echoes the peer's latest TSval. Reordering moves
frames, never rewrites them, so a delayed segment keeps its older TSval and IP ID.

Output: classic pcap, microsecond timestamps, snaplen 65535, link type Ethernet.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import random
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "1"
DEFAULT_SEED = 4
DEFAULT_CONNECTIONS = 20_000
DEFAULT_OUT = Path(__file__).resolve().parent / "captures"

#: Open connections at a time (once ramped up, until the last connection opened).
OPEN_MIN, OPEN_MAX = 64, 200
RETARGET = 4096  # packets between redraws of the target number of open connections
REORDER_FRACTION = 0.02
RETRANSMIT_FRACTION = 0.01

REQUEST_BYTES = 100
MSS = 1460
SEGMENT = MSS - 12  # payload per full segment with the timestamps option
WSCALE = 7
T0 = 1_700_000_000  # capture start, seconds since the epoch

SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08
C2S, S2C = 0, 1

MAC_CLIENT = bytes.fromhex("020000000001")
MAC_SERVER = bytes.fromhex("020000000002")
ETH = (MAC_SERVER + MAC_CLIENT + b"\x08\x00", MAC_CLIENT + MAC_SERVER + b"\x08\x00")  # by dir
SERVERS = tuple(bytes([10, 1, 0, k]) for k in range(1, 5))
SERVER_PORT = 80

GTP_PORT = 2152
GTP_ENB, GTP_SGW = bytes([10, 200, 0, 1]), bytes([10, 200, 0, 2])
MAC_ENB = bytes.fromhex("020000000101")
MAC_SGW = bytes.fromhex("020000000102")
GTP_ETH = (MAC_SGW + MAC_ENB + b"\x08\x00", MAC_ENB + MAC_SGW + b"\x08\x00")
GTP_ADDRS = ((GTP_ENB, GTP_SGW), (GTP_SGW, GTP_ENB))
TEID_UPLINK, TEID_DOWNLINK = 0x10000000, 0x20000000  # + connection number

PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)

_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
_REC = struct.Struct("<IIII")
_TS = struct.Struct("!II")
_OUTER = struct.Struct("!BBHHHBBH4s4sHHHHBBHI")  # IPv4, UDP, GTPv1-U


@dataclass(frozen=True)
class Workload:
    name: str
    response: int  # response bytes per connection
    perturb: bool  # reorder and retransmit data segments
    gtp: bool  # wrap every frame in GTP-U
    schedule: str  # workloads with the same schedule name and shape share their schedule
    description: str

    @property
    def segments(self) -> int:
        return -(-self.response // SEGMENT)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("a", 1024, False, False, "a", "1,024-byte responses in one segment"),
        Workload("b", 8192, False, False, "b", "8,192-byte responses in 1,448-byte segments"),
        Workload("c", 1024, True, False, "c", "a, 2% of data segments reordered, 1% resent"),
        Workload("d", 8192, True, False, "d", "b, 2% of data segments reordered, 1% resent"),
        Workload("e", 1024, False, True, "a", "a in GTP-U (ETH/IPv4/UDP 2152/GTPv1-U/IPv4/TCP)"),
    )
}


# ---------------------------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """What one connection is, the same in every workload."""

    client: bytes
    cport: int
    server: bytes
    c_isn: int
    s_isn: int
    c_ts: int
    s_ts: int
    c_ipid: int
    s_ipid: int


def connection_params(n: int, seed: int) -> list[Params]:
    rng = random.Random(f"rubikgen-bench:{seed}:connections")
    seen: set[tuple[bytes, int, bytes]] = set()
    out = []
    while len(out) < n:
        client = bytes([10, 0, rng.randrange(256), rng.randint(1, 254)])
        cport = rng.randint(1024, 65535)
        server = SERVERS[rng.randrange(len(SERVERS))]
        if (client, cport, server) in seen:
            continue
        seen.add((client, cport, server))
        r = rng.getrandbits
        out.append(Params(client, cport, server, r(32), r(32), r(32), r(32), r(16), r(16)))
    return out


def request(i: int, server: bytes) -> bytes:
    """The REQUEST_BYTES-byte request of connection i."""
    head = (
        f"GET /bench/{i:08d} HTTP/1.1\r\nHost: {'.'.join(map(str, server))}\r\n"
        "User-Agent: rubikgen-bench\r\nAccept: */*\r\n"
    )
    pad = REQUEST_BYTES - len(head) - len("X-Pad: \r\n\r\n")
    if pad < 0:
        raise ValueError(f"connection number {i} too long for a {REQUEST_BYTES}-byte request")
    return (head + "X-Pad: " + "x" * pad + "\r\n\r\n").encode()


_RESPONSE_HEAD = (
    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    "Content-Length: {length}\r\nConnection: close\r\nX-Conn: {i:08d}\r\n\r\n"
)


@functools.cache
def _body(size: int) -> bytes:
    rng = random.Random(f"rubikgen-bench:body:{size}")
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789\n"
    return bytes(rng.choices(alphabet, k=size))


def response(i: int, size: int) -> bytes:
    """The `size`-byte response of connection i: HTTP headers, then a fixed pseudo-random body
    (Content-Length zero-padded where that is the only way to hit `size` exactly)."""
    for width in range(1, 10):
        length = size - len(_RESPONSE_HEAD.format(length="0" * width, i=i))
        if 0 <= length and len(str(length)) <= width:
            head = _RESPONSE_HEAD.format(length=f"{length:0{width}d}", i=i)
            return head.encode() + _body(size)[:length]
    raise ValueError(f"a response of {size} bytes is too small for its headers")


def _psum(data: bytes) -> int:
    """The 16-bit ones' complement sum of `data` modulo 0xFFFF (2**16 = 1 modulo 0xFFFF, so a
    big-endian integer is congruent to the sum of its 16-bit words)."""
    if len(data) & 1:
        data += b"\0"
    return int.from_bytes(data, "big") % 0xFFFF


def _csum(total: int) -> int:
    """Checksum field for a ones' complement sum congruent to `total` modulo 0xFFFF."""
    s = total % 0xFFFF
    return 0xFFFF - s if s else 0  # a sum of 0 modulo 0xFFFF is 0xFFFF (data is never all 0)


def _syn_opts(tsval: int, tsecr: int) -> bytes:
    # Linux: MSS, SACK-permitted, timestamps, NOP, window scale (20 bytes)
    mss = b"\x02\x04" + MSS.to_bytes(2, "big")
    return mss + b"\x04\x02\x08\x0a" + _TS.pack(tsval, tsecr) + b"\x01\x03\x03" + bytes([WSCALE])


def _ts_opts(tsval: int, tsecr: int) -> bytes:
    return b"\x01\x01\x08\x0a" + _TS.pack(tsval, tsecr)


@dataclass
class _Pkt:
    dir: int
    flags: int
    seq: int
    ack: int
    length: int = 0  # payload bytes
    data: int = -1  # data segment number in the connection (0 request, k + 1 response k)


def script(size: int) -> list[_Pkt]:
    """A connection in the order its packets pass the capture point, unperturbed, with relative
    sequence numbers (ISN 0 on both sides) and without payload contents."""
    seg = [min(SEGMENT, size - off) for off in range(0, size, SEGMENT)]
    c1, s1 = 1, 1
    req_end = c1 + REQUEST_BYTES
    out = [
        _Pkt(C2S, SYN, 0, 0),
        _Pkt(S2C, SYN | ACK, 0, c1),
        _Pkt(C2S, ACK, c1, s1),
        _Pkt(C2S, PSH | ACK, c1, s1, REQUEST_BYTES, 0),
    ]
    owed = None  # the client ACKs every second segment, after the next one passed
    off = s1
    for k, n in enumerate(seg):
        last = k == len(seg) - 1
        out.append(_Pkt(S2C, ACK | (PSH if last else 0), off, req_end, n, k + 1))
        off += n
        if owed is not None:
            out.append(_Pkt(C2S, ACK, req_end, owed))
            owed = None
        elif k % 2 == 1 and not last:
            owed = off
    s_end = off
    out += [
        _Pkt(S2C, FIN | ACK, s_end, req_end),
        _Pkt(C2S, ACK, req_end, s_end + 1),
        _Pkt(C2S, FIN | ACK, req_end, s_end + 1),
        _Pkt(S2C, ACK, s_end + 1, req_end + 1),
    ]
    return out


def _seq_le(a: int, b: int) -> bool:
    return (b - a) & 0xFFFFFFFF < 0x80000000


@dataclass
class _Conn:
    number: int
    frames: list[tuple[int, bytes]]  # (direction, Ethernet frame) in emission order
    pos: int = 0


@dataclass
class Perturbation:
    """Which data segments of which connections are reordered or retransmitted."""

    reorder: dict[int, list[int]] = field(default_factory=dict)  # conn -> response segments k
    retransmit: dict[int, list[int]] = field(default_factory=dict)  # conn -> data numbers
    reordered: int = 0
    retransmitted: int = 0
    fins_overtaking: int = 0


def select_perturbation(n: int, segments: int, seed: int, name: str) -> Perturbation:
    """Exactly round(2%) of the data segments reordered (at least one, and at least one of them
    the last segment of a response, so that its FIN overtakes it) and round(1%) retransmitted
    (at least one), disjoint. Only response segments are reordered: the client sends nothing
    between its request and the response, so a request has nothing to be overtaken by."""
    rng = random.Random(f"rubikgen-bench:{seed}:perturb:{name}")
    data = n * (1 + segments)
    n_re = max(1, round(REORDER_FRACTION * data))
    n_rt = max(1, round(RETRANSMIT_FRACTION * data))
    cands = [(i, k) for i in range(n) for k in range(segments)]
    rng.shuffle(cands)
    first_last = next(c for c in cands if c[1] == segments - 1)
    chosen: set[tuple[int, int]] = {first_last}
    for i, k in cands:
        if len(chosen) >= n_re:
            break
        # never two adjacent segments of one response: each moves past a segment in order
        if (i, k) in chosen or (i, k - 1) in chosen or (i, k + 1) in chosen:
            continue
        chosen.add((i, k))
    if len(chosen) < n_re:
        raise ValueError("too few connections to reorder that many segments")
    taken = {(i, k + 1) for i, k in chosen}
    pool = [(i, j) for i in range(n) for j in range(1 + segments) if (i, j) not in taken]
    dups = rng.sample(pool, n_rt)
    p = Perturbation(reordered=len(chosen), retransmitted=len(dups))
    p.fins_overtaking = sum(1 for _, k in chosen if k == segments - 1)
    for i, k in sorted(chosen):
        p.reorder.setdefault(i, []).append(k)
    for i, j in sorted(dups):
        p.retransmit.setdefault(i, []).append(j)
    return p


def build_connection(
    i: int,
    prm: Params,
    tpl: list[_Pkt],
    size: int,
    pert: Perturbation | None,
    rng: random.Random,
) -> _Conn:
    """Every frame of connection i, in the order they pass the capture point."""
    req = request(i, prm.server)
    resp = response(i, size)
    addrs = ((prm.client, prm.server), (prm.server, prm.client))
    ports = ((prm.cport, SERVER_PORT), (SERVER_PORT, prm.cport))
    isn = (prm.c_isn, prm.s_isn)
    ts = (prm.c_ts, prm.s_ts)
    ipid = [prm.c_ipid, prm.s_ipid]
    asum = _psum(prm.client + prm.server)
    last_ts = [0, 0]  # latest TSval sent per direction
    frames: list[tuple[int, bytes]] = []
    meta: list[_Pkt] = []
    off = 0
    for n, p in enumerate(tpl):
        d = p.dir
        tsval = (ts[d] + n) & 0xFFFFFFFF
        tsecr = last_ts[1 - d]
        last_ts[d] = tsval
        if p.flags & SYN:
            opts = _syn_opts(tsval, tsecr)
            win = 64240 if d == C2S else 65160
        else:
            opts = _ts_opts(tsval, tsecr)
            win = 502 if d == C2S else 509
        if p.data == 0:
            payload = req
        elif p.data > 0:
            payload = resp[off : off + p.length]
            off += len(payload)
        else:
            payload = b""
        seq = (isn[d] + p.seq) & 0xFFFFFFFF
        ack = (isn[1 - d] + p.ack) & 0xFFFFFFFF if p.flags & ACK else 0
        sport, dport = ports[d]
        hlen = 20 + len(opts)
        tcp_len = hlen + len(payload)
        hdr = _TCP.pack(sport, dport, seq, ack, hlen << 2, p.flags, win, 0, 0) + opts
        c = _csum(asum + 6 + tcp_len + _psum(hdr) + _psum(payload))
        hdr = _TCP.pack(sport, dport, seq, ack, hlen << 2, p.flags, win, c, 0) + opts
        total = 20 + tcp_len
        src, dst = addrs[d]
        ident = ipid[d]
        ipid[d] = (ident + 1) & 0xFFFF
        ic = _csum(0x4500 + total + ident + 0x4000 + 0x4006 + asum)
        iph = _IP.pack(0x45, 0, total, ident, 0x4000, 64, 6, ic, src, dst)
        frames.append((d, ETH[d] + iph + hdr + payload))
        meta.append(p)
    if pert is not None:
        for k in pert.reorder.get(i, ()):
            _reorder(frames, meta, k + 1)
        for j in pert.retransmit.get(i, ()):
            at = next(x for x, p in enumerate(meta) if p.data == j)
            to = rng.randint(at + 1, min(at + 3, len(frames) - 1))
            frames.insert(to, frames[at])
            meta.insert(to, meta[at])
    return _Conn(i, frames)


def _reorder(frames: list[tuple[int, bytes]], meta: list[_Pkt], data: int) -> None:
    """Delay data segment `data` past the next packet of the same direction."""
    at = next(x for x, p in enumerate(meta) if p.data == data)
    seg = meta[at]
    to = next(x for x in range(at + 1, len(meta)) if meta[x].dir == seg.dir)
    for x in range(at + 1, to):  # peer packets passed over must not acknowledge the segment
        if meta[x].flags & ACK and not _seq_le(meta[x].ack, seg.seq):
            raise AssertionError("reordering would acknowledge data before it passed")
    frames.insert(to, frames.pop(at))
    meta.insert(to, meta.pop(at))


# ---------------------------------------------------------------------------------------------
# Schedule and output
# ---------------------------------------------------------------------------------------------


def _gtp_wrap(d: int, frame: bytes, ident: int, teid: int) -> bytes:
    inner = len(frame) - 14
    total = 20 + 8 + 8 + inner
    src, dst = GTP_ADDRS[d]
    ic = _csum(0x4500 + total + ident + 0x4000 + 0x4011 + _GTP_ASUM)
    outer = _OUTER.pack(
        0x45, 0, total, ident, 0x4000, 64, 17, ic, src, dst,
        GTP_PORT, GTP_PORT, 16 + inner, 0,
        0x30, 0xFF, inner, teid,
    )  # fmt: skip
    return GTP_ETH[d] + outer + frame[14:]


_GTP_ASUM = _psum(GTP_ENB + GTP_SGW)


def generate(
    wl: Workload, n: int, seed: int, out: Path, params: list[Params] | None = None
) -> dict[str, Any]:
    """Write `out/<name>.pcap`; return its manifest entry."""
    params = params if params is not None else connection_params(n, seed)
    tpl = script(wl.response)
    pert = select_perturbation(n, wl.segments, seed, wl.name) if wl.perturb else None
    sched = random.Random(f"rubikgen-bench:{seed}:schedule:{wl.schedule}")
    prng = random.Random(f"rubikgen-bench:{seed}:retransmit:{wl.name}")
    gtp_ids = [4242, 2424]
    path = out / f"{wl.name}.pcap"
    sha = hashlib.sha256()
    packets = wire = 0
    buf = bytearray(PCAP_HEADER)
    active: list[_Conn] = []
    opened = 0
    since = 0
    target = sched.randint(OPEN_MIN + 1, OPEN_MAX)
    t = T0 * 1_000_000
    max_open = 0
    min_steady: int | None = None
    samples: dict[str, list[list[Any]]] = {
        "fin_overtaking": [],
        "reordered": [],
        "retransmitted": [],
    }
    rec = _REC.pack
    with open(path, "wb") as f:
        while True:
            if opened < n and len(active) < target:
                prm = params[opened]
                conn = build_connection(opened, prm, tpl, wl.response, pert, prng)
                if pert is not None:
                    _sample(samples, opened, prm, pert, wl.segments)
                opened += 1
                active.append(conn)
                j = len(active) - 1
            elif active:
                j = sched.randrange(len(active))
                conn = active[j]
            else:
                break
            d, frame = conn.frames[conn.pos]
            conn.pos += 1
            if conn.pos == len(conn.frames):
                active[j] = active[-1]
                active.pop()
            if wl.gtp:
                frame = _gtp_wrap(d, frame, gtp_ids[d], _teid(conn, d))
                gtp_ids[d] = (gtp_ids[d] + 1) & 0xFFFF
            t += 2 + sched.getrandbits(2)
            size = len(frame)
            buf += rec(t // 1_000_000, t % 1_000_000, size, size)
            buf += frame
            packets += 1
            wire += size
            live = len(active)
            max_open = max(max_open, live)
            if opened < n and (min_steady is not None or live >= OPEN_MIN):
                min_steady = live if min_steady is None else min(min_steady, live)
            since += 1
            if since == RETARGET:
                since = 0
                target = sched.randint(OPEN_MIN + 1, OPEN_MAX)
            if len(buf) >= 1 << 22:
                f.write(buf)
                sha.update(buf)
                buf.clear()
        f.write(buf)
        sha.update(buf)
    data_segments = n * (1 + wl.segments)
    dups = pert.retransmitted if pert else 0
    dup_bytes = _dup_bytes(pert, wl) if pert else (0, 0)
    entry: dict[str, Any] = {
        "file": path.name,
        "description": wl.description,
        "generator_version": VERSION,
        "seed": seed,
        "sha256": sha.hexdigest(),
        "pcap": {"link_type": "ethernet", "timestamps": "us", "snaplen": 65535},
        "packets": packets,
        "bytes": wire,
        "file_bytes": path.stat().st_size,
        "duration_us": t - T0 * 1_000_000,
        "connections": n,
        "packets_per_connection": len(tpl),  # before retransmissions
        "request_bytes": REQUEST_BYTES,
        "response_bytes": wl.response,
        "response_segments": wl.segments,
        "segment_bytes": SEGMENT,
        "payload_bytes": {"c2s": n * REQUEST_BYTES, "s2c": n * wl.response},
        "payload_bytes_on_wire": {
            "c2s": n * REQUEST_BYTES + dup_bytes[0],
            "s2c": n * wl.response + dup_bytes[1],
        },
        "data_segments": data_segments,
        "data_segments_reordered": pert.reordered if pert else 0,
        "data_segments_retransmitted": dups,
        "fins_overtaking_data": pert.fins_overtaking if pert else 0,
        "open_connections": {
            "max": max_open,
            "min_while_opening": min_steady,
            "target_range": [OPEN_MIN + 1, OPEN_MAX],
        },
    }
    if pert:
        entry["reorder_fraction"] = REORDER_FRACTION
        entry["retransmit_fraction"] = RETRANSMIT_FRACTION
        entry["examples"] = samples
    if wl.gtp:
        entry["gtp"] = {
            "outer": "10.200.0.1:2152 (client side) <-> 10.200.0.2:2152, UDP checksum 0",
            "teid_uplink": f"{TEID_UPLINK:#010x} + connection number",
            "teid_downlink": f"{TEID_DOWNLINK:#010x} + connection number",
        }
    return entry


def _teid(conn: _Conn, d: int) -> int:
    return (TEID_UPLINK if d == C2S else TEID_DOWNLINK) + conn.number


def _dup_bytes(pert: Perturbation, wl: Workload) -> tuple[int, int]:
    c2s = s2c = 0
    for js in pert.retransmit.values():
        for j in js:
            if j == 0:
                c2s += REQUEST_BYTES
            else:
                s2c += min(SEGMENT, wl.response - (j - 1) * SEGMENT)
    return c2s, s2c


def _sample(
    samples: dict[str, list[list[Any]]], i: int, prm: Params, pert: Perturbation, segments: int
) -> None:
    """Up to five example connections of each kind (4-tuple as client, port, server, port)."""
    who = [".".join(map(str, prm.client)), prm.cport, ".".join(map(str, prm.server)), SERVER_PORT]
    ks = pert.reorder.get(i, [])
    kinds = (
        ("fin_overtaking", segments - 1 in ks),
        ("reordered", any(k != segments - 1 for k in ks)),
        ("retransmitted", bool(pert.retransmit.get(i))),
    )
    for kind, yes in kinds:
        if yes and len(samples[kind]) < 5:
            samples[kind].append([i, *who])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="a b c d e (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    ap.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = ap.parse_args(argv)
    names = args.workloads or sorted(WORKLOADS)
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {' '.join(bad)}; choose from {' '.join(sorted(WORKLOADS))}")
    if args.connections < 1:
        ap.error("--connections must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "MANIFEST.json"
    manifest: dict[str, Any] = {"generator": "bench/gen.py", "workloads": {}}
    if manifest_path.is_file():
        try:
            old = json.loads(manifest_path.read_text())
            manifest["workloads"] = {
                k: v
                for k, v in old.get("workloads", {}).items()
                if k in WORKLOADS and (args.out / f"{k}.pcap").is_file()
            }
        except (OSError, ValueError):
            pass
    params = connection_params(args.connections, args.seed)
    for name in dict.fromkeys(names):
        started = time.perf_counter()
        entry = generate(WORKLOADS[name], args.connections, args.seed, args.out, params)
        took = time.perf_counter() - started
        manifest["workloads"][name] = entry
        print(
            f"{entry['file']}: {entry['packets']} packets, {entry['file_bytes']} bytes,"
            f" {entry['connections']} connections, {took:.2f} s",
            file=sys.stderr,
        )
    manifest["workloads"] = dict(sorted(manifest["workloads"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
