"""`rubikgen run` passes SIGINT, SIGTERM and SIGHUP on to the binary (docs/operating.md).

`timeout -s SIG 5 python3 -m rubikgen run STACK FIFO` on a capture written slowly into a FIFO:
the signal reaches the wrapper only, which must hand it to the binary; the binary stops
reading, flushes and prints its summary. Checked: the summary is printed (JSON), counts fewer
packets than the capture holds, and the flow records written are exactly those of a run over
the first `packets` frames of the capture (the flush of a stopped run is the end of input's);
on one context and on two workers.

SIGHUP does not stop a run: it reopens the NFs' outputs (logrotate). Sent to the wrapper after
the records file was renamed, the run goes on to the end of its input, and the renamed file
and the reopened one hold together the records of the whole capture, once each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES
from support.paced_feed import pcap_records
from support.records import canonical_outputs

pytestmark = pytest.mark.serial  # paced input

CAPTURE = TRACES / "mixed-android-mobile.pcap"
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"


def _feed(fifo: Path, head: bytes, records: list[bytes], pause: float) -> threading.Thread:
    def write() -> None:
        try:
            with open(fifo, "wb", buffering=0) as f:
                f.write(head)
                for r in records:
                    f.write(r)
                    time.sleep(pause)
        except BrokenPipeError:  # the run stopped reading: what the test wants
            pass

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """`rubikgen run`'s build, made before the timed runs (a build must not eat their 5 s)."""
    d = tmp_path_factory.mktemp("signals")
    t0 = time.monotonic()
    small = REPO / "captures" / "raw-ipv4-ipv6-http.pcap"
    p = subprocess.run(
        [sys.executable, "-m", "rubikgen", "run", str(STACK), str(small), "--build-dir",
         str(d / "b"), "--nf", "flowstats", "--out", str(d / "o")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return d / "b", time.monotonic() - t0


@pytest.mark.parametrize(("sig", "workers"), [("INT", 0), ("TERM", 0), ("INT", 2)])
def test_timeout_stops_the_run_with_its_flush(
    built: tuple[Path, float], tmp_path: Path, sig: str, workers: int
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    run_dir, took = built
    # 5 s as an operator would write it; more on a loaded machine, where the wrapper may not
    # have started the binary yet after 5 s (an early signal stops the run before it started)
    secs = max(5, round(3 * took))
    head, records = pcap_records(CAPTURE)
    fifo, out = tmp_path / "in.pcap", tmp_path / "out"
    os.mkfifo(fifo)
    feeder = _feed(fifo, head, records, 3 * secs / len(records))  # longer than the timeout
    cmd = ["timeout", "-s", sig, str(secs), sys.executable, "-m", "rubikgen", "run", str(STACK)]
    cmd += [str(fifo), "--build-dir", str(run_dir), "--nf", "flowstats"]
    cmd += ["--out", str(out), "--summary", "json"]
    cmd += ["--workers", str(workers)] if workers else []
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    feeder.join(10)
    assert p.returncode == 124, (p.returncode, p.stderr)  # timeout's: it sent the signal
    assert "rebuilt" not in p.stderr and "was killed by" not in p.stderr, p.stderr
    assert "error" not in p.stderr, p.stderr  # a read the stop interrupted is no error
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    n = summary["packets"]
    assert 0 < n < len(records), n
    got = (out / "flowstats.jsonl").read_text().splitlines()
    assert len(got) == summary["flows"] > 0

    # the same records as a run over the frames it read
    prefix = tmp_path / "prefix.pcap"
    prefix.write_bytes(head + b"".join(records[:n]))
    ref_out = tmp_path / "ref"
    r = subprocess.run(
        [str(run_dir / "tcp_ip"), str(prefix), "--nf", "flowstats", "--out", str(ref_out), "--summary", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # the same records, uids renamed by what they stand for (N workers number their own)
    assert (
        canonical_outputs(out)["flowstats.jsonl"] == canonical_outputs(ref_out)["flowstats.jsonl"]
    )


def test_sighup_reopens_the_outputs_and_the_run_goes_on(
    built: tuple[Path, float], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    run_dir, _ = built
    head, records = pcap_records(CAPTURE)
    fifo, out = tmp_path / "in.pcap", tmp_path / "out"
    os.mkfifo(fifo)
    feeder = _feed(fifo, head, records, 0.01)
    cmd = [sys.executable, "-m", "rubikgen", "run", str(STACK), str(fifo), "--build-dir"]
    cmd += [str(run_dir), "--nf", "flowstats", "--out", str(out), "--summary", "json"]
    cmd += ["--", "--linger", "0"]  # a connection's record when it closes, not 5 s later
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    recs = out / "flowstats.jsonl"
    deadline = time.monotonic() + 120
    while not (recs.is_file() and recs.stat().st_size) and feeder.is_alive():
        assert proc.poll() is None and time.monotonic() < deadline, "no record mid-run"
        time.sleep(0.01)
    assert feeder.is_alive(), "the input ended before a record was written"
    recs.rename(out / "flowstats.jsonl.old")  # what logrotate does, then its postrotate:
    proc.send_signal(signal.SIGHUP)
    stdout, stderr = proc.communicate(timeout=120)
    feeder.join(10)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["packets"] == len(records)  # not stopped: the whole input was read
    old = (out / "flowstats.jsonl.old").read_text().splitlines()
    new = recs.read_text().splitlines()
    assert old and new
    ref_out = tmp_path / "ref"
    r = subprocess.run(
        [str(run_dir / "tcp_ip"), str(CAPTURE), "--nf", "flowstats", "--out", str(ref_out),
         "--linger", "0"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(old + new) == sorted((ref_out / "flowstats.jsonl").read_text().splitlines())


def test_the_wrapper_forwards_what_it_gets(tmp_path: Path) -> None:
    """The forwarding itself, on a child that reports the signals it receives."""
    from rubikgen.cli.main import FORWARDED, _run_forwarding

    log = tmp_path / "got"
    child = (
        "import signal, sys, time\n"
        f"f = open({str(log)!r}, 'a', buffering=1)\n"
        "def h(s, _): f.write(signal.Signals(s).name + '\\n')\n"
        "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, h)\n"
        "f.write('ready\\n')\n"
        "while len(open(f.name).read().split()) < 4: time.sleep(0.01)\n"
    )
    pid = os.getpid()

    def send() -> None:
        deadline = time.monotonic() + 30
        while not (log.exists() and "ready" in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        for s in FORWARDED:
            os.kill(pid, s)
            time.sleep(0.2)

    t = threading.Thread(target=send)
    t.start()
    rc = _run_forwarding([sys.executable, "-c", child])
    t.join()
    assert rc == 0
    assert log.read_text().split() == ["ready", "SIGINT", "SIGTERM", "SIGHUP"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
