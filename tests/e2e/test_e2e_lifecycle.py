"""End to end: lifecycle events (timeout, evicted, destroyed) on a generated stack.

The test stack tests/specs/life/life.yaml is tcp_ip's TCP/IP path with lifecycle handlers on
every layer with instances; its handler file (life_handlers.c) counts each direction's payload
in per-flow user data, and its `destroyed` handlers log the counts and free that data (so
LeakSanitizer fails the --sanitize runs if an instance ends without them). It is built once per
variant (plain, --sanitize) and run on hand-made captures whose timestamps decide what ends how:

* `timeouts`: an idle TCP connection (expires), one closed by FIN and one by RST (accept), an
  incomplete IPv4 datagram and an incomplete IPv6 datagram (both expire), an idle TCP/IPv6
  connection (expires), and a connection that keeps the clock going until the end (flushed);
  also run with `--no-timeouts` (nothing expires);
* `evictions`: 300 TCP connections with `--cap tcp=100`, older connections touched at random
  in between, so the least recently used ones are not the oldest.

The expectations come from a model written here, independent of the stack: each frame says
which instances it touches, creates (a SYN or data for TCP, a fragment for IP) or ends (the RST,
the last ACK of the FIN exchange); the model replays the driver's documented clock (expiry runs
before the first packet at least one second after the previous run, at that packet's time; an
instance expires once that time minus its last packet's time reaches the layer's timeout), the
LRU eviction of a full layer and the final flush (layers in stack order, least recently used
first). Each run is compared with it three ways: the handler log (name, reason, time, key),
the `events` NF's calls of lifecycle handlers (`end`, `pkt`, `ts`), and the close reasons the
`flowstats` and `streams` NFs record; the streams' byte counts equal those the handlers counted
in their user data.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
from scapy.packet import Raw
from support import REPO_ROOT
from support.captures import SANITIZER_REPORT, T0, C, Capture, Rng, S, Tcp, eth, l4_bytes, run_stack

from rubikgen.sema.builtins import BUILTIN_EVENT_TABLE, CLOSE_REASONS, LIFECYCLE_EVENTS

REPO = REPO_ROOT
STACK = REPO / "tests" / "specs" / "life" / "life.yaml"
HANDLERS = REPO / "tests" / "specs" / "life" / "life_handlers.c"
NS = 1_000_000_000
# The protocols' timeouts (specs/protocols/*.yaml) and the stack's layers with instances, in
# stack order (the order of the final flush and of each expiry run).
TIMEOUT = {"ip": 30 * NS, "ipv6": 60 * NS, "tcp": 300 * NS, "tcp6": 300 * NS}
LAYERS = ("ip", "ipv6", "tcp", "tcp6")
# life.yaml's lifecycle handlers per layer and the close reasons each runs for, in run order
# (timeout/evicted first, destroyed last); ip_lost only for a datagram still in FRAG.
HANDLERS_OF = {
    "tcp": [
        ("tcp_timeout", {"expired"}),
        ("tcp_evicted", {"evicted"}),
        ("tcp_end", {"accept", "evicted", "expired", "flushed"}),
    ],
    "tcp6": [("tcp6_end", {"accept", "evicted", "expired", "flushed"})],
    "ip": [("ip_timeout", {"expired"}), ("ip_lost", {"evicted", "expired", "flushed"})],
    "ipv6": [("ip6_timeout", {"expired"})],
}
# tcp.yaml's PSM states, by value
TCP_STATES = "CLOSED SYN_SENT SYN_RCVD EST FIN_WAIT_1 FIN_WAIT_2 LAST_ACK TERMINATE".split()
FRAG_STATE = 1  # ip.yaml / ipv6.yaml: [DUMP, FRAG]


# ---------------------------------------------------------------------------------------------
# Captures with chosen timestamps, and the model
# ---------------------------------------------------------------------------------------------


class TimedCapture(Capture):
    """Frames at chosen times: `at(seconds)` sets the clock; each frame advances it by 1 ms."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[int] = []  # microseconds after T0
        self.now_us = 0

    def at(self, seconds: float) -> None:
        us = round(seconds * 1_000_000)
        assert us >= self.now_us, "time goes forward"
        self.now_us = us

    def add(self, frame: Any, *, cut: int | None = None, pad: bool = True) -> None:
        super().add(frame, cut=cut, pad=pad)
        self.stamps.append(self.now_us)
        self.now_us += 1000

    def write(self, path: Path) -> Path:
        import struct

        out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
        for (data, wire), us in zip(self.frames, self.stamps, strict=True):
            out.append(struct.pack("<IIII", T0 + us // 1_000_000, us % 1_000_000, len(data), wire))
            out.append(data)
        path.write_bytes(b"".join(out))
        return path

    def ts_ns(self, i: int) -> int:
        return (T0 * 1_000_000 + self.stamps[i]) * 1000


@dataclass
class Touch:
    layer: str
    inst: str  # the instance's name in the test
    create: bool  # creates the instance if there is none
    end: bool = False  # ends it in an accept state


@dataclass
class End:
    layer: str
    inst: str
    reason: str
    ts: int  # ns
    pkt: int  # packets processed before the lifecycle handlers run


@dataclass
class Model:
    """What a correct stack does with the instances, from each frame's touches."""

    cap: TimedCapture
    touches: dict[int, list[Touch]] = field(default_factory=dict)  # frame index -> touches
    keys: dict[str, str] = field(default_factory=dict)  # instance -> forward key (hex)
    # TCP connections: instance -> (client address, port, server address, port)
    ends_of: dict[str, tuple[str, int, str, int]] = field(default_factory=dict)

    def note(self, *touches: Touch) -> None:
        """The frame just added touches these instances (in layer order)."""
        self.touches[len(self.cap.frames) - 1] = list(touches)

    def run(self, *, caps: dict[str, int] | None = None, timeouts: bool = True) -> list[End]:
        caps = caps or {}
        live: dict[str, OrderedDict[str, int]] = {la: OrderedDict() for la in LAYERS}
        ends: list[End] = []
        next_expire, expire_on = 0, False
        n = len(self.cap.frames)
        for i in range(n):
            ts = self.cap.ts_ns(i)
            # the driver: expiry before the first packet at least 1 s after the last run
            if timeouts and ts >= next_expire:
                if expire_on:
                    for la in LAYERS:
                        for inst, last in list(live[la].items()):  # least recently used first
                            if ts - last < TIMEOUT[la]:
                                break
                            del live[la][inst]
                            ends.append(End(la, inst, "expired", ts, i))
                expire_on, next_expire = True, ts + NS
            for t in self.touches.get(i, []):
                table = live[t.layer]
                if t.inst in table:
                    table.move_to_end(t.inst)
                    table[t.inst] = ts
                elif t.create:
                    if len(table) >= caps.get(t.layer, 1 << 18):
                        victim = next(iter(table))
                        del table[victim]
                        ends.append(End(t.layer, victim, "evicted", ts, i + 1))
                    table[t.inst] = ts
                else:
                    continue
                if t.end:
                    del table[t.inst]
                    ends.append(End(t.layer, t.inst, "accept", ts, i + 1))
        last = self.cap.ts_ns(n - 1)
        for la in LAYERS:
            ends += [End(la, inst, "flushed", last, n) for inst in live[la]]
        return ends


def key_hex(*parts: bytes) -> str:
    return b"".join(parts).hex()


def tcp_key(t: Tcp) -> str:
    import ipaddress

    (ca, cp), (sa, sp) = t.end[C], t.end[S]
    return key_hex(
        ipaddress.ip_address(ca).packed,
        cp.to_bytes(2, "big"),
        ipaddress.ip_address(sa).packed,
        sp.to_bytes(2, "big"),
    )


class Conn:
    """A TCP connection whose every segment is noted in the model."""

    def __init__(self, model: Model, name: str, t: Tcp) -> None:
        self.model, self.name, self.t = model, name, t
        model.keys[name] = tcp_key(t)
        model.ends_of[name] = (*t.end[C], *t.end[S])

    def send(self, side: str, data: bytes = b"", *, flags: str = "PA", end: bool = False) -> None:
        self.t.send(side, data, flags=flags)
        creates = "S" in flags or bool(data)  # tcp.yaml create_if: header.syn || payload_len > 0
        self.model.note(Touch(self.t.layer, self.name, creates, end))

    def handshake(self, data: bytes = b"") -> None:
        self.send(C, flags="S")
        self.t.synced[C] = True
        self.send(S, flags="SA")
        self.t.synced[S] = True
        self.send(C, flags="A")
        if data:
            self.send(C, data)
            self.send(S, flags="A")

    def fin_close(self) -> None:
        self.send(C, flags="FA")
        self.send(S, flags="FA")
        self.send(C, flags="A", end=True)  # both FINs in and acknowledged: TERMINATE


def timeouts_capture(out: Path) -> tuple[Path, Model, dict[str, tuple[int, int]]]:
    """The timeouts capture; also the payload bytes each connection sent (c2s, s2c)."""
    rng, cap = Rng(1801), TimedCapture()
    model = Model(cap)
    sent: dict[str, tuple[int, int]] = {}
    # A: idle after its first request: expires (tcp timeout 300 s)
    cap.at(0)
    a = Conn(model, "A", Tcp(cap, ("10.1.0.1", 41001), ("10.1.0.2", 8080)))
    a.handshake(rng.data(700))
    sent["A"] = (700, 0)
    # C: closed by FIN; D: reset by the server (both: accept)
    cap.at(1)
    c = Conn(model, "C", Tcp(cap, ("10.1.0.1", 41002), ("10.1.0.2", 8080)))
    c.handshake(rng.data(300))
    c.send(S, rng.data(200))
    c.send(C, flags="A")
    c.fin_close()
    sent["C"] = (300, 200)
    cap.at(2)
    d = Conn(model, "D", Tcp(cap, ("10.1.0.1", 41003), ("10.1.0.2", 8080)))
    d.handshake(rng.data(100))
    d.send(S, flags="RA", end=True)
    sent["D"] = (100, 0)
    # an IPv4 datagram whose second fragment never comes (ip timeout 30 s)
    cap.at(3)
    l4 = l4_bytes(IP(src="10.1.0.5", dst="10.1.0.6") / UDP(sport=5000, dport=6000) / rng.data(64))
    cap.add(eth(IP(src="10.1.0.5", dst="10.1.0.6", id=0x4242, proto=17, flags="MF") / l4[:40]))
    model.note(Touch("ip", "frag4", True))
    model.keys["frag4"] = key_hex(
        bytes([10, 1, 0, 5]), bytes([10, 1, 0, 6]), (0x4242).to_bytes(2, "big"), bytes([17])
    )
    # an IPv6 datagram whose last fragment never comes (ipv6 timeout 60 s)
    cap.at(4)
    frag = IPv6ExtHdrFragment(nh=17, offset=0, m=1, id=0xC0FFEE)
    cap.add(eth(IPv6(src="2001:db8:1::5", dst="2001:db8:1::6") / frag / Raw(rng.data(48))))
    model.note(Touch("ipv6", "frag6", True))
    # E: TCP over IPv6, idle after its first request
    cap.at(5)
    e = Conn(model, "E", Tcp(cap, ("2001:db8:1::1", 42001), ("2001:db8:1::2", 8080)))
    e.handshake(rng.data(50))
    sent["E"] = (50, 0)
    # B: a request every 10 s keeps the clock going; the times around A's deadline (300.004 s)
    # put it between two expiry runs, so A ends at the run after (300.8 s), not at its deadline
    b = Conn(model, "B", Tcp(cap, ("10.1.0.3", 41004), ("10.1.0.4", 8080)))
    cap.at(6)
    b.handshake(rng.data(10))
    n_b = 10
    for t in [*range(10, 300, 10), 299.5, 300.2, 300.8, 305, 320]:
        cap.at(t)
        b.send(C, rng.data(10))
        b.send(S, flags="A")
        n_b += 10
    sent["B"] = (n_b, 0)
    return cap.write(out / "lifecycle-timeouts.pcap"), model, sent


def evictions_capture(out: Path) -> tuple[Path, Model]:
    """300 connections, each a handshake and a request; after each new one from the 60th on,
    a live older connection (as the model knows it) sends another request."""
    rng, cap = Rng(1802), TimedCapture()
    model = Model(cap)
    conns: list[Conn] = []
    for i in range(300):
        t = Tcp(cap, (f"10.2.{i // 200}.{i % 200 + 1}", 30000 + i), ("10.9.9.9", 80))
        conn = Conn(model, f"e{i}", t)
        conns.append(conn)
        conn.handshake(rng.data(20))
        if i >= 60:
            live = _live_now(model, cap=100)
            older = [x for x in conns[:-1] if x.name in live]
            pick = rng.choice(older)
            pick.send(C, rng.data(20))
            pick.send(S, flags="A")
    return cap.write(out / "lifecycle-evictions.pcap"), model


def _live_now(model: Model, cap: int) -> set[str]:
    """The connections the model has live after the frames so far (no time passes here)."""
    live: OrderedDict[str, None] = OrderedDict()
    for i in sorted(model.touches):
        for t in model.touches[i]:
            if t.inst in live:
                live.move_to_end(t.inst)
            elif t.create:
                if len(live) >= cap:
                    live.popitem(last=False)
                live[t.inst] = None
    return set(live)


# ---------------------------------------------------------------------------------------------
# Building and running
# ---------------------------------------------------------------------------------------------


def build(out: Path, sanitize: bool, opt: int) -> Path:
    argv = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out), f"-O{opt}"]
    argv += ["--handlers", str(HANDLERS)] + (["--sanitize"] if sanitize else [])
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    binary = out / ("life-asan" if sanitize else "life")
    assert binary.is_file()
    return binary


