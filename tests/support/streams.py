"""Shared by tests; moved from e2e/test_e2e_tshark.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from support.captures import (
    REPO,
    Run,
    first_difference,
    flow_key,
)
from support.oracle import (
    Stream,
)


def our_flows(run: Run) -> dict[Endpoints, list[Flow]]:
    flows: dict[Any, Flow] = {}
    ends: dict[Any, Endpoints] = {}
    for (proto, src, sport, dst, dport), rec in run.directions():
        flow = flows.setdefault(rec["uid"], Flow(rec["uid"], proto))
        flow.by_sender[(src, sport)] = rec
        ends[rec["uid"]] = (proto, frozenset([(src, sport), (dst, dport)]))
    out: dict[Endpoints, list[Flow]] = defaultdict(list)
    for uid in sorted(flows, key=_uid_order):
        out[ends[uid]].append(flows[uid])
    return out


def _endpoints(s: Stream) -> Endpoints:
    f = s.c2s.flow
    _, src, sport, dst, dport = flow_key(f.proto, f.src, f.sport, f.dst, f.dport)
    return (s.proto, frozenset([(src, sport), (dst, dport)]))


def compare(
    name: str, run: Run, streams: tuple[Stream, ...], times: tuple[int, ...] = ()
) -> tuple[list[str], Totals]:
    totals = Totals(captures=1)
    problems: list[str] = []
    ours = our_flows(run)
    theirs: dict[Endpoints, list[Stream]] = defaultdict(list)
    for s in streams:
        theirs[_endpoints(s)].append(s)
    for ends, group in theirs.items():
        mine = ours.pop(ends, [])
        if len(group) == 1:
            matched = [(group[0], mine)]
        else:
            matched = [(s, mine[k : k + 1]) for k, s in enumerate(group)]
            if len(mine) != len(group):
                problems.append(
                    f"{_label(ends)}: tshark has {len(group)} streams (a reused 4-tuple),"
                    f" the stack {len(mine)} flows; matched in order"
                )
        for s, flows in matched:
            label = f"{s.proto} {s.index}"
            if not_compared(name, s) is not None:
                totals.skipped += 1
                continue
            totals.streams += 1
            problems += check_flow(name, s, flows, times)
            totals.split += len(flows) > 1
            reason = EXCEPTIONS.get((name, label))
            differs = False
            for d in s.directions:
                f = d.flow
                _, src, sport, _, _ = flow_key(f.proto, f.src, f.sport, f.dst, f.dport)
                recs = [fl.by_sender[(src, sport)] for fl in flows if (src, sport) in fl.by_sender]
                got = b"".join(run.data(r) for r in recs)
                totals.directions += 1
                totals.bytes += len(d.data)
                if got == d.data:
                    continue
                differs = True
                totals.mismatches += 1
                if reason is not None:
                    totals.excepted += 1
                    continue
                problems.append(
                    f"{name} [{label}] {f.dir} {f.src}:{f.sport} -> {f.dst}:{f.dport}:"
                    f" tshark {len(d.data)} bytes, stack {len(got)} bytes in {len(recs)}"
                    f" flow(s) of {len(flows)}, first difference at"
                    f" {first_difference(got, d.data)}; tshark: {len(d.gaps)} gaps"
                    f" {[(g.offset, g.missing) for g in d.gaps][:4]}, {d.truncated_frames}"
                    f" truncated frames, {s.malformed_frames} malformed, {d.packets} packets"
                )
            if reason is not None and not differs:
                totals.stale.append(f"{name} [{label}]: matches now; EXCEPTIONS says: {reason}")
    # flows of ours between endpoints tshark has no stream for
    for ends, flows in ours.items():
        label = _label(ends)
        sent = sum(r["bytes"] for fl in flows for r in fl.by_sender.values())
        if sent and (name, label) not in EXCEPTIONS:
            totals.mismatches += 1
            problems.append(f"{name} [{label}]: {len(flows)} flow(s), {sent} bytes; not in tshark")
    return problems, totals


#: (capture, stream) -> why that stream's bytes may differ from tshark's. `stream` is
#: "tcp N" / "udp N" for tshark's stream N, or "tcp A:P B:Q" / "udp A:P B:Q" for a flow of
#: ours between endpoints tshark has no stream for. A failing run prints the labels to use.
#: An entry that matches again fails the test (stale): none may hide a fixed difference.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("http-ooo-lost-rst-tlpw1.pcap", "tcp 0"): (
        "gap recovery: the server's out-of-order data after a hole no captured ACK covers stays"
        " in tshark's fragment list and is never printed; the stack delivers it when the RST"
        " ends the connection (tcp.yaml `sequence.drain`), tshark's bytes being a prefix of"
        " its own (tests/e2e/test_gaps.py checks this shape byte for byte against a model)"
    ),
}


def not_compared(name: str, s: Stream) -> str | None:
    """Why tshark's stream `s` of capture `name` is not compared, or None. The hook for rules
    that depend on the stack's options (e.g. mid-stream pickup)."""
    return NOT_COMPARED.get((name, f"{s.proto} {s.index}"))


