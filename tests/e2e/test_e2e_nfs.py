"""End to end: the flowstats, events and count NFs of the tcp_ip stack against tshark, on every
capture of `oracle.ELIGIBLE`.

flowstats (definitions in handlers/nf/rg_nf.h) against tshark's conversation statistics
(`-z conv,tcp`, `-z conv,udp`: frames per direction of each address/port pair over the whole
capture) and the frame dump of the same tshark run (the frames each row counts, with their
times and lengths):

- every TCP/UDP instance's packets per direction are the frames of its conversation, in that
  direction, from the frame that created it (the first frame at first_ts that can create one)
  to a frame at last_ts, in capture order (its life); its bytes are those frames' TCP/UDP
  lengths (tcp.hdr_len + tcp.len, udp.length) minus what a snaplen cut off. Several frames may
  share last_ts (duplicate ACKs after the close): the instance ended at one of them;
- the instances' packets plus the frames no instance was live for add up to tshark's table,
  direction by direction. tshark counts a 4-tuple over the whole capture, an instance lives from
  its creation to its close, so the frames outside every instance are legitimate exactly when
  they cannot create one (tcp.yaml: `create_if: header.syn || payload_len > 0`): TCP segments
  without SYN and without payload (an ACK after the close, a RST of an unknown connection).
  Each of them is checked to be that; UDP creates on every datagram, so none may be left over;
- only instances that outlive a packet are written (no IPv4 datagram records), and only
  layers whose selector has sides (TCP, UDP) have ports.

Exceptions, explicit: EXCLUDED_FRAMES lists frames whose TCP/UDP header tshark and the stack
read differently (with the reason); their conversations are only checked for the packet count.

events: every `udp_data` call is one UDP datagram tshark dissects in that frame (`pkt` is the
frame number), with its ports and its payload (sha256, first 64 bytes); every such datagram
has its call. Every `tcp_data` call of a stream the e2e test compares (complete handshake) is
the next slice of tshark's `follow` bytes for its direction (sha256 and first bytes), and the
slices add up to all of them.

count: the summary's `payload_bytes` is the sum of the lengths of the `data` arguments, which on
captures where every stream has a handshake is what tshark's follow delivers in total.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO, STACK, flow_key
from support.conversations import (
    EXCLUDED_FRAMES,
    Pkt,
    Reference,
    reference,
)
from support.oracle import ELIGIBLE, TRACES, frame_times, reference_streams, tshark_available
from support.oracle.tshark import _tshark

CAPTURES = sorted(ELIGIBLE)


def _parse_bytes(text: str) -> int:
    """'3834 bytes' / '218 kB' as the smallest and largest byte count it may stand for."""
    num, unit = text.split()
    return int(num) * {"bytes": 1, "kB": 1000, "MB": 10**6}[unit]


# ---------------------------------------------------------------------------------------------
# Running the stack
# ---------------------------------------------------------------------------------------------


@dataclass
class Outputs:
    flowstats: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    ref: Reference
    errors: list[str] = field(default_factory=list)


def _binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary


def _run(binary: Path, pcap: Path, nf: str, out: Path, extra: tuple[str, ...] | list[str] = ()
         ) -> dict[str, Any]:  # fmt: skip
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json", *extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, f"{' '.join(argv)}: exit {p.returncode}\n{p.stderr[-2000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


class Runner:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.binary = _binary()
        names = [n for n in CAPTURES if (TRACES / n).is_file()]
        with ThreadPoolExecutor(max_workers=2) as pool:
            self.out = dict(zip(names, pool.map(self._one, names), strict=True))

    def _one(self, name: str) -> Outputs:
        pcap = TRACES / name
        out = self.root / name
        _run(self.binary, pcap, "flowstats", out)
        summary = _run(self.binary, pcap, "events", out)
        fs = _jsonl(out / "flowstats.jsonl")
        lines = _jsonl(out / "events.jsonl")
        # handler calls, one line per hole gap recovery skipped (compared in test_gaps.py) and
        # one per clock jump (a frame dated beyond --max-clock-jump: its own time is a frame's)
        ev = [e for e in lines if "handler" in e]
        others = [e for e in lines if "handler" not in e]
        # ... and one per overlap with differing bytes (evasion) and per memcap hit (issue 14)
        # ... and one per flow at its close (issue 27)
        kinds = ("gap", "clock_jump", "overlap", "memcap", "close")
        assert all(e.get("event") in kinds for e in others), others[:3]
        _closes_are_the_records(name, [e for e in others if e["event"] == "close"], fs)
        for lname, layer in summary["layers"].items():
            ovl = [e for e in others if e["event"] == "overlap" and e["layer"] == lname]
            assert len(ovl) == layer["memory"]["overlaps"]["different"], (lname, ovl[:3])
            assert all(e["len"] > 0 and e["won"] in ("old", "new", "both") for e in ovl)
        assert not [e for e in others if e["event"] == "memcap"]  # default caps: never hit
        jumps = [e for e in others if e["event"] == "clock_jump"]
        # a re-synchronisation's pkt_ts is the new base: the time of the jump's own frame
        assert {e["pkt_ts"] for e in jumps} <= set(frame_times(pcap)), jumps[:3]
        clock = summary["clock_jumps"]
        resyncs = [e for e in jumps if e.get("resync")]
        assert len(jumps) - len(resyncs) == clock["forward"] + clock["backward"], (jumps, clock)
        assert len(resyncs) == summary["clock_resyncs"], (resyncs, summary["clock_resyncs"])
        return Outputs(fs, ev, summary, reference(pcap))


def _closes_are_the_records(
    name: str, closes: list[dict[str, Any]], flowstats: list[dict[str, Any]]
) -> None:
    """The events NF's close line of a flow says what its flowstats record says (tested against
    tshark's conversations and `communityid` here and in test_community_id.py): endpoints,
    Community ID, state, close reason, conn_state, history, late packets, ICMP; every TCP/UDP
    and ICMP record has one."""
    by_uid = {e["flow"]: e for e in closes}
    assert len(by_uid) == len(closes), f"{name}: two close lines for one flow"
    for rec in flowstats:
        if rec["proto"] not in ("tcp", "udp", "icmp", "icmpv6") or rec["close"] == "open":
            continue
        line = by_uid.get(rec["uid"])
        assert line is not None, f"{name}: no close line for {rec}"
        for k, v in line.items():
            if k == "complete" and line["state"] is None:  # no PSM: null (flowstats: false)
                assert v is None and rec[k] is False, (name, line, rec)
            elif k == "ts":  # its last packet's own time
                assert v == rec["last_ts"], (name, line, rec)
            elif k not in ("event", "flow"):
                assert rec.get(k, "absent") == v, (name, k, line, rec)
        keys = ("reason", "late_packets", "community_id", "conn_state", "history", "icmp_errors")
        for k in (*keys, "icmp_type"):
            assert (k in rec) == (k in line), (name, k, line, rec)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    yield Runner(tmp_path_factory.mktemp("e2e-nfs"))


def _outputs(runner: Runner, name: str) -> Outputs:
    if name not in runner.out:
        pytest.skip(f"{name} is not in {TRACES}")
    return runner.out[name]


# ---------------------------------------------------------------------------------------------
# flowstats
# ---------------------------------------------------------------------------------------------

_SYN = 0x02


@pytest.mark.parametrize("name", CAPTURES)
def test_flowstats_against_tshark_conversations(name: str, runner: Runner) -> None:
    o = _outputs(runner, name)
    ref = o.ref
    by_conv: dict[tuple[str, frozenset], list[Pkt]] = defaultdict(list)
    for p in ref.pkts:
        by_conv[(p.proto, frozenset([p.src, p.dst]))].append(p)
    # tshark's table counts exactly the frames of the dump
    for key, conv in ref.convs.items():
        pk = by_conv.get(key, [])
        assert Counter(p.src for p in pk) == Counter({k: v for k, v in conv.frames.items() if v})

    problems: list[str] = []
    covered: set[int] = set()  # frames some instance counted
    instances = 0
    for rec in o.flowstats:
        # no ports where the layer has none; only instances that outlived a packet
        assert ("sport" in rec) == (rec["proto"] in ("tcp", "udp")), rec
        assert not (rec["close"] == "accept" and sum(rec["packets"]) <= 1), rec
        if rec["proto"] not in ("tcp", "udp"):
            continue
        instances += 1
        _, a, pa, b, pb = flow_key(rec["proto"], rec["src"], rec["sport"], rec["dst"], rec["dport"])
        label = f"{name} {rec['layer']} uid {rec['uid']} {a}:{pa} -> {b}:{pb}"
        pk = sorted(by_conv.get((rec["proto"], frozenset([(a, pa), (b, pb)])), []),
                    key=lambda p: p.frame)  # fmt: skip
        life, why = _life(name, rec, pk, covered, ((a, pa), (b, pb)))
        if life is None:
            problems.append(f"{label}: {why}")
            continue
        covered.update(p.frame for p in life)
    # what no instance counted: segments that cannot create an instance, nothing else
    for p in ref.pkts:
        if p.frame in covered:
            continue
        if p.proto == "udp" or _creates(p):
            problems.append(
                f"{name}: frame {p.frame} ({p.proto} {p.src} -> {p.dst}, flags {p.flags:#x},"
                f" {p.payload} payload bytes) is in tshark's conversation but in no instance"
            )
    assert not problems, "\n".join(problems[:30])
    if ref.pkts:
        assert instances > 0 and covered, "not vacuous: instances and frames compared"


def _counts(name: str, life: list[Pkt], ends: tuple[tuple[str, int], ...]) -> list[list[int]]:
    """[packets, bytes] per direction that flowstats must report for these frames."""
    out = []
    for sender in ends:
        mine = [p for p in life if p.src == sender]
        bad = any((name, p.frame) in EXCLUDED_FRAMES for p in mine)
        out.append([len(mine), -1 if bad else sum(p.l4 - p.cut for p in mine)])
    return out


def _life(
    name: str,
    rec: dict[str, Any],
    pk: list[Pkt],
    covered: set[int],
    ends: tuple[tuple[str, int], ...],
) -> tuple[list[Pkt] | None, str]:
    """The frames (in capture order) an instance counted: from the first not yet counted frame
    that can create it at first_ts, to a frame at last_ts. Several frames may share last_ts
    (duplicate ACKs after the close in one timestamp): the instance ended at one of them, and
    the ones after it must then be frames that create nothing (checked by the caller)."""
    starts = [i for i, p in enumerate(pk)
              if p.ts == rec["first_ts"] and _creates(p) and p.frame not in covered]  # fmt: skip
    if not starts:
        return None, f"no frame that can create it at first_ts {rec['first_ts']}"
    s = starts[0]
    tried = []
    for j in range(s, len(pk)):
        if pk[j].ts != rec["last_ts"]:
            continue
        life = pk[s : j + 1]
        want = _counts(name, life, ends)
        got = [[rec["packets"][d], rec["bytes"][d]] for d in range(2)]
        if all(w[0] == g[0] and w[1] in (-1, g[1]) for w, g in zip(want, got, strict=True)):
            return life, ""
        tried.append((pk[j].frame, want))
    return None, (
        f"packets {rec['packets']} bytes {rec['bytes']} from frame {pk[s].frame}; tshark's"
        f" frames to each frame at last_ts {rec['last_ts']} give [[packets, bytes] per"
        f" direction]: {tried[:4]}"
    )


def _creates(p: Pkt) -> bool:
    """Whether this segment may create an instance (tcp.yaml's create_if with its option
    midstream on, the stock default: any segment; UDP: always). Late segments of a closed
    connection go to its lingering record instead, which the caller's frame matching covers."""
    return p.proto in ("udp", "tcp")