@dataclass
class Out:
    summary: dict[str, Any]
    log: list[list[str]]  # handler log lines, split
    dir: Path

    def jsonl(self, name: str) -> list[dict[str, Any]]:
        text = (self.dir / name).read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def run(binary: Path, pcap: Path, out: Path, nf: str, *args: str) -> Out:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "handlers.log"
    env = dict(os.environ, LIFE_LOG=str(log))
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=300)
    report = [m for m in SANITIZER_REPORT if m in proc.stderr]
    assert proc.returncode == 0 and not report, f"{argv}: {proc.returncode}\n{proc.stderr[-3000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = [ln.split() for ln in log.read_text().splitlines()] if log.exists() else []
    return Out(summary, lines, out)


# -O2 (fast-destroy: instances ended by the packet that made them never enter the table) and
# -O0 (every instance does) end instances on different paths; --sanitize: ASan, UBSan, LSan.
@pytest.fixture(
    scope="session", params=[(False, 2), (True, 2), (False, 0)], ids=["plain", "asan", "O0"]
)
def binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    sanitize, opt = request.param
    return build(tmp_path_factory.mktemp(f"life-{request.param_index}"), sanitize, opt)


@pytest.fixture(scope="session")
def timeouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Model, dict[str, Any]]:
    return timeouts_capture(tmp_path_factory.mktemp("life-cap"))


