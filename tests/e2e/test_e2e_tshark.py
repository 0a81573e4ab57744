"""End to end: the tcp_ip stack against tshark on every eligible real capture.

For each capture of `oracle.eligible_captures()`, `rubikgen run specs/stacks/tcp_ip.yaml CAPTURE
--nf streams --out DIR` writes flows.jsonl and streams/; tshark's follow output
(`oracle.reference_streams`, gap markers stripped) is the reference. Compared: every direction
of every TCP and UDP stream, with or without a handshake (mid-stream flows, lone SYNs,
fragment overlaps), except the streams NOT_COMPARED lists with the reason (`not_compared` is
the hook for rules, e.g. a stack option that changes what a mid-stream flow delivers); the
delivered bytes must be equal. Per stream, also against tshark's view of it (`check_flow`):

- `dir`: the stack's c2s sender is tshark's (the first packet's sender) when that first packet
  can create an instance (SYN or payload, tcp.yaml's create_if; UDP: always);
- `complete`: true exactly when tshark saw the client's SYN, the server's SYN-ACK, and the
  close (a RST, or a FIN each way, each acknowledged), with the c2s side sending the SYN (a
  SYN-ACK captured before its SYN makes the server the creator, and tcp.yaml's setup then does
  not fire);
- `close`: "accept" for a TCP stream closed that way; otherwise (UDP, unclosed TCP) "expired"
  when some frame comes a timeout (tcp.yaml/udp.yaml `timeout`) plus the driver's 1 s expiry
  period after the stream's last frame, "flushed" when none comes a timeout after it, either in
  between; every instance but the last of a split stream has ended before the capture did.

Matching. Our flows and tshark's streams are matched by protocol and endpoints ({src, sport},
{dst, dport}, unordered), tshark's in stream order and ours in uid (creation) order. Where tshark
has one stream for a pair of endpoints, all our flows between them are that stream: the stack may
split what tshark calls one stream into several instances (a RST before the SYN-ACK ends an
instance, an idle UDP conversation expires and comes back); each direction's bytes are then the
concatenation over those instances, in order. Where tshark has several streams (a reused 4-tuple),
the k-th of ours is its k-th. A direction is tshark's c2s one when its src/sport is tshark's c2s
sender (our `dir` may differ: the stack's creator is the first SYN or data packet, tshark's the
first packet). A flow of ours between endpoints tshark has no stream for must deliver nothing.

What tshark does that a stack need not (tests/support/oracle/tshark.py's docstring has the details): it
skips capture gaps the peer acknowledged (the oracle strips its markers, so a stack that skips the
same gap delivers the same bytes), appends the captured part of snaplen-truncated segments, keeps
the lowest-starting copy of overlapping out-of-order data (tcp.yaml keeps the first to arrive),
and drops data captured before a direction's first packet. Mismatches print what tshark reports
about the stream (gaps, truncated and malformed frames) next to the lengths and the first
differing offset. Streams where the stack is right and tshark is not, or where a difference is
accepted, go in EXCEPTIONS with the reason.

Totals (captures, streams, flow directions and bytes compared) are printed at the end (`pytest
-s` shows them).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.captures import (
    Run,
    run_stack,
)
from support.oracle import (
    ELIGIBLE,
    TRACES,
    Stream,
    frame_times,
    reference_streams,
    tshark_available,
)
from support.streams import (
    EXCEPTIONS,
    NOT_COMPARED,
    Totals,
    compare,
)


class Runner:
    """Runs the stack and tshark on every eligible capture in parallel threads (the first run
    alone: it builds the stack, which rubikgen caches for the others)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
        self.serial = ThreadPoolExecutor(max_workers=1)
        self.jobs: dict[str, Future[tuple[Run, tuple[Stream, ...]]]] = {}
        self.totals = Totals()
        self.started = False

    def _job(self, name: str) -> tuple[Run, tuple[Stream, ...]]:
        pcap = TRACES / name
        run = run_stack(pcap, self.root / name.removesuffix(".pcap"))
        return run, reference_streams(pcap)

    def times(self, name: str) -> tuple[int, ...]:
        return frame_times(TRACES / name)

    def get(self, name: str) -> tuple[Run, tuple[Stream, ...]]:
        with self.lock:
            if not self.started:
                self.started = True
                first: Future[tuple[Run, tuple[Stream, ...]]] = Future()
                first.set_result(self._job(name))
                self.jobs[name] = first
                # after a failed first run (the build, most likely) no parallel rebuilds
                pool = self.pool if first.result()[0].returncode == 0 else self.serial
                for other in CAPTURES:
                    if other not in self.jobs and (TRACES / other).is_file():
                        self.jobs[other] = pool.submit(self._job, other)
        return self.jobs[name].result()