# ---------------------------------------------------------------------------------------------
# events
# ---------------------------------------------------------------------------------------------


CLOSES = ("accept", "evicted", "expired", "flushed")


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("name", CAPTURES)
def test_events_against_tshark(name: str, runner: Runner) -> None:
    o = _outputs(runner, name)
    udp_frames = {p.frame: p for p in o.ref.pkts if p.proto == "udp"}
    seen: set[int] = set()
    follow: dict[tuple[str, int], bytes] = {}  # (sender, sport) -> tshark's bytes, handshake TCP
    streams = reference_streams(TRACES / name)
    for s in streams:
        if s.proto == "tcp" and s.c2s.flow.handshake:
            for d in s.directions:
                f = d.flow
                _, src, sport, dst, dport = flow_key("tcp", f.src, f.sport, f.dst, f.dport)
                follow[(src, sport, dst, dport)] = d.data
    offsets: dict[tuple[str, int, str, int], int] = defaultdict(int)
    pkt_tcp = {p.frame: p for p in o.ref.pkts if p.proto == "tcp"}
    tcp_calls = 0
    for ev in o.events:
        args = ev["args"]
        if ev["handler"].startswith(("icmp_", "icmp6_")):
            continue  # ICMP conversations and errors: tests/e2e/test_e2e_icmp.py
        data = args["data"]
        if "end" in ev:
            # bytes gap recovery delivered when the instance ended (after the last hole: not in
            # tshark's follow, see test_e2e_tshark's EXCEPTIONS); no packet, ports 0
            assert ev["handler"] in ("tcp_data", "tcp6_data") and ev["end"] in CLOSES, ev
            assert (args["sport"], args["dport"]) == (0, 0), ev
            continue
        if ev["handler"] in ("udp_data", "udp6_data"):
            p = udp_frames.get(ev["pkt"])
            assert p is not None, f"{name}: udp call on frame {ev['pkt']}: no UDP datagram there"
            assert ev["pkt"] not in seen, f"{name}: two udp calls for frame {ev['pkt']}"
            seen.add(ev["pkt"])
            assert (args["sport"], args["dport"]) == (p.src[1], p.dst[1])
            if (name, p.frame) in EXCLUDED_FRAMES:
                continue
            assert data["len"] == len(p.udp_payload) and data["sha256"] == _sha(p.udp_payload)
            assert data["hex"] == p.udp_payload[:64].hex()
        else:
            p = pkt_tcp.get(ev["pkt"])
            assert p is not None, f"{name}: tcp call on frame {ev['pkt']}: no TCP segment there"
            assert (args["sport"], args["dport"]) == (p.src[1], p.dst[1])
            key = (*p.src, *p.dst)
            if key not in follow:
                continue  # a stream without handshake: not compared (see the e2e test)
            off = offsets[key]
            ref = follow[key][off : off + data["len"]]
            assert data["sha256"] == _sha(ref) and data["hex"] == ref[:64].hex(), (
                f"{name}: tcp call on frame {ev['pkt']} ({key}): bytes {off}..{off + data['len']}"
                " differ from tshark's follow"
            )
            offsets[key] = off + data["len"]
            tcp_calls += 1
    missing = sorted(f for f in udp_frames if f not in seen)
    assert not missing, f"{name}: UDP datagrams in tshark without a call: frames {missing[:20]}"
    for key, data in follow.items():
        assert offsets[key] == len(data), (
            f"{name} {key}: calls carried {offsets[key]} of {len(data)}"
        )
    # count NF (chained before every NF): payload_bytes is the sum of the data lengths
    assert o.summary["payload_bytes"] == sum(
        ev["args"]["data"]["len"] for ev in o.events if "data" in ev["args"]
    )
    assert o.summary["calls"] == len(o.events)