@pytest.fixture(scope="session")
def evictions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Model]:
    return evictions_capture(tmp_path_factory.mktemp("life-cap"))


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def expected_calls(model: Model, ends: list[End]) -> list[tuple[str, str, str, int, int]]:
    """(handler, instance, reason, ts, pkt) of every lifecycle handler call, in call order."""
    calls = []
    for e in ends:
        for h, reasons in HANDLERS_OF[e.layer]:
            if e.reason in reasons:
                calls.append((h, e.inst, e.reason, e.ts, e.pkt))
    return calls


def check_run(model: Model, ends: list[End], events: Out, tmp: Path, binary: Path,
              pcap: Path, *args: str) -> dict[int, str]:  # fmt: skip
    """The handler log and the events NF's lifecycle calls against the model; the
    flowstats and streams NFs' close reasons. Returns uid -> instance name."""
    want = expected_calls(model, ends)
    # 1. the handler log: names, reasons, times and the instance's key, in call order
    got_log = [(ln[0], ln[3], int(ln[4])) for ln in events.log]
    assert got_log == [(h, r, ts) for h, _i, r, ts, _p in want]
    uid_of: dict[str, int] = {}
    name_of: dict[int, str] = {}
    for ln, (_h, inst, _r, _ts, _p) in zip(events.log, want, strict=True):
        uid = int(ln[2])
        if inst in model.keys:
            assert ln[5] == model.keys[inst], f"{ln[0]} of {inst}: key {ln[5]}"
        assert uid_of.setdefault(inst, uid) == uid, f"{inst}: one instance, one uid"
        name_of[uid] = inst
    # 2. the events NF: the same calls, with "end", "pkt" and "ts"; packet calls have no "end"
    calls = events.jsonl("events.jsonl")
    life = [c for c in calls if "end" in c]
    assert [(c["handler"], c["flow"], c["end"], c["ts"], c["pkt"]) for c in life] == [
        (h, uid_of[inst], r, ts, pkt) for h, inst, r, ts, pkt in want
    ]
    assert all(c["handler"].endswith("_data") for c in calls if "end" not in c and "handler" in c)
    # every instance's state: an accept state's value is never reported by a timeout handler
    for c in life:
        if c["handler"] in ("ip_timeout", "ip_lost", "ip6_timeout"):
            assert c["args"]["state"] == FRAG_STATE
    # 3. flowstats and streams record the same close reason per instance
    close = {uid_of[e.inst]: e.reason for e in ends if e.inst in uid_of}
    fs = run(binary, pcap, tmp / "flowstats", "flowstats", *args)
    recs = {r["uid"]: r for r in fs.jsonl("flowstats.jsonl")}
    for uid, reason in close.items():
        assert recs[uid]["close"] == reason, f"flowstats of {name_of[uid]}"
    # ... and the events NF's close lines, for the flows (the layers with two sides)
    ev_close = {c["flow"]: c for c in calls if c.get("event") == "close"}
    for uid, reason in close.items():
        if uid in ev_close:
            assert ev_close[uid]["close"] == reason, f"events of {name_of[uid]}"
            assert ev_close[uid]["reason"] == recs[uid]["reason"], f"events of {name_of[uid]}"
    assert {u for u, r in recs.items() if r["layer"] in ("tcp", "tcp6", "udp", "udp6")} <= set(
        ev_close
    )
    st = run(binary, pcap, tmp / "streams", "streams", *args)
    flows = st.jsonl("flows.jsonl")
    by_uid: dict[int, list[dict[str, Any]]] = {}
    for f in flows:
        by_uid.setdefault(f["uid"], []).append(f)
    for uid, reason in close.items():
        inst = name_of[uid]
        if inst in model.keys and uid in by_uid:
            assert {f["close"] for f in by_uid[uid]} == {reason}, f"flows.jsonl of {inst}"
    # the handlers' per-direction byte counts (user data) equal the streams'
    for ln in st.log:
        if ln[0] in ("tcp_end", "tcp6_end"):
            uid = int(ln[2])
            dirs = {f["dir"]: f["bytes"] for f in by_uid[uid]}
            assert (int(ln[7]), int(ln[8])) == (dirs["c2s"], dirs["s2c"]), name_of.get(uid)
    return name_of


