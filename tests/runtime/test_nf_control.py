"""Attach and detach NFs while a capture is replayed (--control, rubikgen ctl).

The capture is written into a FIFO the binary reads as its file source, a record at a time with
a pause between records, so the test can change the chain mid-capture: a recorder (tests/nf/
recorder_nf.c) runs from the start, a second one is attached after a third of the frames and
detached after two thirds, and a bad .so is refused in between while the chain keeps running.

Run on one context and on two workers (each worker its own chain: the requests reach every
worker's, which applies it between two of its packets before the reply).

Checked: every frame is accounted for (the summary's counts equal a run without changes); the
first recorder's log equals its log of a run without changes (the refused .so and the changes
did not disturb it); the second recorder saw exactly a contiguous window of the first one's
events; it got fresh per-flow state for flows that existed before
it was attached (its sequence numbers start at 1 where the first recorder's do not); its fini
ran at the detach.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.captures import REPO
from support.nf_chain import _cc, _chain, _run
from support.oracle import TRACES
from support.paced_feed import PAUSE, PacedFeed, pcap_records
from support.trusted import trusted_dir

# replays and paced input: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial

CAPTURE = TRACES / "mixed-android-mobile.pcap"
TRICKLE = 0.02  # seconds between records while a rubikgen ctl call is in flight


@pytest.fixture
def nfs() -> Iterator[Path]:
    """Where the attached .so files are (the binary's --nf-path)."""
    with trusted_dir("nf-control") as d:
        yield d


def _ctl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rubikgen", "ctl", str(sock), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


def _strip_seq(line: str) -> str:
    f = line.split(" ")
    return " ".join(f[:5] + f[6:])


def _logs(path: Path, workers: int | None) -> list[list[str]]:
    """The recorder's log: one, or one per worker (LOG.K)."""
    paths = [path] if not workers else [Path(f"{path}.{k}") for k in range(workers)]
    return [p.read_text().splitlines() for p in paths]


def _strip_uid(line: str) -> str:
    """A log line without its uid (each worker numbers its own instances)."""
    f = line.split(" ")
    return " ".join(f[:4] + f[5:])


@pytest.mark.parametrize("workers", [None, 2])
def test_attach_detach_while_replaying(
    binary: Path,  # noqa: F811
    tmp_path: Path,
    nfs: Path,
    workers: int | None,
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    rec = _cc(REPO / "tests" / "nf" / "recorder_nf.c", nfs / "recorder.so")
    bad = tmp_path / "bad.c"
    bad.write_text("int nothing_here;\n")
    bad_so = _cc(bad, nfs / "bad.so")
    _, records = pcap_records(CAPTURE)
    assert len(records) > 200

    # the reference: the same chain without changes
    ref_log = tmp_path / "ref.txt"
    chain = _chain(tmp_path / "ref.yaml", [{"nf": str(rec), "name": "a", "params": {
        "tag": "a", "log": str(ref_log)}}])  # fmt: skip
    ref = json.loads(
        _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path, "--summary", "json")
        .stdout.strip()
        .splitlines()[-1]
    )

    log_a, log_b = tmp_path / "a.txt", tmp_path / "b.txt"
    chain = _chain(tmp_path / "a.yaml", [{"nf": str(rec), "name": "a", "params": {
        "tag": "a", "log": str(log_a)}}])  # fmt: skip
    fifo, sock = tmp_path / "in.pcap", tmp_path / "ctl.sock"
    os.mkfifo(fifo)
    argv = [str(binary), str(fifo), "--chain", str(chain), "--control", str(sock)]
    argv += ["--nf-path", str(nfs), *(["--workers", str(workers)] if workers else [])]
    proc = subprocess.Popen(
        [*argv, "--out", str(tmp_path), "--summary", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    third = len(records) // 3
    # from a third of the records until the test has attached (and from two thirds until it has
    # detached) the writer trickles: the binary applies a request at its next packets, so the
    # writer must never stop, and the window must outlast the rubikgen ctl calls
    attached, detached = threading.Event(), threading.Event()

    def pause(i: int) -> float:
        slow = (i >= third and not attached.is_set()) or (i >= 2 * third and not detached.is_set())
        return TRICKLE if slow else PAUSE

    feed = PacedFeed(fifo, CAPTURE, pause).start()
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        feed.wait_written(third)
        p = _ctl(sock, "attach", str(rec), "--name", "b", "tag=b", f"log={log_b}")
        assert p.returncode == 0 and "attached" in p.stdout, p.stderr
        p = _ctl(sock, "attach", str(bad_so), "--name", "bad")
        assert p.returncode == 1 and f"{bad_so}: no symbol 'rg_nf_v1'" in p.stderr, p.stderr
        p = _ctl(sock, "list")
        assert p.returncode == 0
        assert p.stdout == f"a\t{rec}\nb\t{rec}\n", p.stdout
        attached.set()
        feed.wait_written(2 * third)
        p = _ctl(sock, "detach", "b")
        assert p.returncode == 0 and "detached b" in p.stdout, p.stderr
        p = _ctl(sock, "detach", "b")
        assert p.returncode == 1 and "no NF called 'b'" in p.stderr
        detached.set()
    finally:
        attached.set()
        detached.set()
        feed.join()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    for k in ("packets", "bytes", "calls", "payload_bytes", "flows", "flows_opened", "errors"):
        assert got[k] == ref[k], (k, got[k], ref[k])
    assert got["packets"] == len(records)
    assert not sock.exists()  # removed at the end

    ref_lines = ref_log.read_text().splitlines()
    logs_a, logs_b = _logs(log_a, workers), _logs(log_b, workers)
    if not workers:
        assert logs_a[0] == ref_lines
    else:
        # every worker's recorder: together, the events of the run without changes (each
        # flow's on its worker, with that worker's uids)
        assert all(la[-1] == "a fini" for la in logs_a)
        got_a = sorted(_strip_uid(x) for la in logs_a for x in la[:-1])
        assert got_a == sorted(_strip_uid(x) for x in ref_lines[:-1])
    carried: list[bool] = []
    for a, b in zip(logs_a, logs_b, strict=True):
        # on every worker: b attached and detached between two packets, a window of a's events
        assert b[-1] == "b fini" and len(b) > 5, b[-3:]
        b = b[:-1]
        a_lines = [x[2:] for x in a if x.startswith("a ") and x != "a fini"]
        b_lines = [x[2:] for x in b]
        stripped = [_strip_seq(x) for x in a_lines]
        want = [_strip_seq(x) for x in b_lines]
        starts = [i for i in range(len(stripped)) if stripped[i : i + len(want)] == want]
        assert starts, "b's events are not a window of a's"
        i = starts[0]
        # attached after the start, detached before the end
        assert 0 < i and i + len(want) < len(stripped)
        # mid-flow: a flow a had seen before b was attached starts at 1 in b's per-flow state
        seen_before = {x.split(" ")[3] for x in a_lines[:i]} - {"0"}
        first_b: dict[str, int] = {}
        for x in b_lines:
            f = x.split(" ")
            first_b.setdefault(f[3], int(f[5]))
        spanning = [u for u in first_b if u in seen_before]
        assert all(first_b[u] == 1 for u in spanning)
        carried.append(bool(spanning))
    assert any(carried), "no flow spans the attach"


@pytest.mark.parametrize("workers", [None, 2])
def test_requests_on_an_idle_live_source(
    binary: Path,  # noqa: F811
    tmp_path: Path,
    nfs: Path,
    workers: int | None,
) -> None:
    """No packet arrives (the loopback of a fresh network namespace): requests are still
    applied (the loop wakes up on its own; idle workers poll the socket), while the run goes on."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace needs root")
    ns = f"rgidle{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode:
        pytest.skip("the kernel refuses network namespaces")
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        rec = _cc(REPO / "tests" / "nf" / "recorder_nf.c", nfs / "recorder.so")
        sock = tmp_path / "ctl.sock"
        argv = ["ip", "netns", "exec", ns, str(binary), "--io", "live", "--iface", "lo"]
        argv += ["--duration", "120", "--control", str(sock), "--out", str(tmp_path)]
        argv += ["--nf-path", str(nfs)]
        argv += ["--workers", str(workers)] if workers else []
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            log = tmp_path / "b.txt"
            p = _ctl(sock, "attach", str(rec), "--name", "b", "tag=b", f"log={log}")
            assert p.returncode == 0 and "attached" in p.stdout, p.stderr
            p = _ctl(sock, "list")
            assert p.returncode == 0 and p.stdout == f"b\t{rec}\n", (p.stdout, p.stderr)
            p = _ctl(sock, "detach", "b")
            assert p.returncode == 0 and "detached b" in p.stdout, p.stderr
            assert proc.poll() is None  # answered while the run goes on, not at its end
        finally:
            proc.send_signal(2)
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert re.search(r"^packets +0$", out, re.M), out
        # every worker's instance ran its fini at the detach
        for lg in _logs(log, workers):
            assert lg == ["b fini"], lg
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
