"""Records as they happen (issue 30, item 1): with `--workers 2` every NF's line output is one
file written a whole line at a time while the run goes on, rotated by `--rotate` and reopened
on SIGHUP and `rubikgen ctl SOCK reopen` (docs/operating.md, "Logs and rotation").

A capture written into a FIFO a record at a time (the writer holds or paces it):

- mid-run, before the writer closes the FIFO, the files hold records already: whole lines of
  JSON, and the final files start with exactly those bytes (nothing rewritten, nothing merged
  at the end);
- a run killed with SIGKILL mid-run leaves whole lines only, each one a line of the same run
  left to its end;
- a real `logrotate -f` (create, no copytruncate; postrotate `rubikgen ctl SOCK reopen`, then
  `kill -HUP`) twice during traffic: the rotated files and the current one hold together
  every line of a run without rotation, once;
- `--rotate 20K`: several files, each within 20 KiB, together the unrotated run's lines once;
  `--rotate 1s` on a capture fed over seconds: renamed files, the same union.

The runs of two workers are compared line for line with each other (the same workers number
the same flows the same way); with one context through tests/support/records.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES
from support.paced_feed import PAUSE, PacedFeed, pcap_records
from support.records import canonical_outputs

pytestmark = pytest.mark.serial  # paced input

CAPTURE = TRACES / "mixed-android-mobile.pcap"
OUTPUTS = ("flowstats.jsonl", "events.jsonl", "eve.json")


@pytest.fixture(autouse=True)
def _need_capture() -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")


def _chain(tmp: Path) -> Path:
    chain = tmp / "chain.yaml"
    chain.write_text("chain:\n  - nf: flowstats\n  - nf: events\n  - nf: eve\n")
    return chain


def _argv(binary: Path, src: Path, out: Path, tmp: Path, *extra: str) -> list[str]:
    # --linger 0: a connection's record is written when its state machine closes it, not 5 s
    # of packet time later (this capture's first half would have none yet)
    argv = [str(binary), str(src), "--chain", str(_chain(tmp)), "--out", str(out)]
    return [*argv, "--linger", "0", *extra]


def _lines(path: Path) -> list[str]:
    """The file's lines, each checked whole: it ends with a newline and is a JSON object."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: a partial last line: {data[-80:]!r}"
    lines = data.decode().splitlines()
    for ln in lines:
        assert isinstance(json.loads(ln), dict), ln
    return lines