def test_timeouts(binary: Path, timeouts: tuple[Path, Model, dict[str, Any]],
                  tmp_path: Path) -> None:  # fmt: skip
    pcap, model, sent = timeouts
    ends = model.run()
    # the capture's timing implies these ends (the model just replays it)
    why = {e.inst: (e.reason, e.ts) for e in ends}
    assert {k: r for k, (r, _t) in why.items()} == {
        "A": "expired",
        "C": "accept",
        "D": "accept",
        "frag4": "expired",
        "frag6": "expired",
        "E": "expired",
        "B": "flushed",
    }
    a_ts = why["A"][1]
    assert a_ts == (T0 * 1_000_000 + 300_800_000) * 1000, "A ends at the 300.8 s packet"
    events = run(binary, pcap, tmp_path / "events", "events")
    name_of = check_run(model, ends, events, tmp_path, binary, pcap)
    # handler arguments: A timed out in EST, the closed ones reached TERMINATE, C saw both
    # FINs acknowledged
    life = [c for c in events.jsonl("events.jsonl") if "end" in c]
    by = {(c["handler"], name_of[c["flow"]]): c["args"] for c in life}
    assert by[("tcp_timeout", "A")]["state"] == TCP_STATES.index("EST")
    # perm.a_left: what the server acknowledged of A's data, ISN 1000 + SYN + 700 bytes
    assert by[("tcp_timeout", "A")]["a_left"] == 1000 + 1 + 700
    assert by[("tcp_end", "A")]["state"] == TCP_STATES.index("EST")
    terminate = TCP_STATES.index("TERMINATE")
    assert by[("tcp_end", "C")] == {"state": terminate, "afin": 1, "pfin": 1}
    assert by[("tcp_end", "D")] == {"state": terminate, "afin": 0, "pfin": 0}
    assert by[("tcp_end", "B")]["state"] == TCP_STATES.index("EST")
    # the streams' byte counts of each connection are what it sent
    st = (tmp_path / "streams" / "flows.jsonl").read_text().splitlines()
    got = {}
    for f in map(json.loads, st):
        if f["layer"] in ("tcp", "tcp6"):
            got.setdefault(name_of[f["uid"]], {})[f["dir"]] = f["bytes"]
    assert {k: (v["c2s"], v["s2c"]) for k, v in got.items()} == sent
    assert events.summary["live_at_end"] == 1  # B


