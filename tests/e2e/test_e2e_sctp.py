"""End to end: the sctp stack's user data, per association, direction and stream, against tshark.

Every SCTP capture of ../shared/traces (MANIFEST.tsv rows whose `stacks_covered` path has an
`sctp` layer, so new captures are picked up) and a hand-made capture (below) run through the
stock sctp stack with the `streams` NF, which writes one record per association, direction and
stream id (`sid`). The reference is written here from tshark's per-chunk output
(`-T json -x`: each DATA chunk's TSN, SID, SSN, U/B/E flags and, from the frame bytes at the
chunk's position, its user data), delivered as a receiver does (`in_order`): each TSN once (the
first copy captured), whole unordered messages on arrival, everything else once the TSNs before
it are in, and the ordered chunks of each stream in SSN order. The concatenated user data per
(sender, receiver, sid) must be equal, byte for byte. Whole user messages (the `sctp_message` handler, `events` NF) are
checked against the same chunks: every E fragment closes a message made of the fragments since
its B fragment.

The hand-made capture (scapy) holds an IPv4 association with a handshake, several streams
interleaved, bundled DATA chunks (lengths not multiple of 4: padding), TSNs out of order, a
retransmitted TSN (alone and bundled), a message fragmented over three packets, an unordered
chunk arriving while an earlier ordered chunk of its stream waits for a missing TSN (the
unordered one is delivered first), SACKs and a shutdown; and an IPv6 association joined
mid-stream. The test first checks that tshark sees exactly the chunks the case sent, so the
capture and the oracle are verified before the stack runs. A -O0 build and an -O2 ASan/UBSan
build run; random chunks (`garbage`) must leave no sanitizer report and give the same events and
streams at both levels; a copy of the stack with a 64-byte max_bytes shows what happens to a
longer message.
"""

from __future__ import annotations

import csv
import hashlib
import ipaddress
import json
import os
import random
import shutil
import struct
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.layers.sctp import (
    SCTP,
    SCTPChunkCookieAck,
    SCTPChunkCookieEcho,
    SCTPChunkData,
    SCTPChunkInit,
    SCTPChunkInitAck,
    SCTPChunkSACK,
    SCTPChunkShutdown,
    SCTPChunkShutdownAck,
    SCTPChunkShutdownComplete,
)
from scapy.packet import Packet, Raw
from scapy.utils import wrpcap
from support import REPO_ROOT

from rubikgen.toolchain.build import build as build_stack

REPO = REPO_ROOT
TRACES = REPO.parent / "shared" / "traces"
STACK = REPO / "specs" / "stacks" / "sctp.yaml"
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")

#: (src, sport, dst, dport, sid): one direction of one SCTP stream
Key = tuple[str, int, str, int, int]