@pytest.fixture(scope="module")
def unrotated(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The lines of each output of a `--workers 2` run over the whole capture (a file)."""
    tmp = tmp_path_factory.mktemp("ref")
    out = tmp / "out"
    r = subprocess.run(
        _argv(binary, CAPTURE, out, tmp, "--workers", "2"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # one context writes the same records (uids renamed by what they stand for)
    one = tmp / "one"
    r = subprocess.run(
        _argv(binary, CAPTURE, one, tmp), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert canonical_outputs(out) == canonical_outputs(one)
    got = {name: _lines(out / name) for name in OUTPUTS}
    assert all(got.values()), {k: len(v) for k, v in got.items()}
    return got


class Feed(PacedFeed):
    """A paced feed that ends quietly when the run is gone (killed: the FIFO's reader)."""

    def _write(self) -> None:
        try:
            super()._write()
        except BrokenPipeError:
            pass


class Held:
    """A paced feed that stops after record k until released (the FIFO stays open)."""

    def __init__(self, fifo: Path, k: int) -> None:
        self.k, self.go = k, threading.Event()
        self.feed = PacedFeed(fifo, CAPTURE, self._pause)

    def _pause(self, i: int) -> float:
        if i + 1 == self.k:
            self.go.wait(120)
        return PAUSE


def _wait_for(what: str, cond: object, proc: subprocess.Popen[str], secs: float = 60) -> None:
    deadline = time.monotonic() + secs
    while not cond():  # type: ignore[operator]
        assert proc.poll() is None, f"the binary ended while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} after {secs} s"
        time.sleep(0.02)


def test_records_are_readable_mid_run(
    binary: Path, tmp_path: Path, unrotated: dict[str, list[str]]
) -> None:
    _, records = pcap_records(CAPTURE)
    fifo, out = tmp_path / "in.pcap", tmp_path / "out"
    os.mkfifo(fifo)
    held = Held(fifo, len(records) // 2)
    proc = subprocess.Popen(
        _argv(binary, fifo, out, tmp_path, "--workers", "2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    held.feed.start()
    try:
        held.feed.wait_written(held.k, lambda: proc.poll() is None)
        # flows ended by their state machine in the first half: their records are there now
        fs = out / "flowstats.jsonl"
        _wait_for("flowstats record", lambda: fs.is_file() and fs.stat().st_size > 0, proc)
        mid = {name: (out / name).read_bytes() for name in OUTPUTS}
        assert proc.poll() is None and held.feed.thread.is_alive()  # the FIFO is still open
        assert not list(out.glob(".rg-worker-*/*.jsonl"))  # nothing waits for a merge
        for name in OUTPUTS:
            _lines(out / name)
    finally:
        held.go.set()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    for name in OUTPUTS:
        final = (out / name).read_bytes()
        assert final.startswith(mid[name]), name  # written once, in place
        assert set(mid[name].decode().splitlines()) <= set(unrotated[name])
        assert Counter(_lines(out / name)) == Counter(unrotated[name]), name
    # records ended mid-run, not only at the final flush
    assert any('"close":"accept"' in ln for ln in mid["flowstats.jsonl"].decode().splitlines())


def test_sigkill_leaves_whole_lines(
    binary: Path, tmp_path: Path, unrotated: dict[str, list[str]]
) -> None:
    _, records = pcap_records(CAPTURE)
    fifo, out = tmp_path / "in.pcap", tmp_path / "out"
    os.mkfifo(fifo)
    feed = Feed(fifo, CAPTURE, lambda i: PAUSE)
    proc = subprocess.Popen(
        _argv(binary, fifo, out, tmp_path, "--workers", "2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    feed.start()
    ev = out / "events.jsonl"
    _wait_for("events", lambda: ev.is_file() and ev.stat().st_size > 0, proc)
    feed.wait_written(len(records) * 2 // 3, lambda: proc.poll() is None)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    seen = 0
    for name in OUTPUTS:
        if not (out / name).is_file():
            continue
        got = _lines(out / name)  # whole lines only
        assert Counter(got) <= Counter(unrotated[name]), name  # each one the full run's
        seen += len(got)
    assert seen > 0


def _rotated_union(out: Path, name: str) -> list[str]:
    files = [p for p in out.iterdir() if p.name == name or p.name.startswith(name + ".")]
    lines: list[str] = []
    for p in files:
        lines += _lines(p)
    return lines


@pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v logrotate"], capture_output=True).returncode != 0,
    reason="logrotate is not installed (bash ci/setup.sh --test)",
)
def test_logrotate_loses_and_duplicates_nothing(
    binary: Path, tmp_path: Path, unrotated: dict[str, list[str]]
) -> None:
    _, records = pcap_records(CAPTURE)
    fifo, out, sock = tmp_path / "in.pcap", tmp_path / "out", tmp_path / "ctl.sock"
    os.mkfifo(fifo)
    feed = PacedFeed(fifo, CAPTURE, lambda i: 4 * PAUSE)
    proc = subprocess.Popen(
        _argv(binary, fifo, out, tmp_path, "--workers", "2", "--control", str(sock)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    feed.start()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ctl = f"{sys.executable} -m rubikgen ctl {sock} reopen"
    for k, post in ((len(records) // 3, ctl), (2 * len(records) // 3, f"kill -HUP {proc.pid}")):
        feed.wait_written(k, lambda: proc.poll() is None)
        conf = tmp_path / f"logrotate-{k}.conf"
        conf.write_text(
            f"{out}/*.jsonl {out}/eve.json {{\n"
            "    rotate 10\n    create\n    missingok\n    nocompress\n    sharedscripts\n"
            f"    postrotate\n        {post}\n    endscript\n}}\n"
        )
        r = subprocess.run(
            ["logrotate", "-f", "-s", str(tmp_path / "logrotate.state"), str(conf)],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    for name in OUTPUTS:
        assert (out / f"{name}.1").is_file() and (out / f"{name}.2").is_file(), name
        assert Counter(_rotated_union(out, name)) == Counter(unrotated[name]), name
        # the reopened file got the records after the last rotation
        assert (out / name).stat().st_size > 0, name


def test_rotate_by_size(binary: Path, tmp_path: Path, unrotated: dict[str, list[str]]) -> None:
    out = tmp_path / "out"
    r = subprocess.run(
        _argv(binary, CAPTURE, out, tmp_path, "--workers", "2", "--rotate", "20K"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    parts = [p for p in out.iterdir() if p.name.startswith("events.jsonl")]
    assert len(parts) >= 3, sorted(p.name for p in parts)
    for p in parts:  # no file past SIZE but by a record longer than SIZE
        lines = _lines(p)
        assert p.stat().st_size <= 20 << 10 or len(lines) == 1, (p.name, p.stat().st_size)
    for name in OUTPUTS:
        assert Counter(_rotated_union(out, name)) == Counter(unrotated[name]), name


@pytest.mark.parametrize(
    ("arg", "why"),
    [("10m", "min for minutes"), ("0", "expected SIZE"), ("5x", "unknown unit"), ("-1h", "")],
)
def test_rotate_refuses_what_it_cannot_read(
    binary: Path, tmp_path: Path, arg: str, why: str
) -> None:
    r = subprocess.run(
        [str(binary), str(CAPTURE), "--rotate", arg, "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert f"--rotate {arg}" in r.stderr and why in r.stderr, r.stderr


def test_rotate_by_time(binary: Path, tmp_path: Path, unrotated: dict[str, list[str]]) -> None:
    """--rotate 1s on a capture fed over 3 s or more: the events file is renamed at least once
    (its records keep coming), and the files together hold the unrotated run's lines."""
    fifo, out = tmp_path / "in.pcap", tmp_path / "out"
    os.mkfifo(fifo)
    feed = PacedFeed(fifo, CAPTURE, lambda i: 3 * PAUSE)
    proc = subprocess.Popen(
        _argv(binary, fifo, out, tmp_path, "--workers", "2", "--rotate", "1s"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    feed.start()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    parts = sorted(p.name for p in out.iterdir() if p.name.startswith("events.jsonl."))
    assert parts, "no rotation"
    for name in OUTPUTS:
        assert Counter(_rotated_union(out, name)) == Counter(unrotated[name]), name
