"""Floods under memcaps (issue 14): peak RSS bounded, the flood evicted, nothing lost unsaid.

Each bench/flood.py kind runs through the optimised tcp_ip binary (RSS of a sanitized binary
measures the sanitizer, not the stack) with a normal TCP connection interleaved every MIX
flood packets and a cap small enough that the flood passes it (checked: the same capture run
without a cap accounts more than the cap). Asserted from outside the stack:

- peak RSS of the process (getrusage of the child, `os.wait4`) stays under the run's total
  memcap plus OVERHEAD, the fixed overhead docs/reliability.md states;
- the accounted peaks stay at or under their caps, and every cap hit is counted per layer
  with what the policy did (evictions for evict-oldest);
- every normal connection interleaved with the flood completes and its bytes, both ways,
  are exactly what tshark's `follow,tcp,raw` delivers for it (tshark reads only the normal
  connections' frames, filtered out of the flood capture by tshark itself);
- every instance opened is closed, with the reasons adding up per layer.

Policies on the far-ahead flood: the `memcap` events the events NF writes name the policy and
what it did to each flow, and `ignore` lets the accounted bytes pass the cap.
"""

from __future__ import annotations

import functools
import json
import subprocess
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest
from support.captures import rubikgen_command
from support.floods import CONN_FRAMES, accounted, flood
from support.hostile import REPO, STACK
from support.oracle import reference_flows, tshark_available

MIX = 10
MIB = 1 << 20
# binary, libc and libpcap (~5 MiB), allocator headers and rounding of many small blocks, and
# the flow tables' key index (counted, not capped): docs/reliability.md "Memory"
OVERHEAD = 16 * MIB
CLIENTS = ip_network("198.51.100.0/24")  # flood.connection(): the normal connections' clients
NORMAL = f"ip.src == {CLIENTS} || ip.dst == {CLIENTS}"

# kind, flood packets, memcaps (small enough that the flood passes one), their total
CASES = [
    ("syn", 6000, ["--memcap-flows", "1M", "--memcap-reassembly", "1M"], 2 * MIB),
    ("frag", 6000, ["--memcap", "2M"], 2 * MIB),
    ("frag-overlap", 6000, ["--memcap-flows", "128K", "--memcap-reassembly", "1M"], 1152 << 10),
    ("far-ahead", 7000, ["--memcap-reassembly", "128K", "--memcap-flows", "4M"], 4224 << 10),
    ("future-ts", 2000, ["--memcap", "16M"], 16 * MIB),
]