def sctp_captures() -> list[Path]:
    """The captures MANIFEST.tsv lists with an sctp layer, present on disk."""
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    out = []
    with manifest.open(newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            paths = (row.get("stacks_covered") or "").split(";")
            if any("sctp" in p.split(">") for p in paths) and (TRACES / row["file"]).is_file():
                out.append(TRACES / row["file"])
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# The oracle: tshark's DATA chunks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    src: str
    sport: int
    dst: str
    dport: int
    tsn: int
    sid: int
    ssn: int
    unordered: bool
    first: bool
    last: bool
    data: bytes


def _dicts_with(node: Any, key: str) -> list[dict[str, Any]]:
    """Every dict under node (in document order) that has key."""
    out: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if key in node:
            out.append(node)
        for v in node.values():
            out += _dicts_with(v, key)
    elif isinstance(node, list):
        for v in node:
            out += _dicts_with(v, key)
    return out


def _one(v: Any) -> Any:
    """A field's value (the first, if repeated)."""
    return v[0] if isinstance(v, list) else v


def _raw(v: Any) -> list[Any]:
    """A field's `-x` raw entry [hex, position, length, bitmask, type] (the first, if repeated)."""
    return v[0] if isinstance(v[0], list) else v


def tshark_chunks(pcap: Path) -> list[Chunk]:
    """Every DATA chunk tshark dissects, in capture order."""
    with tempfile.TemporaryDirectory(prefix="rubikgen-tshark-") as conf:
        env = dict(os.environ, WIRESHARK_CONFIG_DIR=conf, LC_ALL="C")
        args = ["tshark", "-n", "-r", str(pcap), "-o", "sctp.relative_tsns:FALSE"]
        args += ["-T", "json", "-x", "--no-duplicate-keys", "-Y", "sctp"]
        proc = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    out: list[Chunk] = []
    for pkt in json.loads(proc.stdout or "[]"):
        layers = pkt["_source"]["layers"]
        frame = bytes.fromhex(_raw(layers["frame_raw"])[0])
        l3 = layers.get("ipv6") or layers.get("ip")
        l3 = l3[-1] if isinstance(l3, list) else l3
        pre = "ipv6" if "ipv6" in layers else "ip"
        src, dst = _one(l3[f"{pre}.src"]), _one(l3[f"{pre}.dst"])
        sctp = layers["sctp"]
        head = sctp[0] if isinstance(sctp, list) else sctp
        sport, dport = int(_one(head["sctp.srcport"])), int(_one(head["sctp.dstport"]))
        for c in _dicts_with(sctp, "sctp.data_sid"):
            flags = c["sctp.chunk_flags_tree"]
            length = int(_one(c["sctp.chunk_length"]))
            pos = _raw(c["sctp.data_payload_proto_id_raw"])[1] + 4  # user data after the PPID
            data = frame[pos : pos + length - 16]
            assert len(data) == length - 16, f"{pcap.name}: chunk outside the frame bytes"
            out.append(
                Chunk(
                    src,
                    sport,
                    dst,
                    dport,
                    int(_one(c["sctp.data_tsn_raw"])),
                    int(_one(c["sctp.data_sid"]), 16),
                    int(_one(c["sctp.data_ssn"])),
                    _one(flags["sctp.data_u_bit"]) == "1",
                    _one(flags["sctp.data_b_bit"]) == "1",
                    _one(flags["sctp.data_e_bit"]) == "1",
                    data,
                )  # fmt: skip
            )
    return out


def _serial(x: int, base: int, bits: int) -> int:
    """x relative to base in serial-number arithmetic (RFC 1982), as a signed number."""
    r = (x - base) % (1 << bits)
    return r - (1 << bits) if r >= 1 << (bits - 1) else r


def in_order(chunks: list[Chunk]) -> dict[Key, list[Chunk]]:
    """Per direction and stream, the chunks a receiver delivers, in order. Each TSN counts once
    (its first copy). A whole unordered message (U, B and E) is delivered when it arrives; any
    other chunk once every TSN of its direction before it arrived (from the direction's first
    TSN seen: the sender orders fragments and a stream's ordered messages by TSN); a TSN the
    capture never shows was lost by the capture, not by the receiver, and counts as arrived once
    a later one did. The ordered
    chunks of a stream then take their places in SSN order (ties: TSN, the fragments of one
    message), which is the same order for a sender that numbers SSNs as RFC 9260 says."""
    seen: set[tuple[str, int, str, int, int]] = set()
    nxt: dict[tuple[str, int, str, int], int] = {}  # per direction: the next TSN to deliver
    pending: dict[tuple[str, int, str, int], dict[int, Chunk]] = defaultdict(dict)
    got: dict[tuple[str, int, str, int], set[int]] = defaultdict(set)
    streams: dict[Key, list[Chunk]] = defaultdict(list)
    every: dict[tuple[str, int, str, int], set[int]] = defaultdict(set)
    for c in chunks:
        every[(c.src, c.sport, c.dst, c.dport)].add(c.tsn)
    for c in chunks:
        d = (c.src, c.sport, c.dst, c.dport)
        if (*d, c.tsn) in seen:
            continue
        seen.add((*d, c.tsn))
        nxt.setdefault(d, c.tsn)
        got[d].add(c.tsn)
        if c.unordered and c.first and c.last:
            streams[(*d, c.sid)].append(c)
        else:
            pending[d][c.tsn] = c
        while nxt[d] in got[d] or (nxt[d] not in every[d] and _serial(c.tsn, nxt[d], 32) > 0):
            p = pending[d].pop(nxt[d], None)
            if p is not None:
                streams[(*d, p.sid)].append(p)
            nxt[d] = (nxt[d] + 1) % (1 << 32)
    out: dict[Key, list[Chunk]] = {}
    for key, cs in streams.items():
        slots = [k for k, c in enumerate(cs) if not (c.unordered and c.first and c.last)]
        ordered = [cs[k] for k in slots]
        if ordered:
            s0, t0 = ordered[0].ssn, ordered[0].tsn
            ordered.sort(key=lambda c: (_serial(c.ssn, s0, 16), _serial(c.tsn, t0, 32)))
        merged = list(cs)
        for k, c in zip(slots, ordered, strict=True):
            merged[k] = c
        out[key] = merged
    return out


def expected_streams(chunks: list[Chunk]) -> dict[Key, bytes]:
    return {k: b"".join(c.data for c in cs) for k, cs in in_order(chunks).items()}


def expected_messages(chunks: list[Chunk]) -> dict[Key, list[bytes]]:
    """Per direction and stream, the whole messages: each E fragment closes the fragments since
    the B fragment before it (in delivery order, which keeps a message's fragments together)."""
    out: dict[Key, list[bytes]] = {}
    for key, cs in in_order(chunks).items():
        msgs: list[bytes] = []
        cur: list[bytes] | None = None
        for c in cs:
            if c.first:
                cur = []
            if cur is not None:
                cur.append(c.data)
            if c.last and cur is not None:
                msgs.append(b"".join(cur))
                cur = None
        out[key] = msgs
    return out


# ---------------------------------------------------------------------------------------------
# The stack
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def binaries() -> dict[bool, Path]:
    """The stack built once per module: -O0 plain (False) and -O2 with ASan/UBSan (True)."""
    return {
        san: build_stack(
            STACK,
            REPO / "build" / ("sctp-e2e-asan" if san else "sctp-e2e-O0"),
            opt_level=2 if san else 0,
            sanitize=san,
            quiet=True,
        ).binary
        for san in (False, True)
    }


def run(binary: Path, pcap: Path, out: Path, nf: str) -> None:
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]