def test_no_timeouts(binary: Path, timeouts: tuple[Path, Model, dict[str, Any]],
                     tmp_path: Path) -> None:  # fmt: skip
    pcap, model, _sent = timeouts
    ends = model.run(timeouts=False)
    assert {e.inst: e.reason for e in ends} == {
        "A": "flushed",
        "C": "accept",
        "D": "accept",
        "frag4": "flushed",
        "frag6": "flushed",
        "E": "flushed",
        "B": "flushed",
    }
    events = run(binary, pcap, tmp_path / "events", "events", "--no-timeouts")
    check_run(model, ends, events, tmp_path, binary, pcap, "--no-timeouts")
    assert not [c for c in events.jsonl("events.jsonl") if c.get("end") == "expired"]


def test_evictions(binary: Path, evictions: tuple[Path, Model], tmp_path: Path) -> None:
    pcap, model = evictions
    ends = model.run(caps={"tcp": 100})
    evicted = [e.inst for e in ends if e.reason == "evicted"]
    assert len(evicted) == 200 and len([e for e in ends if e.reason == "flushed"]) == 100
    # touching older connections made LRU differ from first-in-first-out
    assert evicted != [f"e{i}" for i in range(200)]
    events = run(binary, pcap, tmp_path / "events", "events", "--cap", "tcp=100")
    check_run(model, ends, events, tmp_path, binary, pcap, "--cap", "tcp=100")


