"""End to end: the tcp_ip stack on the hand-made edge-case captures of tests/support/captures.py.

For each case, `rubikgen run specs/stacks/tcp_ip.yaml PCAP --nf streams --out DIR --summary json`
(options after `--` where the case has some), then flows.jsonl and streams/ are compared with
what the case built: per flow direction the bytes and their sha256, `dir`, addresses and ports,
`layer`, `complete` and `close` where the case defines them, and the live instances at the end.
Every case also runs under `--sanitize` (ASan + UBSan build): exit status 0 and no sanitizer
report. The runs go in parallel threads; the first run of each build variant builds the stack
(rubikgen caches it), the others reuse it.

tests/e2e/test_captures.py checks the captures and expectations against tshark, without rubikgen.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.captures import (
    CASES,
    SANITIZER_REPORT,
    Expectation,
    Run,
    build,
    first_difference,
    live_at_end,
    run_stack,
)

#: The fields of a flows.jsonl record of the `streams` NF.
FIELDS = {
    "layer",
    "proto",
    "src",
    "dst",
    "sport",
    "dport",
    "dir",
    "bytes",
    "sha256",
    "file",
    "complete",
    "uid",
    "close",
}
CLOSES = {"accept", "evicted", "expired", "flushed"}


class Runner:
    """Runs every case once per build variant, in parallel, when a test first asks for one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
        self.serial = ThreadPoolExecutor(max_workers=1)
        self.cases: dict[str, tuple[Path, Expectation]] = {}
        self.runs: dict[tuple[str, bool], Future[Run]] = {}

    def case(self, name: str) -> tuple[Path, Expectation]:
        with self.lock:
            if not self.cases:
                self.cases = {n: build(n, self.root / "pcap" / n) for n in CASES}
        return self.cases[name]

    def _run(self, name: str, sanitize: bool) -> Run:
        pcap, exp = self.cases[name]
        out = self.root / ("asan" if sanitize else "plain") / name
        return run_stack(pcap, out, sanitize=sanitize, args=exp.args)

    def get(self, name: str, sanitize: bool) -> tuple[Run, Expectation]:
        self.case(name)
        with self.lock:
            if (name, sanitize) not in self.runs:
                # The first run builds the stack and caches the build; then all run at once. If
                # it failed (the build, most likely), the others run one by one: each would
                # build again, and parallel builds would only compete.
                first: Future[Run] = Future()
                first.set_result(self._run(name, sanitize))
                self.runs[(name, sanitize)] = first
                pool = self.pool if first.result().returncode == 0 else self.serial
                for other in CASES:
                    if (other, sanitize) not in self.runs:
                        self.runs[(other, sanitize)] = pool.submit(self._run, other, sanitize)
        return self.runs[(name, sanitize)].result(), self.cases[name][1]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    r = Runner(tmp_path_factory.mktemp("e2e-edge"))
    yield r
    r.pool.shutdown(cancel_futures=True)
    r.serial.shutdown(cancel_futures=True)


def check_records(run: Run, records: list[dict[str, Any]]) -> list[str]:
    """Each record has the contract's fields, and its file holds `bytes` bytes hashing to
    `sha256`; the directions of one uid mirror each other."""
    problems = []
    by_uid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        where = f"record {rec.get('uid')}/{rec.get('dir')}"
        missing = FIELDS - set(rec)
        if missing:
            problems.append(f"{where}: no {sorted(missing)}")
            continue
        by_uid[rec["uid"]].append(rec)
        if rec["dir"] not in ("c2s", "s2c"):
            problems.append(f"{where}: dir {rec['dir']!r}")
        if rec["close"] not in CLOSES:
            problems.append(f"{where}: close {rec['close']!r}")
        if rec["proto"] == "udp" and rec["complete"] is not None:
            problems.append(f"{where}: UDP with complete={rec['complete']!r}")
        if rec["proto"] == "tcp" and not isinstance(rec["complete"], bool):
            problems.append(f"{where}: TCP with complete={rec['complete']!r}")
        if (rec["file"] is None) != (rec["bytes"] == 0):
            problems.append(f"{where}: file {rec['file']!r} with {rec['bytes']} bytes")
            continue
        if rec["file"] is not None and Path(rec["file"]).is_absolute():
            problems.append(f"{where}: file {rec['file']!r} is not relative to the output")
            continue
        data = run.data(rec)
        if len(data) != rec["bytes"] or hashlib.sha256(data).hexdigest() != rec["sha256"]:
            problems.append(f"{where}: {rec['file']} has {len(data)} bytes, sha256 differs")
    for uid, recs in by_uid.items():
        dirs = sorted(r["dir"] for r in recs)
        if dirs not in (["c2s"], ["c2s", "s2c"]):
            problems.append(f"uid {uid}: directions {dirs}")
        if len(recs) == 2:
            a, b = recs
            if (a["src"], a["sport"], a["dst"], a["dport"]) != (
                b["dst"],
                b["dport"],
                b["src"],
                b["sport"],
            ):
                problems.append(
                    f"uid {uid}: the s2c record does not name its own sender as src/sport"
                    f" ({a['dir']} {a['src']}:{a['sport']} -> {a['dst']}:{a['dport']},"
                    f" {b['dir']} {b['src']}:{b['sport']} -> {b['dst']}:{b['dport']})"
                )
            if (a["layer"], a["close"], a["complete"]) != (b["layer"], b["close"], b["complete"]):
                problems.append(f"uid {uid}: directions differ in layer, close or complete")
    return problems