def delivered(out: Path) -> dict[Key, bytes]:
    """flows.jsonl's sctp_user records: bytes per (sender, receiver, sid), instances in uid order."""
    recs = [json.loads(line) for line in (out / "flows.jsonl").read_text().splitlines()]
    got: dict[Key, bytes] = defaultdict(bytes)
    for r in sorted(recs, key=lambda r: r["uid"]):
        if r["proto"] != "sctp_user" or r["sid"] is None:
            assert r["bytes"] == 0, r
            continue
        data = (out / r["file"]).read_bytes() if r["file"] else b""
        assert len(data) == r["bytes"] and hashlib.sha256(data).hexdigest() == r["sha256"], r
        got[(r["src"], r["sport"], r["dst"], r["dport"], r["sid"])] += data
    return dict(got)


def compare(pcap: Path, chunks: list[Chunk], got: dict[Key, bytes]) -> int:
    want = expected_streams(chunks)
    assert sorted(got) == sorted(want), (
        f"{pcap.name}: streams differ: {sorted(got)} vs {sorted(want)}"
    )
    for k, w in want.items():
        g = got[k]
        if g != w:
            at = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), min(len(g), len(w)))
            raise AssertionError(
                f"{pcap.name} {k}: {len(g)} bytes vs tshark's {len(w)}, first difference at {at}"
            )
    return sum(len(w) for w in want.values())


# ---------------------------------------------------------------------------------------------
# The hand-made capture
# ---------------------------------------------------------------------------------------------