Endpoints = tuple[str, frozenset[tuple[str, int]]]


@dataclass
class Totals:
    captures: int = 0
    streams: int = 0  # tshark streams compared
    skipped: int = 0  # streams not compared (NOT_COMPARED)
    directions: int = 0  # flow directions compared
    bytes: int = 0  # bytes compared (tshark's side)
    mismatches: int = 0
    excepted: int = 0  # directions that differ, with an EXCEPTIONS entry
    split: int = 0  # tshark streams the stack delivered as several instances
    stale: list[str] = field(default_factory=list)  # EXCEPTIONS entries that now match

    def add(self, other: Totals) -> None:
        for name in ("captures", "streams", "skipped", "directions", "bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mismatches += other.mismatches
        self.excepted += other.excepted
        self.split += other.split
        self.stale += other.stale

    def line(self) -> str:
        return (
            f"{self.captures} captures, {self.streams} streams ({self.skipped} not compared),"
            f" {self.directions} flow directions,"
            f" {self.bytes} bytes compared; {self.mismatches} directions differ"
            f" ({self.excepted} in EXCEPTIONS); {self.split} streams split into several flows"
        )


@dataclass
class Flow:
    """One instance of ours: its records by sender (address, port)."""

    uid: Any
    proto: str
    by_sender: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


def _uid_order(uid: Any) -> tuple[int, str]:
    try:
        return (int(uid), "")
    except (TypeError, ValueError):
        return (1 << 62, str(uid))


def _label(ends: Endpoints) -> str:
    a, b = sorted(ends[1])
    return f"{ends[0]} {a[0]}:{a[1]} {b[0]}:{b[1]}"


def check_flow(name: str, s: Stream, flows: list[Flow], times: tuple[int, ...]) -> list[str]:
    """`dir`, `complete` and `close` of our instances for tshark's stream `s` (see the module
    docstring). `times`: every frame's time; empty: close is not checked."""
    label = f"{name} [{s.proto} {s.index}]"
    if not flows:
        return []
    out = []
    recs = [next(iter(fl.by_sender.values())) for fl in flows]
    c2s = s.c2s.flow
    _, a, pa, _, _ = flow_key(c2s.proto, c2s.src, c2s.sport, c2s.dst, c2s.dport)
    first = [r for r in flows[0].by_sender.values() if r["dir"] == "c2s"]
    if s.first_creates and first and (first[0]["src"], first[0]["sport"]) != (a, pa):
        out.append(f"{label}: c2s is {first[0]['src']}:{first[0]['sport']}, tshark {a}:{pa}")
    for fl in flows:
        dirs = sorted(r["dir"] for r in fl.by_sender.values())
        if dirs != ["c2s", "s2c"]:
            out.append(f"{label}: uid {fl.uid} has directions {dirs}")
    last = recs[-1]
    if s.proto == "tcp":
        closed = "rst" in s.c2s.sent | s.s2c.sent or "fin_acked" in s.c2s.sent & s.s2c.sent
        setup = "syn" in s.c2s.sent and "synack" in s.s2c.sent
        # the handshake is the first instance's; after a split (a close, then more data) the
        # first instance is complete if the close was its own
        want = setup and (closed if len(recs) == 1 else recs[0]["close"] == "accept")
        if recs[0]["complete"] != want:
            out.append(
                f"{label}: complete {recs[0]['complete']}, tshark: sent {sorted(s.c2s.sent)}"
                f" / {sorted(s.s2c.sent)} ({len(recs)} instance(s))"
            )
        out += [f"{label}: uid {r['uid']} is complete without a handshake of its own"
                for r in recs[1:] if r["complete"]]  # fmt: skip
    else:
        closed = False
        if last.get("complete") is not None:
            out.append(f"{label}: UDP has no PSM, complete is {last['complete']}")
    for r in recs[:-1]:
        if r["close"] == "flushed":
            out.append(f"{label}: uid {r['uid']} was still open at the end, yet not the last")
    if closed:
        want = {"accept"}
    elif not times:
        want = {"accept", "expired", "flushed", "evicted"}
    else:
        idle = _timeout_ns(s.proto)
        clock = flow_clock(times)
        last_ts = clock.get(s.last_ts, s.last_ts)
        after = [t for t in clock.values() if t >= last_ts + idle]
        if any(t > last_ts + idle + EXPIRY_PERIOD_NS for t in after):
            want = {"expired"}
        else:
            want = {"expired", "flushed"} if after else {"flushed"}
    if last["close"] not in want:
        out.append(f"{label}: close {last['close']}, expected {sorted(want)}")
    return out


#: (capture, "tcp N" / "udp N") -> why the stream is not compared at all. Empty: today every
#: stream of every eligible capture is compared, mid-stream ones included.
NOT_COMPARED: dict[tuple[str, str], str] = {}


def _timeout_ns(protocol: str) -> int:
    """A protocol spec's idle `timeout` ("300s", "2m", "500ms") in ns."""
    import re

    import yaml

    spec = yaml.safe_load((REPO / "specs" / "protocols" / f"{protocol}.yaml").read_text())
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", str(spec["timeout"]))
    assert m, spec["timeout"]
    unit = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}[m[2]]
    return int(m[1]) * unit