def compare(run: Run, exp: Expectation) -> list[str]:
    """Everything that differs between what the stack wrote and what the case expects."""
    records = run.records()
    problems = check_records(run, records)
    ours: dict[tuple[str, str, int, str, int], list[dict[str, Any]]] = defaultdict(list)
    for key, rec in run.directions():
        ours[key].append(rec)
    uids: dict[tuple[str, str, int, str, int], Any] = {}
    for f in exp.flows:
        recs = ours.get(f.key, [])
        name = f"{f.layer} {f.src}:{f.sport} -> {f.dst}:{f.dport} ({f.dir})"
        if f.note:
            name += f" [{f.note}]"
        if len(recs) != 1:
            problems.append(f"{name}: {len(recs)} records (expected one, {len(f.data)} bytes)")
            continue
        (rec,) = recs
        uids[f.key] = rec["uid"]
        data = run.data(rec)
        if data != f.data:
            problems.append(
                f"{name}: {len(data)} bytes, expected {len(f.data)},"
                f" first difference at {first_difference(data, f.data)}"
            )
        elif rec["sha256"] != f.sha256:
            problems.append(f"{name}: sha256 {rec['sha256']}, expected {f.sha256}")
        for fld, want in (("layer", f.layer), ("dir", f.dir)):
            if rec[fld] != want:
                problems.append(f"{name}: {fld} {rec[fld]!r}, expected {want!r}")
        if f.complete is not None and rec["complete"] != f.complete:
            problems.append(f"{name}: complete {rec['complete']!r}, expected {f.complete!r}")
        if f.close is not None and rec["close"] != f.close:
            problems.append(f"{name}: close {rec['close']!r}, expected {f.close!r}")
    # the two directions of an expected flow are one instance
    for c2s, s2c in zip(exp.flows[::2], exp.flows[1::2], strict=True):
        if c2s.key in uids and s2c.key in uids and uids[c2s.key] != uids[s2c.key]:
            problems.append(f"{c2s.src}:{c2s.sport} <-> {c2s.dst}:{c2s.dport}: two uids")
    expected = exp.by_key()
    extra = [k for k in ours if k not in expected]
    if exp.exact:
        problems += [f"unexpected flow direction {k}" for k in sorted(extra)]
    else:
        ends = {frozenset([(k[1], k[2]), (k[3], k[4])]) for k in expected}
        for k in sorted(extra):
            if frozenset([(k[1], k[2]), (k[3], k[4])]) in ends:
                problems.append(f"unexpected flow direction {k} between expected endpoints")
    summary = run.summary()
    if exp.live_at_end is not None and live_at_end(summary) != exp.live_at_end:
        problems.append(f"live_at_end {summary['live_at_end']!r}, expected {exp.live_at_end}")
    if exp.cap is not None:
        if live_at_end(summary) > exp.cap:
            problems.append(f"live_at_end {summary['live_at_end']!r} above the cap {exp.cap}")
        evicted = len({r["uid"] for r in records if r["close"] == "evicted"})
        if evicted < len(exp.flows) // 2 - exp.cap:
            problems.append(f"{evicted} flows evicted: the cap of {exp.cap} did not hold")
    return problems


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "sanitize"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_case(name: str, sanitize: bool, runner: Runner) -> None:
    run, exp = runner.get(name, sanitize)
    assert run.returncode == 0, run.describe()
    if sanitize:
        reports = [s for s in SANITIZER_REPORT if s in run.stderr]
        assert not reports, f"sanitizer report ({reports}):\n{run.describe()}"
    problems = compare(run, exp)
    head = f"{name} ({run.pcap.name}{', sanitize' if sanitize else ''}): {exp.doc}"
    if exp.tshark_note:
        head += f"\ntshark: {exp.tshark_note}"
    assert not problems, head + "\n" + "\n".join(problems[:60])


@pytest.mark.parametrize("name", ["garbage", "truncated"])
def test_bad_packets_are_counted_as_errors(name: str, runner: Runner) -> None:
    """Truncated and malformed headers end their layer with an error the summary counts
    (a regression: a truncation once read as "parsed", because its reason code is 0)."""
    run, _ = runner.get(name, False)
    assert run.returncode == 0, run.describe()
    assert run.summary()["errors"] > 0, run.stdout