C4, S4 = "10.1.0.1", "10.1.0.2"
C6, S6 = "2001:db8::1", "2001:db8::2"
MAC = "02:00:00:00:00:01"


def _payload(tag: str, n: int) -> bytes:
    return (tag.encode() * (n // len(tag) + 1))[:n]


def handmade(path: Path) -> list[tuple[str, str, int, int, int, bytes]]:
    """Write the capture; return what each stream must deliver, from the case itself:
    (src, dst, sport, dport, sid, bytes)."""
    pkts: list[Packet] = []

    def v4(src: str, dst: str, sport: int, dport: int, tag: int, *chunks: Packet) -> None:
        p = SCTP(sport=sport, dport=dport, tag=tag)
        for c in chunks:
            p = p / c
        pkts.append(Ether(src=MAC, dst=MAC) / IP(src=src, dst=dst) / p)

    def v6(src: str, dst: str, sport: int, dport: int, tag: int, *chunks: Packet) -> None:
        p = SCTP(sport=sport, dport=dport, tag=tag)
        for c in chunks:
            p = p / c
        pkts.append(Ether(src=MAC, dst=MAC) / IPv6(src=src, dst=dst) / p)

    def data(
        tsn: int, sid: int, ssn: int, body: bytes, *, b: int = 1, e: int = 1, u: int = 0
    ) -> Packet:
        return SCTPChunkData(tsn=tsn % (1 << 32), stream_id=sid, stream_seq=ssn, proto_id=0, data=body,
                             beginning=b, ending=e, unordered=u)  # fmt: skip

    cs, sc = (C4, S4, 40000, 5060), (S4, C4, 5060, 40000)
    ctag, stag = 0x11111111, 0x22222222
    ct, st = 1000, 0xFFFFFFFE  # the server's TSNs wrap
    v4(
        *cs,
        0,
        SCTPChunkInit(init_tag=ctag, a_rwnd=65535, n_out_streams=4, n_in_streams=4, init_tsn=ct),
    )
    v4(
        *sc,
        ctag,
        SCTPChunkInitAck(init_tag=stag, a_rwnd=65535, n_out_streams=4, n_in_streams=4, init_tsn=st),
    )
    v4(*cs, stag, SCTPChunkCookieEcho(cookie=b"cookie"))
    v4(*sc, ctag, SCTPChunkCookieAck())
    m = {k: _payload(k, n) for k, n in [("a0", 13), ("b1", 30), ("c2", 7), ("d0", 21), ("e1", 5),
                                          ("f2", 41), ("g0", 9), ("u1", 11), ("h1", 17), ("x1", 23)]}  # fmt: skip
    frag = [_payload("F1", 40), _payload("F2", 33), _payload("F3", 6)]
    # client: streams 0, 1, 2 interleaved; bundles; TSN 1003 before 1002; 1001 retransmitted
    v4(*cs, stag, data(ct, 0, 0, m["a0"]), data(ct + 1, 1, 0, m["b1"]))
    v4(*cs, stag, data(ct + 3, 0, 1, m["d0"]), data(ct + 4, 1, 1, m["e1"]))
    v4(*sc, ctag, SCTPChunkSACK(cumul_tsn_ack=ct + 1, a_rwnd=65535))
    v4(*cs, stag, data(ct + 2, 2, 0, m["c2"]))
    v4(*cs, stag, data(ct + 1, 1, 0, m["b1"]))  # retransmission: delivered once
    v4(*cs, stag, data(ct + 1, 1, 0, m["b1"]), data(ct + 5, 2, 1, m["f2"]))  # again, bundled
    # TSN ct + 6 is late: the ordered ct + 7 on stream 1 waits for it, the unordered ct + 8 on
    # stream 1 does not (it is delivered before ct + 7)
    v4(*cs, stag, data(ct + 7, 1, 2, m["x1"]))
    v4(*cs, stag, data(ct + 8, 1, 0, m["u1"], u=1))
    v4(*cs, stag, data(ct + 6, 0, 2, m["g0"]))
    # a message fragmented over three packets on stream 1, the middle one late
    v4(*cs, stag, data(ct + 9, 1, 3, frag[0], e=0))
    v4(*cs, stag, data(ct + 11, 1, 3, frag[2], b=0))
    v4(*cs, stag, data(ct + 10, 1, 3, frag[1], b=0, e=0))
    v4(*cs, stag, data(ct + 12, 1, 4, m["h1"]))
    # server: its TSNs cross 2^32
    srv = [_payload(f"s{i}", 20 + i) for i in range(4)]
    v4(*sc, ctag, data(st, 0, 0, srv[0]), SCTPChunkSACK(cumul_tsn_ack=ct + 12, a_rwnd=65535))
    v4(*sc, ctag, data(st + 2, 3, 0, srv[2]))
    v4(*sc, ctag, data(st + 1, 0, 1, srv[1]), data(st + 3, 0, 2, srv[3]))
    v4(*cs, stag, SCTPChunkSACK(cumul_tsn_ack=(st + 3) % (1 << 32), a_rwnd=65535))
    v4(*cs, stag, SCTPChunkShutdown(cumul_tsn_ack=(st + 3) % (1 << 32)))
    v4(*sc, ctag, SCTPChunkShutdownAck())
    v4(*cs, stag, SCTPChunkShutdownComplete())
    # IPv6, joined mid-stream (no INIT): the first DATA chunk seen sets each TSN base
    a6, b6 = (C6, S6, 3868, 3868), (S6, C6, 3868, 3868)
    six = [_payload(f"v{i}", 25 + 3 * i) for i in range(5)]
    v6(*a6, 7, data(500, 0, 10, six[0]), data(501, 5, 3, six[1]))
    v6(*a6, 7, data(503, 5, 4, six[3]))
    v6(*a6, 7, data(502, 0, 11, six[2]))
    v6(*b6, 9, data(9000, 2, 0, six[4]), SCTPChunkSACK(cumul_tsn_ack=503, a_rwnd=65535))
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000 + i / 1000
    wrpcap(str(path), pkts)
    return [
        (*cs, 0, m["a0"] + m["d0"] + m["g0"]),
        (*cs, 1, m["b1"] + m["e1"] + m["u1"] + m["x1"] + b"".join(frag) + m["h1"]),
        (*cs, 2, m["c2"] + m["f2"]),
        (*sc, 0, srv[0] + srv[1] + srv[3]),
        (*sc, 3, srv[2]),
        (*a6, 0, six[0] + six[2]),
        (*a6, 5, six[1] + six[3]),
        (*b6, 2, six[4]),
    ]


def _norm(addr: str) -> str:
    return str(ipaddress.ip_address(addr))


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_manifest_lists_sctp_captures() -> None:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not there")
    assert sctp_captures(), "MANIFEST.tsv lists no SCTP capture"


def test_handmade_capture_matches_tshark(tmp_path: Path) -> None:
    """The case's own streams are what the oracle makes of tshark's chunks."""
    pcap = tmp_path / "sctp-handmade.pcap"
    sent = handmade(pcap)
    want = {(_norm(a), pa, _norm(b), pb, sid): d for a, b, pa, pb, sid, d in sent}
    got = {
        (_norm(k[0]), k[1], _norm(k[2]), k[3], k[4]): v
        for k, v in expected_streams(tshark_chunks(pcap)).items()
    }
    assert got == want


@pytest.mark.parametrize("sanitize", [False, True], ids=["O0", "O2-asan"])
def test_streams_equal_tshark(binaries: dict[bool, Path], sanitize: bool, tmp_path: Path) -> None:
    pcaps = sctp_captures()
    made = tmp_path / "sctp-handmade.pcap"
    handmade(made)
    total = streams = 0
    for pcap in [*pcaps, made]:
        out = tmp_path / pcap.stem
        run(binaries[sanitize], pcap, out, "streams")
        chunks = tshark_chunks(pcap)
        total += compare(pcap, chunks, delivered(out))
        streams += len(expected_streams(chunks))
    print(
        f"\nsctp: {len(pcaps) + 1} captures, {streams} stream directions, {total} bytes equal to tshark"
    )
    assert total > 0


def test_whole_messages(binaries: dict[bool, Path], tmp_path: Path) -> None:
    """sctp_message gets each whole message (fragments B..E joined) once, complete, per
    direction and stream."""
    made = tmp_path / "sctp-handmade.pcap"
    handmade(made)
    for pcap in [*sctp_captures(), made]:
        out = tmp_path / pcap.stem
        run(binaries[False], pcap, out / "s", "streams")
        run(binaries[False], pcap, out / "e", "events")  # same capture and seed: same uids
        ends: dict[int, tuple[str, int, str, int]] = {}
        for line in (out / "s" / "flows.jsonl").read_text().splitlines():
            r = json.loads(line)
            e = (r["src"], r["sport"], r["dst"], r["dport"])
            ends[r["uid"]] = e if r["dir"] == "c2s" else (e[2], e[3], e[0], e[1])
        got: dict[Key, list[tuple[int, str]]] = defaultdict(list)
        for line in (out / "e" / "events.jsonl").read_text().splitlines():
            ev = json.loads(line)
            if ev.get("handler") not in ("sctp_message", "sctp6_message"):
                continue
            a, (s, sp, d, dp) = ev["args"], ends[ev["flow"]]
            key = (s, sp, d, dp, a["sid"]) if ev["dir"] == "c2s" else (d, dp, s, sp, a["sid"])
            assert a["complete"] == 1, (pcap.name, key, a)
            got[key].append((a["msg"]["len"], a["msg"]["sha256"]))
        want = {
            k: [(len(m), hashlib.sha256(m).hexdigest()) for m in msgs]
            for k, msgs in expected_messages(tshark_chunks(pcap)).items()
            if msgs
        }
        assert dict(got) == want, pcap.name


def garbage(path: Path) -> None:
    """Valid-looking SCTP packets with random chunks, lengths, flags and TSNs (fixed seed), so
    the stack meets DATA chunks shorter than their header, lengths past the packet, TSNs far
    outside the window, bundles cut anywhere, and more chunks than the self-loop allows."""
    rng = random.Random(17)
    pkts: list[Packet] = []
    for i in range(400):
        a, b = (C4, S4) if rng.random() < 0.5 else (S4, C4)
        pa, pb = (7000, 7001) if a == C4 else (7001, 7000)
        body = b""
        for _ in range(rng.randint(1, 6)):
            kind = rng.choice([0, 0, 0, 1, 2, 3, 7, 14, rng.randrange(256)])
            ln = rng.choice([rng.randrange(0, 40), rng.randrange(16, 300), 0xFFFF])
            tsn = rng.choice([rng.randrange(5), 1 << 31, rng.randrange(1 << 32)])
            chunk = struct.pack(
                "!BBHIHHI", kind, rng.randrange(16), ln, tsn, rng.randrange(4), rng.randrange(8), 0
            )
            body += chunk + rng.randbytes(rng.randrange(0, 64))
        cut = rng.randrange(len(body) + 1) if rng.random() < 0.2 else len(body)
        sctp = struct.pack("!HHII", pa, pb, 0, 0) + body[:cut]
        p = Ether(src=MAC, dst=MAC) / IP(src=a, dst=b, proto=132) / Raw(sctp)
        p.time = 1_700_000_000 + i / 1000
        pkts.append(p)
    # many tiny chunks in one packet: past the chunk loop's max_repeat
    many = b"".join(
        struct.pack("!BBHIHHI", 0, 3, 17, 100 + k, 0, k, 0) + b"x" + b"\0" * 3 for k in range(300)
    )
    p = (
        Ether(src=MAC, dst=MAC)
        / IP(src=C4, dst=S4, proto=132)
        / Raw(struct.pack("!HHII", 7002, 7003, 0, 0) + many)
    )
    p.time = 1_700_000_001
    pkts.append(p)
    wrpcap(str(path), pkts)


def test_garbage_survives_and_levels_agree(binaries: dict[bool, Path], tmp_path: Path) -> None:
    """Random chunks: no sanitizer report, and -O0 and -O2 write the same events and streams."""
    pcap = tmp_path / "sctp-garbage.pcap"
    garbage(pcap)
    for san, binary in binaries.items():
        for nf in ("events", "streams"):
            run(binary, pcap, tmp_path / f"{san}-{nf}", nf)
    a, b = tmp_path / "False-events", tmp_path / "True-events"
    assert (a / "events.jsonl").read_bytes() == (b / "events.jsonl").read_bytes()
    calls = [
        json.loads(line).get("handler") for line in (a / "events.jsonl").read_text().splitlines()
    ]
    assert calls.count("sctp_data") > 50, "the garbage should still carry DATA chunks"
    sa, sb = tmp_path / "False-streams", tmp_path / "True-streams"
    assert (sa / "flows.jsonl").read_bytes() == (sb / "flows.jsonl").read_bytes()
    for f in (sa / "streams").iterdir():
        assert f.read_bytes() == (sb / "streams" / f.name).read_bytes(), f.name


def test_message_past_max_bytes(tmp_path: Path) -> None:
    """A message longer than sctp_user's max_bytes reaches sctp_message cut to its first
    max_bytes bytes with complete 0 (buffer_full); the next messages are whole; sctp_data still
    delivers every byte. The stack is the stock one with max_bytes lowered to 64."""
    specs = tmp_path / "specs"
    shutil.copytree(REPO / "specs", specs)
    user = specs / "protocols" / "sctp_user.yaml"
    text = user.read_text()
    assert text.count("1048576") == 4  # max_bytes and the offsets' bound (per direction)
    user.write_text(text.replace("1048576", "64"))
    binary = build_stack(specs / "stacks" / "sctp.yaml", tmp_path / "build", quiet=True).binary
    rng = random.Random(5)
    frags = [rng.randbytes(n) for n in (40, 40, 20)]
    small, third = rng.randbytes(10), [rng.randbytes(30), rng.randbytes(30)]
    chunks = [
        (1, frags[0], 1, 0), (2, frags[1], 0, 0), (3, frags[2], 0, 1),
        (4, third[0], 1, 0), (5, third[1], 0, 1),  # right after the cut message
        (6, small, 1, 1),
    ]  # fmt: skip
    pkts = []
    for i, (tsn, body, b, e) in enumerate(chunks):
        d = SCTPChunkData(tsn=tsn, stream_id=3, stream_seq=i, data=body, beginning=b, ending=e)
        p = Ether(src=MAC, dst=MAC) / IP(src=C4, dst=S4) / SCTP(sport=9, dport=10, tag=1) / d
        p.time = 1_700_000_000 + i / 1000
        pkts.append(p)
    pcap = tmp_path / "big.pcap"
    wrpcap(str(pcap), pkts)
    run(binary, pcap, tmp_path / "e", "events")
    calls = [
        json.loads(line) for line in (tmp_path / "e" / "events.jsonl").read_text().splitlines()
    ]
    msgs = [c["args"] for c in calls if c.get("handler") == "sctp_message"]
    whole = b"".join(frags)
    assert [(m["msg"]["len"], m["msg"]["sha256"], m["complete"]) for m in msgs] == [
        (64, hashlib.sha256(whole[:64]).hexdigest(), 0),
        (60, hashlib.sha256(b"".join(third)).hexdigest(), 1),
        (10, hashlib.sha256(small).hexdigest(), 1),
    ]
    data = [c["args"]["data"]["len"] for c in calls if c.get("handler") == "sctp_data"]
    assert data == [40, 40, 20, 30, 30, 10]
