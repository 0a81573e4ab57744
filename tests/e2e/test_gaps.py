"""Gap recovery to the last byte, on lossy versions of real captures, against tshark.

Each case copies a capture of ../shared/traces without some of its TCP data segments (a drop
pattern of tests/support/lossy.py: every n-th data segment, a burst in the busiest direction, the
last data segment before each FIN, the first data segment of each direction), runs a stack on
the lossy copy with the `streams` NF, and checks every direction of every TCP stream with a
complete handshake:

1. tshark: `follow,tcp,raw` on the lossy copy (tests/support/oracle, its gap markers stripped) is a
   prefix of the captured bytes in sequence order with the holes cut out (`lossy.captured`,
   built from tshark's own dissection of each segment: the first copy of a byte wins, data
   before the direction's first sequence number is old), and each of tshark's
   "[N bytes missing in capture file]" markers sits where a hole of that model is. tshark
   stops at a hole that no captured ACK covers and prints nothing after it (the bytes stay in
   its fragment list when the capture ends): that is why it is a prefix, not the whole.
2. The stack delivers exactly the model's bytes: everything captured, each hole skipped, the
   bytes after the last hole included (a FIN, a RST or the end of the capture closes over it:
   tcp.yaml's `sequence.drain`).
3. The stack's `gaps` (flows.jsonl) are the model's holes, in stream offsets, and contain the
   holes this test made by dropping segments; a last hole with no byte after it (the receiver
   acknowledged it, or a FIN follows it) is only checked against the dropped bytes.
4. The summary's `gaps`/`gap_bytes` and streams.json agree with flows.jsonl.

One build per stack for the session; a handful of captures × patterns (< 90 s).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import lossy
from support.captures import REPO, Run, flow_key, rubikgen_command
from support.lossy import run
from support.oracle import TRACES, reference_streams, tshark_available

PATTERNS: dict[str, lossy.Pattern] = {
    "every4th": lossy.every_nth(4, 1),
    "burst": lossy.burst(2, 3),
    "before_fin": lossy.before_fin,
    "first": lossy.first_data,
}

ALL = tuple(PATTERNS)
NO_FIN = ("every4th", "burst", "first")  # no FIN in the capture to drop the segment before

#: (capture, stack, patterns): plain TCP through tcp_ip (Ethernet, 802.1Q, BSD NULL + IPv6,
#: retransmissions, SACK, a FIN over the lost last segment), and TCP inside GTP-U through the
#: gtp stack (outer IPv4 fragments in gtp-u-http-outer-frag).
CAPTURES = [
    ("http-post-upload.pcap", "tcp_ip", ALL),
    ("vlan-http-syn-retransmit.pcap", "tcp_ip", ALL),
    ("null-ipv6-http-connect-tls.pcap", "tcp_ip", NO_FIN),
    ("tcp-retransmissions.pcap", "tcp_ip", ("every4th", "before_fin")),
    ("ssh-duplicate-segments.pcap", "tcp_ip", ("every4th", "before_fin")),
    ("gtp-u-tls-anon.pcap", "gtp", ALL),
    ("gtp-u-http-outer-frag.pcap", "gtp", ("every4th", "before_fin")),
]

CASES = [(c, s, p) for c, s, ps in CAPTURES for p in ps]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    return tmp_path_factory.mktemp("gaps")


def _ours(r: Run) -> dict[tuple, tuple[bytes, list[tuple[int, int]], int]]:
    """Per (src, sport, dst, dport) of the sender: bytes, gaps (offset, length) and the stream
    length (bytes + gap bytes), over the flows between those endpoints in uid order."""
    out: dict[tuple, tuple[bytes, list[tuple[int, int]], int]] = {}
    for key, rec in r.directions():
        k = key[1:]
        data, gaps, span = out.get(k, (b"", [], 0))
        data += r.data(rec)
        # a later flow's offsets continue the earlier ones' stream
        gaps = gaps + [(span + int(o), int(n)) for o, n in rec.get("gaps", [])]
        span += rec["bytes"] + sum(int(n) for _, n in rec.get("gaps", []))
        out[k] = (data, gaps, span)
    return out


def _inside(hole: tuple[int, int], made: list[tuple[int, int]]) -> bool:
    a, b = hole[0], hole[0] + hole[1]
    return any(m <= a and b <= m + n for m, n in made)


@pytest.mark.parametrize(("capture", "stack", "pattern"), CASES)
def test_lossy_capture_delivers_every_captured_byte(
    capture: str, stack: str, pattern: str, work: Path
) -> None:
    src = TRACES / capture
    if not src.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    segs = lossy.segments(src)
    dropped = PATTERNS[pattern](segs)
    assert dropped, f"{pattern} drops nothing from {capture}"
    pcap = lossy.write_without(src, dropped, work / f"{capture[:-5]}-{pattern}.pcap")
    made = lossy.expected_holes(segs, dropped)
    model = lossy.captured(segs, dropped)
    r = run(stack, pcap, work / f"out-{capture[:-5]}-{pattern}")
    assert r.returncode == 0, r.describe()
    ours = _ours(r)
    problems: list[str] = []
    compared = 0
    for s in reference_streams(pcap):
        if s.proto != "tcp" or not s.c2s.flow.handshake:
            continue
        for d in s.directions:
            f = d.flow
            label = f"[tcp {s.index}] {f.dir} {f.src}:{f.sport}"
            m = model.get(((f.src, f.sport), (f.dst, f.dport)), lossy.Delivery(b"", []))
            # 1. tshark against the model
            if not m.data.startswith(d.data):
                problems.append(f"{label}: tshark's {len(d.data)} bytes are not the model's start")
            pos = {o - sum(n for oo, n in m.holes if oo < o): n for o, n in m.holes}
            for g in d.gaps:
                if pos.get(g.offset) != g.missing:
                    problems.append(f"{label}: tshark marker {g} is not a model hole {m.holes}")
            # 2. the stack's bytes
            k = flow_key("tcp", f.src, f.sport, f.dst, f.dport)[1:]
            data, gaps, span = ours.get(k, (b"", [], 0))
            compared += 1
            if data != m.data:
                problems.append(
                    f"{label}: stack {len(data)} bytes, model {len(m.data)}, tshark"
                    f" {len(d.data)}; holes {m.holes[:4]}, ours {gaps[:4]}"
                )
                continue
            # 3. the stack's gaps
            inner = [g for g in gaps if g[0] + g[1] < span]
            last = [g for g in gaps if g[0] + g[1] >= span]
            if inner != m.holes:
                problems.append(f"{label}: gaps {inner} != model holes {m.holes}")
            mine = made.get((s.index, (f.src, f.sport)), [])
            for h in mine:
                if h[0] < span - sum(n for _, n in last) and not _inside(h, m.holes):
                    problems.append(f"{label}: dropped bytes {h} are in no gap {gaps}")
            for h in last:
                if not _inside(h, mine):
                    problems.append(f"{label}: last gap {h} is not dropped bytes {mine}")
    assert compared > 0, f"no TCP stream with a handshake in {capture}"
    # 4. the counters
    summary = r.summary()
    recs = r.records()
    total = sum(int(n) for rec in recs for _, n in rec.get("gaps", []))
    assert summary["gap_bytes"] == total, (summary, total)
    streams_json: dict[str, Any] = json.loads((r.out / "streams.json").read_text())
    assert streams_json["gap_bytes"] == total
    assert streams_json["gaps"] == sum(len(rec.get("gaps", [])) for rec in recs)
    assert summary["gaps"] >= streams_json["gaps"]  # adjacent holes are merged in flows.jsonl
    assert not problems, f"{capture} without {sorted(dropped)}:\n" + "\n".join(problems[:30])


def test_events_nf_reports_each_gap(work: Path) -> None:
    """The `events` NF writes one line per hole skipped, with the sequence number and length;
    they add up to the summary's figures and lie where the capture lost bytes."""
    src = TRACES / "vlan-http-syn-retransmit.pcap"
    if not src.is_file():
        pytest.skip(f"{src.name} is not in {TRACES}")
    segs = lossy.segments(src)
    dropped = lossy.every_nth(4, 1)(segs) | lossy.before_fin(segs)
    pcap = lossy.write_without(src, dropped, work / "events-lossy.pcap")
    r = run("tcp_ip", pcap, work / "out-events", nf="events")
    assert r.returncode == 0, r.describe()
    lines = [json.loads(x) for x in (r.out / "events.jsonl").read_text().splitlines()]
    gaps = [x for x in lines if x.get("event") == "gap"]
    assert gaps, "no gap line"
    summary = r.summary()
    assert len(gaps) == summary["gaps"]
    assert sum(g["len"] for g in gaps) == summary["gap_bytes"] > 0
    lost = [(s.start, s.start + s.length) for s in segs if s.frame in dropped]
    for g in gaps:
        a, b = g["seq"], g["seq"] + g["len"]
        covered = sorted((max(a, x), min(b, y)) for x, y in lost if x < b and y > a)
        pos = a
        for x, y in covered:
            assert x <= pos, (g, covered)
            pos = max(pos, y)
        assert pos >= b, f"gap {g} covers bytes no dropped segment carried"