def test_close_reasons_are_one_table() -> None:
    """The C table of close reasons (rg_api.h) is the Python one, and the lifecycle events
    name only those reasons."""
    text = (REPO / "runtime-c" / "include" / "rg" / "rg_api.h").read_text()
    got = re.findall(r'X\((RG_CLOSE_\w+), (\d+), "(\w+)"\)', text)
    assert [(name, c, int(v)) for c, v, name in got] == list(CLOSE_REASONS)
    names = {name for name, _c, _v in CLOSE_REASONS}
    assert all(set(r) <= names for r in LIFECYCLE_EVENTS.values())
    assert [e.name for e in BUILTIN_EVENT_TABLE if e.lifecycle] == [
        "timeout",
        "evicted",
        "destroyed",
    ]


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_tcp_ip_close_reasons(
    sanitize: bool,
    timeouts: tuple[Path, Model, dict[str, Any]],
    evictions: tuple[Path, Model],
    tmp_path: Path,
) -> None:
    """The stock tcp_ip stack (no lifecycle handlers): the streams NF's close reason of every
    TCP connection is the model's, with timeouts, without, and under --cap tcp=100."""
    runs = [
        (timeouts[0], timeouts[1], {}, True, ()),
        (timeouts[0], timeouts[1], {}, False, ("--no-timeouts",)),
        (evictions[0], evictions[1], {"tcp": 100}, True, ("--cap", "tcp=100")),
    ]
    for k, (pcap, model, caps, on, args) in enumerate(runs):
        want = {
            model.ends_of[e.inst]: e.reason
            for e in model.run(caps=caps, timeouts=on)
            if e.inst in model.ends_of
        }
        r = run_stack(pcap, tmp_path / str(k), sanitize=sanitize, args=args)
        report = [m for m in SANITIZER_REPORT if m in r.stderr]
        assert r.returncode == 0 and not report, r.stderr[-3000:]
        got = {}
        for line in (tmp_path / str(k) / "flows.jsonl").read_text().splitlines():
            f = json.loads(line)
            if f["layer"] in ("tcp", "tcp6") and f["dir"] == "c2s":
                got[(f["src"], f["sport"], f["dst"], f["dport"])] = f["close"]
        assert got == want, args
