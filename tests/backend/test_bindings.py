"""Python bindings (rubikgen.bindings): the events a stack's extension yields on a real
capture are, one by one, the `--nf events` records of the stack's binary on the same capture,
and its closes are the `--nf flowstats --flowstats-all` records; the README's SNI example
prints what tshark finds."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT
from support.oracle.tshark import TRACES, tshark_available

from rubikgen.bindings import Event, Stack
from rubikgen.toolchain.build import build

REPO = REPO_ROOT
SPEC = REPO / "specs" / "stacks" / "tcp_ip.yaml"
BUILD = REPO / "build" / "tcp_ip"
# real captures with retransmissions, out-of-order segments, capture loss (gaps), RSTs,
# mid-stream connections, IPv6 and IPv4 fragments
CAPTURES = [
    "mixed-android-mobile.pcap",
    "http-ooo-lost-rst-tlpw1.pcap",
    "ipv4-frag-socks5-http.pcap",
]
SEED = 7  # the flow table's hash seed: the same in both, so flushes close in the same order


@pytest.fixture(scope="module")
def stack_module() -> Path:
    return build(SPEC, BUILD, quiet=True).binary


def _record(ev: Event) -> dict[str, Any]:
    """An event as the events NF writes it (handlers/nf/rg_nf.h)."""
    if ev.kind == "gap":
        return {
            "ts": ev.ts,
            "event": "gap",
            "layer": ev.layer,
            "flow": ev.flow,
            "dir": ev.dir,
            **ev.args,
        }
    rec: dict[str, Any] = {"pkt": ev.pkt, "ts": ev.ts, "handler": ev.name, "layer": ev.layer}
    rec.update({"flow": ev.flow, "dir": ev.dir})
    if ev.end:
        rec["end"] = ev.end
    args: dict[str, Any] = {}
    for name, v in ev.args.items():
        if isinstance(v, bytes):
            v = {"len": len(v), "hex": v[:64].hex(), "sha256": hashlib.sha256(v).hexdigest()}
        args[name] = v
    rec["args"] = args
    return rec


def _binary(binary: Path, pcap: Path, nf: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    cmd = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--seed", str(SEED), *extra]
    subprocess.run(cmd, check=True, capture_output=True)
    name = {"events": "events.jsonl", "flowstats": "flowstats.jsonl"}[nf]
    return [json.loads(x) for x in (out / name).read_text().splitlines()]


@pytest.mark.parametrize("capture", CAPTURES)
def test_events_equal_the_binary_events(capture: str, stack_module: Path, tmp_path: Path) -> None:
    pcap = TRACES / capture
    if not pcap.is_file():
        pytest.skip(f"{pcap} not present")
    stack = Stack.build(SPEC, BUILD, seed=SEED)
    events = list(stack.feed_pcap(pcap))
    lines = _binary(stack_module, pcap, "events", tmp_path / "ev")
    want = [x for x in lines if x.get("event") != "close"]
    got = [_record(e) for e in events if e.kind != "close"]
    assert len(want) >= 5, "a comparison on too few events proves little"
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, f"event {i}: bindings {g} != binary {w}"
    assert len(got) == len(want)
    # closes: every instance, in close order, with the endpoints the flowstats NF reads
    closes = [e for e in events if e.kind == "close"]
    fs = _binary(stack_module, pcap, "flowstats", tmp_path / "fs", "--flowstats-all")
    assert [(c.flow, c.layer, c.end, c.args["complete"], c.args["state"]) for c in closes] == [
        (f["uid"], f["layer"], f["close"], f["complete"], f["state"]) for f in fs
    ]
    for c, f in zip(closes, fs, strict=True):
        assert (c.key.src, c.key.dst) == (f["src"], f["dst"]), (c, f)
        assert (c.key.sport, c.key.dport) == (f.get("sport"), f.get("dport")), (c, f)
        # the Community ID, computed by the same C function (test_community_id.py checks the
        # flowstats one, and the bindings', against the reference implementation); an ICMP
        # conversation's from its first message's type and code, as the NFs' records
        assert c.key.community_id == f["community_id"], (c, f)
        # how it ended: what every NF's record says (rg_nf_end_fields)
        for k in ("reason", "late_packets", "originator", "conn_state", "history"):
            assert c.args.get(k) == f.get(k), (k, c, f)
    # the events NF's close lines are the closes of the flows (layers with two sides)
    ev_closes = {x["flow"]: x for x in lines if x.get("event") == "close"}
    assert ev_closes
    for c in closes:
        x = ev_closes.get(c.flow)
        if x is None:
            continue
        assert (x["reason"], x["late_packets"], x["close"]) == (
            c.args["reason"],
            c.args["late_packets"],
            c.end,
        )
        assert x["community_id"] == c.key.community_id, (x, c)
    assert set(ev_closes) <= {c.flow for c in closes}


def test_feed_and_callbacks(stack_module: Path) -> None:
    """Frame by frame with a callback: the same calls as feed_pcap, byte arguments as
    memoryviews that are released after the callback."""
    from scapy.utils import PcapReader

    pcap = TRACES / CAPTURES[1]
    if not pcap.is_file():
        pytest.skip(f"{pcap} not present")
    whole = [e for e in Stack.build(SPEC, BUILD, seed=SEED).feed_pcap(pcap) if e.kind == "call"]
    stack = Stack.build(SPEC, BUILD, seed=SEED)
    seen: list[Event] = []
    views: list[memoryview] = []

    def keep(ev: Event) -> None:
        if ev.kind != "call":
            return
        data = ev.args.get("data")
        if isinstance(data, memoryview):
            views.append(data)
            ev.args["data"] = bytes(data)
        seen.append(ev)

    stack.on_event(keep)
    with PcapReader(str(pcap)) as r:
        for p in r:
            assert stack.feed(bytes(p), int(p.time * 1_000_000_000)) == []
    stack.flush()
    assert [_record(e) for e in seen] == [_record(e) for e in whole]
    assert views and all(_released(v) for v in views)

    def boom(ev: Event) -> None:
        raise KeyError("from the callback")

    stack2 = Stack.build(SPEC, BUILD, seed=SEED)
    stack2.on_event(boom)
    with pytest.raises(KeyError, match="from the callback"):
        list(stack2.feed_pcap(pcap))


def _released(v: memoryview) -> bool:
    try:
        len(v)
    except ValueError:
        return True
    return False


def test_readme_sni_example(tmp_path: Path) -> None:
    """The README's example prints the SNI of every ClientHello tshark finds."""
    from support import readme_snippets

    if not tshark_available():
        pytest.skip("tshark not installed")
    from support.tls import tshark_tcp_hellos

    (code,) = readme_snippets.blocks("Python bindings", "python")
    assert len(code.strip().splitlines()) <= 10
    script = tmp_path / "sni.py"
    script.write_text(code)
    pcap = TRACES / "mixed-android-mobile.pcap"
    if not pcap.is_file():
        pytest.skip(f"{pcap} not present")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, str(script), str(pcap)], cwd=REPO, env=env,
                       capture_output=True, text=True, check=True)  # fmt: skip
    got = Counter(tuple(line.split(" ", 2)) for line in r.stdout.splitlines())
    want = Counter((str(h[1]), str(h[3]), h[4]) for h in tshark_tcp_hellos(pcap).elements())
    assert got == want and sum(want.values()) >= 5, (got, want)


def test_any_bytes_are_survived(stack_module: Path) -> None:
    """Frames of random bytes and real frames cut and flipped at random: the stack takes them
    all (no crash, only events) on every link type."""
    import random

    from scapy.utils import PcapReader

    rng = random.Random(11)
    pcap = TRACES / CAPTURES[0]
    real = []
    if pcap.is_file():
        with PcapReader(str(pcap)) as r:
            real = [bytes(p) for _, p in zip(range(200), r, strict=False)]
    stack = Stack.build(SPEC, BUILD, seed=SEED)
    n = 0
    for i in range(3000):
        if real and i % 2:
            b = bytearray(rng.choice(real)[: rng.randrange(1, 1600)])
            for _ in range(rng.randrange(1, 6)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            b = bytearray(rng.randbytes(rng.randrange(0, 120)))
        link = ("ether", "raw", "null", "sll", "sll2")[i % 5]
        for ev in stack.feed(bytes(b), 1_000_000_000 + i * 1000, link):
            assert isinstance(ev, Event)
            n += 1
    stack.flush()
    assert stack.frames == 3000