def test_handler_with_gap(work: Path) -> None:
    """A handler `with: gap` runs after the assemble that skipped holes, once per packet, and
    gets `gap_seq` (the first hole's sequence number) and `gap_len` (the bytes skipped): the
    `gap` lines the events NF wrote for that flow direction since its last such call."""
    src = TRACES / "vlan-http-syn-retransmit.pcap"
    if not src.is_file():
        pytest.skip(f"{src.name} is not in {TRACES}")
    # the stock stack plus one handler, by composition
    spec = (
        f"stack: tcp_gap\nextends: {REPO / 'specs' / 'stacks' / 'tcp_ip.yaml'}\nhandlers:\n"
        "  tcp_gap: {layer: tcp, with: gap, args: {seq: gap_seq, len: gap_len}}\n"
    )
    stack = work / "tcp_gap.yaml"
    stack.write_text(spec)
    argv = [*rubikgen_command(), "build", str(stack), "-o", str(work / "tcp_gap")]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    segs = lossy.segments(src)
    pcap = lossy.write_without(src, lossy.every_nth(5)(segs), work / "handler-lossy.pcap")
    out = work / "out-handler"
    proc = subprocess.run(
        [str(work / "tcp_gap" / "tcp_gap"), str(pcap), "--nf", "events", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    pending: dict[tuple[int, str], list[dict[str, Any]]] = {}
    calls = 0
    for line in (out / "events.jsonl").read_text().splitlines():
        x = json.loads(line)
        if x.get("event") == "close":  # a flow's end (no direction): not a gap or a call
            continue
        key = (x["flow"], x["dir"])
        if x.get("event") == "gap":
            pending.setdefault(key, []).append(x)
        elif x.get("handler") == "tcp_gap":
            calls += 1
            mine = pending.pop(key, [])
            assert mine, f"tcp_gap without a gap before it: {x}"
            assert x["args"] == {"seq": mine[0]["seq"], "len": sum(g["len"] for g in mine)}, x
    assert calls > 0