EXPIRY_PERIOD_NS = 10**9  # the driver calls expire once per second of packet time


def flow_clock(times: tuple[int, ...]) -> dict[int, int]:
    """Frame time -> the flow clock it is processed at, by the documented clock guard
    (docs/reliability.md): within the bound of the clock either way, a frame advances it or
    leaves it; beyond, the clock stays and later frames follow on from there (a capture merged
    from two recorded years apart expires nothing at the seam), unless they fit the offset from
    before that jump, which then comes back; 16 frames (or 60 s) agreeing with the new offset
    first make it the base (re-synchronisation: the old offset is forgotten)."""
    out: dict[int, int] = {}
    now, off, prev = (times[0], 0, 0) if times else (0, 0, 0)
    agree, t0 = -1, 0  # frames agreeing with a pending jump (-1: none pending), its clock
    for t in times:
        if abs(t + off - now) > MAX_CLOCK_JUMP_NS:
            if agree >= 0 and abs(t + prev - now) <= MAX_CLOCK_JUMP_NS:
                off, agree = prev, -1
            else:
                off, prev = now - t, (prev if agree >= 0 else off)
                agree, t0 = 0, now
        elif agree >= 0:
            agree += 1
        now = max(now, t + off) if abs(t + off - now) <= MAX_CLOCK_JUMP_NS else now
        if agree >= 0 and (agree >= 16 or now - t0 >= 60 * 10**9):
            prev, agree = off, -1
        out[t] = now
    return out


MAX_CLOCK_JUMP_NS = 300 * 10**9  # the driver's default --max-clock-jump