@functools.cache
def plain_tcp_ip() -> Path:
    """The tcp_ip binary without sanitizers, built once in its own directory."""
    out = REPO / "build" / "tcp_ip_plain"
    argv = [*rubikgen_command(), "build", str(STACK.relative_to(REPO)), "--out-dir", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return REPO / proc.stdout.strip().splitlines()[-1]


def run_rss(pcap: Path, nf: str, *args: str) -> tuple[dict[str, Any], Path, int]:
    """Run the plain binary: its JSON summary, output directory and peak RSS in bytes (GNU
    time's %M: the binary's own maximum RSS; getrusage of a child forked from Python would
    count the interpreter's pages the child held before exec)."""
    out = pcap.parent / f"out-{pcap.stem}-{nf}-{len(args)}"
    rss = pcap.parent / "rss.txt"
    argv = [str(plain_tcp_ip()), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json"]
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", str(rss), *argv, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), out, int(rss.read_text().split()[-1]) * 1024  # KiB


def normal_flows_exact(pcap: Path, out: Path) -> int:
    """The normal connections' directions as the streams NF wrote them equal tshark's follow
    of the same connections; returns how many directions were compared."""
    normal = pcap.parent / f"{pcap.stem}-normal.pcap"
    subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-Y", NORMAL, "-w", str(normal), "-F", "pcap"],
        check=True,
        capture_output=True,
    )
    ref = {f.key: f for f in reference_flows(normal) if f.proto == "tcp"}
    ours: dict[tuple[str, str, int, str, int], dict[str, Any]] = {}
    for line in (out / "flows.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("proto") == "tcp" and (
            ip_address(r["src"]) in CLIENTS or ip_address(r["dst"]) in CLIENTS
        ):
            ours[(r["proto"], r["src"], r["sport"], r["dst"], r["dport"])] = r
    assert ref, "no normal connection in the capture"
    assert set(ours) == set(ref)
    for key, f in ref.items():
        got = ours[key]
        assert (got["bytes"], got["sha256"]) == (f.bytes, f.sha256), key
        if f.complete:  # (the flood may end in the middle of the last one)
            assert got["complete"] is True, key
    return len(ref)


def pcap_frames(path: Path) -> int:
    """Frames of a classic pcap file, counted from its record headers."""
    data = path.read_bytes()
    n, off = 0, 24
    while off + 16 <= len(data):
        off += 16 + int.from_bytes(data[off + 8 : off + 12], "little")
        n += 1
    return n


def cap_of(summary: dict[str, Any], key: str) -> int:
    v = summary["memcap"][key]
    return v if v is not None else 1 << 64


@pytest.mark.skipif(not tshark_available(), reason="tshark not installed")
@pytest.mark.parametrize(("kind", "count", "caps", "total"), CASES, ids=[c[0] for c in CASES])
def test_flood_under_memcap(
    tmp_path: Path, kind: str, count: int, caps: list[str], total: int
) -> None:
    pcap = tmp_path / f"{kind}.pcap"
    mix = 0 if kind == "future-ts" else MIX
    frames = flood.write_pcap(pcap, flood.frames(kind, count, seed=5, mix=mix))
    free, _, _ = run_rss(pcap, "count", "--memcap", "0")
    summary, out, rss = run_rss(pcap, "streams", *caps)
    assert summary["packets"] == frames
    accounted(summary)
    assert cap_of(summary, "reassembly") + cap_of(summary, "flows") == total
    assert rss <= total + OVERHEAD, (rss, total)
    mem = summary["memcap"]
    assert mem["peak_reassembly_bytes"] <= cap_of(summary, "reassembly")
    assert mem["peak_flow_bytes"] <= cap_of(summary, "flows")
    hits = sum(layer["memory"]["cap_hits"] for layer in summary["layers"].values())
    tcp = summary["layers"]["tcp"]
    normal = normal_flows_exact(pcap, out)
    if kind == "future-ts":  # normal traffic: nothing capped, the clock's jumps said
        assert hits == 0
        assert summary["clock_jumps"] == {"forward": 1, "backward": 1}
        assert tcp["closed"]["accept"] == count // CONN_FRAMES
        return
    # the flood passes the cap when nothing bounds it, and every hit is said
    pool = "peak_reassembly_bytes" if kind == "far-ahead" else "peak_flow_bytes"
    key = "reassembly" if kind == "far-ahead" else "flows"
    assert free["memcap"][pool] > cap_of(summary, key)
    assert hits > 0
    evicted = sum(layer["memory"]["evicted"] for layer in summary["layers"].values())
    actions = sum(
        layer["memory"]["actions"]["evict-oldest"] for layer in summary["layers"].values()
    )
    # every hit is an evict-oldest action; one may evict several instances (a retention
    # buffer asks more than a flood instance frees), so evictions are not bounded by hits
    assert evicted > 0 and actions == hits
    closed_evicted = sum(layer["closed"]["evicted"] for layer in summary["layers"].values())
    # memcap evictions close live instances as evicted; those of lingering closed records
    # (spec linger:, already closed as accept) end their linger and are counted apart
    lingers = sum(layer["memory"]["evicted_closed"] for layer in summary["layers"].values())
    assert closed_evicted >= evicted - lingers
    # the flood is what gets evicted: every normal connection completes, both directions
    assert tcp["closed"]["accept"] == (frames - count) // CONN_FRAMES
    assert normal == 2 * -(-(frames - count) // CONN_FRAMES)


@pytest.mark.parametrize("policy", ["drop-flow", "bypass", "ignore", "evict-oldest"])
def test_far_ahead_policies(tmp_path: Path, policy: str) -> None:
    pcap = tmp_path / "far.pcap"
    count = 3500
    frames = flood.write_pcap(pcap, flood.frames("far-ahead", count, seed=5, mix=MIX))
    cap = 64 * 1024
    written = tmp_path / "written.pcap"
    summary, out, _ = run_rss(
        pcap,
        "events",
        *("--memcap-reassembly", str(cap), "--memcap-policy", policy),
        *("--write", str(written)),
    )
    assert summary["packets"] == frames
    assert summary["memcap"]["policy"] == policy
    accounted(summary)
    tcp = summary["layers"]["tcp"]
    mem = tcp["memory"]
    assert mem["cap_hits"] > 0
    assert tcp["closed"]["accept"] == (frames - count) // CONN_FRAMES  # normal ones complete
    # drop-flow's verdict (RG_DROP_FLOW): the packet that hit the cap does not pass (--write),
    # nor do the dropped flows' later ones, stopped at the instance lookup (dropped_by_verdict,
    # of which the memcap's dropped_packets: here all of them); the other policies drop none
    dropped = (
        mem["actions"]["drop-flow"] + tcp["dropped_by_verdict"] if policy == "drop-flow" else 0
    )
    assert mem["dropped_packets"] == (tcp["dropped_by_verdict"] if policy == "drop-flow" else 0)
    assert pcap_frames(written) == frames - dropped
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    memcap = [e for e in events if e.get("event") == "memcap"]
    assert memcap and all(e["policy"] == policy and e["layer"] == "tcp" for e in memcap)
    assert all(e["asked"] > 0 for e in memcap)
    peak = summary["memcap"]["peak_reassembly_bytes"]
    if policy == "ignore":
        assert peak > cap and mem["actions"]["ignore"] == mem["cap_hits"]
        assert all(e["flow_state"] is None for e in memcap)
        return
    assert peak <= cap
    if policy == "evict-oldest":
        assert mem["evicted"] > 0
        assert tcp["closed"]["evicted"] >= mem["evicted"] - mem["evicted_closed"]
        return
    state = "dropped" if policy == "drop-flow" else "bypassed"
    flows = {e["flow"] for e in memcap if e["flow_state"] == state}
    assert len(flows) == mem["actions"][policy] > 0  # each instance once
    if policy == "drop-flow":  # later packets of a dropped flow stop at the lookup, counted
        assert mem["dropped_packets"] > 0


def test_a_flow_cap_the_indexes_fill_is_refused(tmp_path: Path) -> None:
    """A flow memcap no larger than the empty tables' key indexes would evict (or refuse) every
    instance in the packet that creates it: the binary refuses it, naming the indexes' bytes,
    which equal the flow bytes a run over an empty capture accounts; one byte more runs, and
    `ignore` (count only) runs with any cap."""
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
    summary, _, _ = run_rss(empty, "count")
    indexes = sum(ly["memory"]["peak_flow_bytes"] for ly in summary["layers"].values())
    assert indexes > 0
    argv = [str(plain_tcp_ip()), str(empty), "--nf", "count", "--out", str(tmp_path / "o")]
    for cap in (1, indexes):
        p = subprocess.run([*argv, "--memcap-flows", str(cap)], capture_output=True, text=True)
        assert p.returncode == 1, p.stdout
        assert f"the flow memcap ({cap} bytes) leaves no room for instances" in p.stderr
        assert f"alone take {indexes} bytes" in p.stderr, p.stderr
        w = subprocess.run([*argv, "--memcap-flows", str(cap), "--workers", "2"], text=True,
                           capture_output=True)  # fmt: skip
        assert w.returncode == 1 and "leaves no room for instances" in w.stderr, w.stderr
    for extra in (["--memcap-flows", str(indexes + 1)], ["--memcap-flows", "1",
                  "--memcap-policy", "ignore"]):  # fmt: skip
        p = subprocess.run([*argv, *extra], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