CAPTURES = sorted(ELIGIBLE)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    r = Runner(tmp_path_factory.mktemp("e2e-tshark"))
    yield r
    r.pool.shutdown(cancel_futures=True)
    r.serial.shutdown(cancel_futures=True)
    t = r.totals
    if t.captures:
        print(f"\n[e2e-tshark] totals: {t.line()}")
        for line in t.stale:
            print(f"[e2e-tshark] stale exception: {line}")


@pytest.mark.parametrize("name", CAPTURES)
def test_stack_delivers_what_tshark_follows(name: str, runner: Runner) -> None:
    if not (TRACES / name).is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    run, streams = runner.get(name)
    assert run.returncode == 0, run.describe()
    problems, totals = compare(name, run, streams, runner.times(name))
    runner.totals.add(totals)
    problems += totals.stale  # an exception that no longer differs must go
    print(f"\n[e2e-tshark] {name}: {totals.line()} ({run.seconds:.1f} s)")
    assert not problems, (
        f"{name}: {ELIGIBLE[name]}\n{len(problems)} differences from tshark:\n"
        + "\n".join(problems[:40])
        + ("\n..." if len(problems) > 40 else "")
    )


def test_exceptions_name_eligible_captures() -> None:
    for table in (EXCEPTIONS, NOT_COMPARED):
        for (capture, stream), reason in table.items():
            assert capture in ELIGIBLE, capture
            assert stream.split()[0] in ("tcp", "udp") and reason, (capture, stream)


# ---------------------------------------------------------------------------------------------
# The comparison itself can fail: wrong outputs of the stack are reported


def _mutated(run: Run, tmp: Path, edit: Any) -> Run:
    """A copy of run's output directory with flows.jsonl records passed through `edit`
    (record, stream file bytes) -> (record or None, bytes)."""
    import json
    import shutil

    out = tmp / "mutated"
    shutil.copytree(run.out, out)
    lines = []
    for line in (out / "flows.jsonl").read_text().splitlines():
        rec = json.loads(line)
        data = run.data(rec)
        rec, data = edit(rec, data)
        if rec is None:
            continue
        if rec.get("file"):
            (out / rec["file"]).write_bytes(data)
        lines.append(json.dumps(rec))
    (out / "flows.jsonl").write_text("\n".join(lines) + "\n")
    return Run(run.pcap, out, run.argv, 0, run.stdout, run.stderr, 0.0)


MUTATIONS = {
    "byte flipped": lambda r, d: (r, bytes([d[0] ^ 1]) + d[1:] if d else d),
    "byte lost": lambda r, d: (r, d[:-1]),
    "direction dropped": lambda r, d: (None if r["dir"] == "s2c" else r, d),
    "dir swapped": lambda r, d: ({**r, "dir": "s2c" if r["dir"] == "c2s" else "c2s"}, d),
    "complete flipped": lambda r, d: ({**r, "complete": not r["complete"]}, d),
    "close changed": lambda r, d: ({**r, "close": "expired"}, d),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_compare_reports_wrong_output(mutation: str, runner: Runner, tmp_path: Path) -> None:
    """On a capture the stack gets right, every kind of wrong output is reported."""
    name = "http-post-upload.pcap"
    if not (TRACES / name).is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    run, streams = runner.get(name)
    assert not compare(name, run, streams, runner.times(name))[0]
    bad = _mutated(run, tmp_path, MUTATIONS[mutation])
    problems, _ = compare(name, bad, streams, runner.times(name))
    assert problems, f"{mutation}: not reported"