#: Captures where every TCP stream has its handshake, so tshark's follow covers every byte the
#: stack delivers: count's payload_bytes must be tshark's total.
COUNT_CAPTURES = [
    "http-post-upload.pcap",
    "ipv6-http-curl-localhost.pcap",
    "null-smtp-rset.pcap",
    "quic-v1-chromium.pcap",
    "quic-v2-http3.pcap",
    "sll-dns2tcp-tls.pcap",
    "ssh-duplicate-segments.pcap",
    "tcp-fast-open.pcap",
    "tcp-handshake-reorder.pcap",
]


@pytest.mark.parametrize("name", COUNT_CAPTURES)
def test_count_payload_is_tshark_follow_total(name: str, runner: Runner) -> None:
    o = _outputs(runner, name)
    streams = reference_streams(TRACES / name)
    assert all(s.proto == "udp" or s.c2s.flow.handshake for s in streams)
    total = sum(len(d.data) for s in streams for d in s.directions)
    assert total > 0
    assert o.summary["payload_bytes"] == total


# ---------------------------------------------------------------------------------------------
# flowstats: which instances are written


def _ipv4_datagrams(pcap: Path) -> tuple[Counter[tuple[str, str, int]], int]:
    """Fragments per fragmented IPv4 datagram (src, dst, id), and the unfragmented datagrams,
    from tshark's dump of each frame's outer IPv4 header."""
    args = ["-r", str(pcap), "-o", "ip.defragment:FALSE", "-Y", "ip", "-T", "fields",
            "-E", "occurrence=f"]  # fmt: skip
    for f in ("ip.src", "ip.dst", "ip.id", "ip.flags.mf", "ip.frag_offset"):
        args += ["-e", f]
    frags: Counter[tuple[str, str, int]] = Counter()
    whole = 0
    for line in _tshark(args).splitlines():
        src, dst, ident, mf, off = line.split("\t")
        if mf in ("1", "True") or int(off):
            frags[(src, dst, int(ident, 16))] += 1
        else:
            whole += 1
    return frags, whole


@pytest.mark.parametrize("name", ["ipv4-frag-socks5-http.pcap", "mixed-android-mobile.pcap"])
def test_flowstats_writes_what_outlives_a_packet(name: str, runner: Runner, tmp_path: Path) -> None:
    """By default the IPv4 layer's records are the fragmented datagrams (one packet per
    fragment); with --flowstats-all, one more record per unfragmented datagram, created and
    destroyed by its one packet. Counted by tshark with reassembly off."""
    o = _outputs(runner, name)
    frags, whole = _ipv4_datagrams(TRACES / name)
    ip = [r for r in o.flowstats if r["layer"] == "ip"]
    assert sorted(sum(r["packets"]) for r in ip) == sorted(frags.values())
    assert all("sport" not in r and "dport" not in r for r in ip)
    _run(runner.binary, TRACES / name, "flowstats", tmp_path, ["--flowstats-all"])
    ip_all = [r for r in _jsonl(tmp_path / "flowstats.jsonl") if r["layer"] == "ip"]
    single = [r for r in ip_all if r["close"] == "accept" and sum(r["packets"]) == 1]
    assert len(single) == whole and len(ip_all) == whole + len(frags)
