"""Is the benchmark capture generator (bench/gen.py) right? Its captures are checked with tshark
(checksums, malformed frames, conversations, the bytes `follow` delivers, the sequence numbers
on the wire) and scapy (checksums recomputed, TCP options), never with the generator's own code
except to know what the requests and responses of a connection contain.

Small captures (40 connections, and 600 for the open-connection schedule) keep this fast.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import REPO_ROOT
from support.oracle import conversations, prefetch, reference_streams, tshark_available

REPO = REPO_ROOT
GEN = REPO / "bench" / "gen.py"
N = 40
WORKLOADS = "abcde"

needs_tshark = pytest.mark.skipif(
    not tshark_available(), reason="tshark is not installed (bash ci/setup.sh installs it)"
)


@functools.cache
def gen() -> ModuleType:
    """bench/gen.py as a module (for request()/response() and the constants only)."""
    spec = importlib.util.spec_from_file_location("bench_gen", GEN)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_gen"] = mod
    spec.loader.exec_module(mod)
    return mod


def run_gen(out: Path, *args: str) -> dict[str, Any]:
    subprocess.run(
        [sys.executable, str(GEN), "--out", str(out), *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads((out / "MANIFEST.json").read_text())


@functools.cache
def _config_dir() -> str:
    return tempfile.mkdtemp(prefix="rubikgen-bench-tshark-")


def tshark(*args: str) -> list[str]:
    env = dict(os.environ, WIRESHARK_CONFIG_DIR=_config_dir(), LC_ALL="C")
    proc = subprocess.run(
        ["tshark", "-n", *args], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    manifest = run_gen(out, "--connections", str(N))
    if tshark_available():
        prefetch(out / f"{w}.pcap" for w in WORKLOADS)
    return out, manifest


def read_pcap(path: Path) -> list[tuple[int, bytes]]:
    """(timestamp in microseconds, frame) for every record of a classic microsecond pcap."""
    raw = path.read_bytes()
    magic, major, minor, _, _, snaplen, link = struct.unpack_from("<IHHiIII", raw)
    assert (magic, major, minor, snaplen, link) == (0xA1B2C3D4, 2, 4, 65535, 1)
    out = []
    pos = 24
    while pos < len(raw):
        sec, usec, incl, orig = struct.unpack_from("<IIII", raw, pos)
        assert incl == orig <= snaplen
        out.append((sec * 1_000_000 + usec, raw[pos + 16 : pos + 16 + incl]))
        pos += 16 + incl
    assert pos == len(raw)
    return out


# ---------------------------------------------------------------------------------------------
# Manifest, determinism, file format
# ---------------------------------------------------------------------------------------------


def test_manifest_describes_the_files(small: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = small
    assert sorted(manifest["workloads"]) == list(WORKLOADS)
    for name, m in manifest["workloads"].items():
        path = out / f"{name}.pcap"
        data = path.read_bytes()
        frames = read_pcap(path)
        assert m["file"] == path.name
        assert m["sha256"] == hashlib.sha256(data).hexdigest()
        assert m["file_bytes"] == len(data)
        assert m["packets"] == len(frames)
        assert m["bytes"] == sum(len(f) for _, f in frames)
        assert m["connections"] == N
        assert m["seed"] == gen().DEFAULT_SEED
        assert m["generator_version"] == gen().VERSION
        assert m["request_bytes"] == 100
        assert m["response_bytes"] == (8192 if name in "bd" else 1024)
        assert m["payload_bytes"] == {"c2s": 100 * N, "s2c": m["response_bytes"] * N}
        stamps = [t for t, _ in frames]
        steps = {b - a for a, b in zip(stamps, stamps[1:], strict=False)}
        assert steps and min(steps) >= 1 and max(steps) <= 10  # a few microseconds apart
        assert (m["data_segments_retransmitted"] == 0) == (name not in "cd")
    a, e = manifest["workloads"]["a"], manifest["workloads"]["e"]
    assert a["packets"] == e["packets"] and a["duration_us"] == e["duration_us"]


def test_deterministic(small: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    out, _ = small
    run_gen(tmp_path, "--connections", str(N))
    for name in [*(f"{w}.pcap" for w in WORKLOADS), "MANIFEST.json"]:
        first = hashlib.sha256((out / name).read_bytes()).hexdigest()
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == first, name
    # another seed gives other captures; one workload alone keeps the others' entries
    other = run_gen(tmp_path, "--connections", str(N), "--seed", "5", "a")
    assert other["workloads"]["a"]["seed"] == 5
    assert other["workloads"]["b"]["seed"] == gen().DEFAULT_SEED
    assert (
        hashlib.sha256((tmp_path / "a.pcap").read_bytes()).hexdigest()
        != hashlib.sha256((out / "a.pcap").read_bytes()).hexdigest()
    )


def test_tiny_runs(tmp_path: Path) -> None:
    """Perturbations still happen (at least one of each) with a single connection."""
    m = run_gen(tmp_path, "--connections", "1")["workloads"]
    for w in "cd":
        assert m[w]["data_segments_reordered"] == 1
        assert m[w]["fins_overtaking_data"] == 1
        assert m[w]["data_segments_retransmitted"] == 1
    assert m["a"]["packets"] == 9 and m["b"]["packets"] == 16


# ---------------------------------------------------------------------------------------------
# tshark: checksums, conversations, delivered bytes
# ---------------------------------------------------------------------------------------------

CHECKS = [
    *("-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"),
    *("-o", "udp.check_checksum:TRUE"),
]
# The status is 0 when bad (1 good, 2 unverified, 3 not present): "== 2" would match nothing.
BAD_CHECKSUM = " || ".join(f'{p}.checksum.status == "Bad"' for p in ("ip", "tcp", "udp"))
# With TCP desegmentation on, tshark's HTTP reassembly reports a retransmitted segment arriving
# after the response it belongs to was complete as an error-level "Reassembly error (New
# fragment overlaps old data)"; that says nothing about the frames, so desegmentation is off.
MALFORMED = [*CHECKS, "-o", "tcp.desegment_tcp_streams:FALSE"]


@needs_tshark
@pytest.mark.parametrize("name", WORKLOADS)
def test_tshark_sees_no_bad_checksum_or_malformed_frame(
    small: tuple[Path, dict[str, Any]], name: str
) -> None:
    out, _ = small
    pcap = str(out / f"{name}.pcap")
    assert tshark("-r", pcap, *CHECKS, "-Y", BAD_CHECKSUM) == []
    assert (
        tshark("-r", pcap, *MALFORMED, "-Y", "_ws.malformed || _ws.expert.severity >= error") == []
    )
    # every checksum was really verified (status 1 = good), except GTP-U's outer UDP (0 = none)
    fields = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in ("ip.checksum.status", "tcp.checksum.status", "udp.checksum.status"):
        fields += ["-e", f]
    for line in tshark("-r", pcap, *CHECKS, *fields):
        ip, tcp, *udp = (line.split("\t") + [""])[:3]
        assert ip == ("1,1" if name == "e" else "1") and tcp == "1", line
        assert udp == (["3"] if name == "e" else [""]), line  # 3: not present (checksum 0)


@needs_tshark
def test_checksum_check_is_not_vacuous(small: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """One flipped byte in a TCP checksum and one in an IP checksum are both found."""
    out, _ = small
    raw = bytearray((out / "a.pcap").read_bytes())
    first = 24 + 16  # the first frame's Ethernet header
    raw[first + 14 + 10] ^= 0x01  # IP checksum of frame 1
    second = first + struct.unpack_from("<I", raw, 24 + 8)[0] + 16
    raw[second + 14 + 20 + 16] ^= 0x80  # TCP checksum of frame 2
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(raw))
    hits = tshark("-r", str(bad), *CHECKS, "-Y", BAD_CHECKSUM, "-T", "fields", "-e", "frame.number")
    assert hits == ["1", "2"]


@needs_tshark
@pytest.mark.parametrize("name", WORKLOADS)
def test_tshark_follows_every_connection(small: tuple[Path, dict[str, Any]], name: str) -> None:
    """One TCP conversation and stream per connection (4-tuples are unique), each with a
    complete handshake and teardown, delivering exactly the request and the response."""
    out, manifest = small
    m = manifest["workloads"][name]
    pcap = out / f"{name}.pcap"
    tcp_convs = [c for c in conversations(pcap) if c[0] == "tcp"]
    udp_convs = [c for c in conversations(pcap) if c[0] == "udp"]
    assert len(tcp_convs) == N
    if name == "e":
        assert udp_convs == [("udp", ("10.200.0.1", 2152), ("10.200.0.2", 2152))]
    else:
        assert udp_convs == []
    streams = [s for s in reference_streams(pcap) if s.proto == "tcp"]
    assert len(streams) == N
    seen = set()
    totals = {"c2s": 0, "s2c": 0}
    for s in streams:
        assert s.flags == {"syn", "synack", "fin"} and s.malformed_frames == 0
        c2s, s2c = s.c2s, s.s2c
        assert c2s.flow.handshake and c2s.flow.complete
        assert c2s.flow.dport == 80 and not c2s.gaps and not s2c.gaps
        match = re.match(rb"GET /bench/(\d{8}) ", c2s.data)
        assert match, c2s.data[:40]
        i = int(match[1])
        seen.add(i)
        server = bytes(int(x) for x in c2s.flow.dst.split("."))
        assert c2s.data == gen().request(i, server)
        assert s2c.data == gen().response(i, m["response_bytes"])
        assert len(c2s.data) == m["request_bytes"] and len(s2c.data) == m["response_bytes"]
        totals["c2s"] += len(c2s.data)
        totals["s2c"] += len(s2c.data)
        if name == "e":
            assert all(p.startswith("eth:ethertype:ip:udp:gtp:ip:tcp") for p in s.paths), s.paths
        else:
            assert s.paths == {"eth:ethertype:ip:tcp"}
    assert seen == set(range(N))
    assert totals == m["payload_bytes"]


@needs_tshark
@pytest.mark.parametrize("name", ["a", "b", "c", "d"])
def test_tshark_follow_raw_sampled(small: tuple[Path, dict[str, Any]], name: str) -> None:
    """`-z follow,tcp,raw,N` on a few streams straight from tshark (without the oracle)."""
    out, manifest = small
    m = manifest["workloads"][name]
    args = ["-r", str(out / f"{name}.pcap"), "-q"]
    for k in (0, N // 2, N - 1):
        args += ["-z", f"follow,tcp,raw,{k}"]
    sizes: list[list[int]] = []
    for line in tshark(*args):
        if line.startswith("Follow: tcp,raw"):
            sizes.append([0, 0])
        elif sizes and re.fullmatch(r"\t?[0-9a-f]+", line):
            sizes[-1][line.startswith("\t")] += len(line.strip()) // 2
    assert sizes == [[m["request_bytes"], m["response_bytes"]]] * 3


@needs_tshark
@pytest.mark.parametrize("name", ["a", "b", "c", "d"])
def test_perturbations_on_the_wire(small: tuple[Path, dict[str, Any]], name: str) -> None:
    """Count, from tshark's per-frame sequence numbers, the data segments that arrive after a
    later byte of their direction (reordered), the exact copies (retransmitted) and the FINs
    that come before the data they follow; the manifest must say the same, and those counts
    must be the requested fractions (2%, 1%) of the data segments, rounded, at least one."""
    out, manifest = small
    m = manifest["workloads"][name]
    lines = tshark(
        "-r", str(out / f"{name}.pcap"), "-T", "fields",
        *("-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq", "-e", "tcp.len"),
        *("-e", "tcp.flags.fin", "-e", "tcp.flags.syn"),
    )  # fmt: skip
    high: dict[tuple[str, str], int] = {}  # highest sequence number seen per direction
    copies: set[tuple[str, str, int, int]] = set()
    reordered = dups = fins = data = 0
    for line in lines:
        stream, port, seq_s, length_s, fin, syn = line.split("\t")
        seq, length = int(seq_s), int(length_s)
        key = (stream, port)
        top = high.get(key, 0)
        if length:
            if (stream, port, seq, length) in copies:
                dups += 1
                continue
            copies.add((stream, port, seq, length))
            data += 1
            reordered += seq < top
        if fin in ("1", "True") and seq > top:
            fins += 1
        high[key] = max(top, seq + length + (fin in ("1", "True")) + (syn in ("1", "True")))
    assert data == m["data_segments"] == N * (1 + m["response_segments"])
    assert reordered == m["data_segments_reordered"]
    assert dups == m["data_segments_retransmitted"]
    assert fins == m["fins_overtaking_data"]
    if name in "cd":
        assert reordered == max(1, round(0.02 * data))
        assert dups == max(1, round(0.01 * data))
        assert fins >= 1
        wire = m["payload_bytes_on_wire"]
        assert wire["c2s"] + wire["s2c"] > m["payload_bytes"]["c2s"] + m["payload_bytes"]["s2c"]
    else:
        assert reordered == dups == fins == 0
        assert m["payload_bytes_on_wire"] == m["payload_bytes"]


def _open_counts(pcap: Path) -> tuple[list[int], list[int]]:
    """Per frame, the connections open after it (first frame seen, last frame not yet), and
    the frame numbers (0-based) where each connection starts."""
    streams = [int(x) for x in tshark("-r", str(pcap), "-T", "fields", "-e", "tcp.stream")]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, s in enumerate(streams):
        first.setdefault(s, k)
        last[s] = k
    delta = [0] * (len(streams) + 1)
    for s in first:
        delta[first[s]] += 1
        delta[last[s]] -= 1  # closed once its last frame passed
    live, run = [], 0
    for k in range(len(streams)):
        run += delta[k]
        live.append(run)
    return live, sorted(first.values())


@needs_tshark
def test_open_connections_stay_between_64_and_200(tmp_path: Path) -> None:
    manifest = run_gen(tmp_path, "--connections", "600", "a", "c")
    for name in "ac":
        m = manifest["workloads"][name]
        live, starts = _open_counts(tmp_path / f"{name}.pcap")
        assert live[-1] == 0
        assert max(live) == m["open_connections"]["max"] <= 200
        begin = next(k for k, n in enumerate(live) if n >= 64)
        steady = live[begin : starts[-1]]  # until the last connection opened
        assert len(steady) > 2000
        assert min(steady) == m["open_connections"]["min_while_opening"] >= 64


@needs_tshark
def test_open_connections_small(small: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = small
    for name in WORKLOADS:
        live, _ = _open_counts(out / f"{name}.pcap")
        assert max(live) == manifest["workloads"][name]["open_connections"]["max"] <= N
        assert live[-1] == 0


# ---------------------------------------------------------------------------------------------
# Frame details: scapy, and the GTP-U wrapping
# ---------------------------------------------------------------------------------------------

LINUX_SYN = ["MSS", "SAckOK", "Timestamp", "NOP", "WScale"]


@pytest.mark.parametrize("name", ["a", "d", "e"])
def test_frames_with_scapy(small: tuple[Path, dict[str, Any]], name: str) -> None:
    """scapy recomputes every IP/TCP checksum; IP header fields and TCP options are as asked;
    IP IDs and TSvals increase per connection and direction (unperturbed workloads)."""
    from scapy.contrib.gtp import GTP_U_Header
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    out, _ = small
    ids: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    tsvals: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    macs = {"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:01:01", "02:00:00:00:01:02"}
    for _, frame in read_pcap(out / f"{name}.pcap"):
        pkt = Ether(frame)
        assert pkt.src in macs and pkt.dst in macs
        if name == "e":
            ip = pkt[GTP_U_Header][IP]
            assert pkt[IP].ttl == 64 and pkt[IP].flags == "DF"
        else:
            ip = pkt[IP]
        tcp = ip[TCP]
        # scapy computes the checksums again (the outer UDP checksum stays 0)
        fresh = pkt.copy()
        del fresh[IP].chksum
        if name == "e":
            del fresh[GTP_U_Header][IP].chksum
        del fresh[TCP].chksum
        assert bytes(Ether(bytes(fresh))) == frame, pkt.summary()
        assert ip.ttl == 64 and ip.flags == "DF"
        opts = [o[0] for o in tcp.options]
        if tcp.flags.S:
            assert opts == LINUX_SYN and dict(tcp.options)["MSS"] == 1460
        else:
            assert opts == ["NOP", "NOP", "Timestamp"]
        key = (ip.src, tcp.sport, ip.dst, tcp.dport)
        ids[key].append(ip.id)
        tsvals[key].append(dict(tcp.options)["Timestamp"][0])
    assert len(ids) == 2 * N
    if name in "ae":
        for key, seq in ids.items():
            assert all((b - a) % 65536 == 1 for a, b in zip(seq, seq[1:], strict=False)), key
        for key, seq in tsvals.items():
            assert all(0 < (b - a) % 2**32 < 100 for a, b in zip(seq, seq[1:], strict=False)), key


def test_gtp_wraps_a(small: tuple[Path, dict[str, Any]]) -> None:
    """Every frame of e is the frame of a (same timestamp) without its Ethernet header, behind
    Ethernet / IPv4 10.200.0.1 <-> 10.200.0.2 / UDP 2152 -> 2152 (checksum 0) / GTPv1-U G-PDU
    with one TEID per connection and direction."""
    out, _ = small
    a = read_pcap(out / "a.pcap")
    e = read_pcap(out / "e.pcap")
    assert len(a) == len(e)
    teids: dict[tuple[bytes, int], set[int]] = defaultdict(set)
    outer_ids: dict[bytes, list[int]] = defaultdict(list)
    for (ta, fa), (te, fe) in zip(a, e, strict=True):
        assert ta == te
        inner = fa[14:]
        assert fe[50:] == inner
        assert fe[12:14] == b"\x08\x00"
        ver, _, total, ident, frag, ttl, proto, _, src, dst = struct.unpack_from(
            "!BBHHHBBH4s4s", fe, 14
        )
        assert (ver, total, frag, ttl, proto) == (0x45, len(fe) - 14, 0x4000, 64, 17)
        assert {src, dst} == {bytes([10, 200, 0, 1]), bytes([10, 200, 0, 2])}
        sport, dport, ulen, ucsum = struct.unpack_from("!HHHH", fe, 34)
        assert (sport, dport, ulen, ucsum) == (2152, 2152, len(fe) - 34, 0)
        flags, mtype, glen, teid = struct.unpack_from("!BBHI", fe, 42)
        assert (flags, mtype, glen) == (0x30, 0xFF, len(inner))
        client_side = inner[12:16] if src == bytes([10, 200, 0, 1]) else inner[16:20]
        assert client_side[:2] == bytes([10, 0])  # uplink frames come from the client
        cport = struct.unpack_from("!H", inner, 20 if src == bytes([10, 200, 0, 1]) else 22)[0]
        teids[(client_side, cport)].add(teid)
        outer_ids[src].append(ident)
    assert len(teids) == N and all(len(t) == 2 for t in teids.values())
    assert len(set().union(*teids.values())) == 2 * N
    for seq in outer_ids.values():
        assert all((b - a) % 65536 == 1 for a, b in zip(seq, seq[1:], strict=False))
