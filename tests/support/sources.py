"""Shared by tests; moved from runtime/test_sources.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

from support.oracle.tshark import REPO

RUNTIME = REPO / "runtime-c"


SRCDUMP = RUNTIME / "build" / "tools" / "srcdump"


def read_pcap(path: Path) -> list[Frame]:
    """Frames of a classic pcap file (either byte order, micro- or nanosecond)."""
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise AssertionError(f"{path}: not a classic pcap file")
    frames: list[Frame] = []
    off = 24
    while off + 16 <= len(data):
        _, _, incl, orig = struct.unpack(endian + "IIII", data[off : off + 16])
        frames.append((orig, data[off + 16 : off + 16 + incl]))
        off += 16 + incl
    assert off == len(data), f"{path}: a record is cut short"
    return frames


class Netns:
    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *cmd], capture_output=True, text=True, check=False
        )

    def popen(self, *cmd: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.name, *cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )


def _replay(ns: Netns, capture: Path) -> None:
    # 2000 frames/s: far below what a veth and libpcap keep up with (nothing dropped)
    r = ns.run("tcpreplay", "-q", "-i", "va", "--pps", "2000", str(capture))
    assert r.returncode == 0, r.stdout + r.stderr


def _eal(tmp: Path, *vdevs: str) -> list[str]:
    # no hugepages, no PCI scan, private runtime files: runs anywhere, in parallel
    args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "-l", "0"]
    args += ["--file-prefix", f"rg{os.getpid()}_{tmp.name}", "--log-level=error"]
    for v in vdevs:
        args += ["--vdev", v]
    return args


def _ethernet_eligible() -> list[str]:
    from support.oracle.tshark import eligible_captures

    # the veth and the pcap vdev carry Ethernet frames
    return [
        p.name for p in eligible_captures() if struct.unpack("<I", p.read_bytes()[20:24])[0] == 1
    ]


def _wait_capturing(ns: Netns, secs: float = 10, proc: subprocess.Popen[str] | None = None) -> None:
    """Until a packet socket is open in the namespace (the binary has activated its capture);
    proc, if given, must not have ended meanwhile."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        sockets = ns.run("cat", "/proc/net/packet").stdout.splitlines()[1:]
        if sockets:
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the stack ended before capturing: {proc.communicate()[1]}")
        time.sleep(0.05)
    raise AssertionError(f"the stack did not open its capture within {secs:g} s")


def _summary_lines(text: str) -> list[str]:
    # the runs compared write into folders of their own
    skip = ("capture ", "dropped ", "wrote ")
    return [ln for ln in text.splitlines() if not ln.startswith(skip)]


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _file_run(binary: Path, capture: Path, out: Path) -> str:
    r = subprocess.run(
        [str(binary), str(capture), "--nf", "streams", "--out", str(out), "--no-timeouts"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _records(out: Path, name: str) -> list[str]:
    """The NF's records, uid and file name (which depend on the context) replaced by the
    stream's content hash, sorted."""
    recs = []
    for path in sorted(out.rglob(name)):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rec.pop("uid", None)
            rec.pop("worker", None)  # --workers: the worker that processed the flow
            file = rec.pop("file", None)
            if file:
                rec["content"] = hashlib.sha256((path.parent / file).read_bytes()).hexdigest()
            recs.append(json.dumps(rec, sort_keys=True))
    return sorted(recs)


def _without_workers_line(summary: str) -> list[str]:
    """The summary without its workers line and its memory section (the memcap line and the
    per-layer memory table): reassembly and flow-table peaks are each context's own, so N
    workers hold other peaks than one context does."""
    out, skipping = [], False
    for ln in summary.splitlines():
        if ln.startswith(("memcap ", "memory per layer")):
            skipping = True
            continue
        if skipping and ln.startswith("  "):
            continue
        skipping = False
        if not ln.startswith(("workers ", "wrote ")):
            out.append(ln)
    return out


Frame = tuple[int, bytes]  # (original length, captured bytes)


def _build(
    tmp: Path, io: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "rubikgen",
        "build",
        str(REPO / "specs" / "stacks" / "tcp_ip.yaml"),
    ]
    cmd += ["--io", io, "--out-dir", str(tmp)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=REPO)


def srcdump_start(
    ns: Netns, srcdump: Path, io: str, iface: str, out: Path, *args: str
) -> subprocess.Popen[str]:
    """srcdump reading IFACE through source IO into the pcap OUT, once the source is open."""
    p = ns.popen(str(srcdump), "--io", io, "--name", iface, "-w", str(out), *args)
    assert p.stderr is not None
    line = p.stderr.readline()  # "ready" once the source is open
    assert line.strip() == "ready", line + p.stderr.read()
    return p


def srcdump_finish(p: subprocess.Popen[str]) -> str:
    """srcdump's standard error, once it exited 0."""
    assert p.stderr is not None
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err
    return err


def srcdump_stats(err: str) -> dict[str, int]:
    """The source's counters from srcdump's last line."""
    m = re.search(r"frames=(\d+) bytes=(\d+) dropped=(\d+)", err)
    assert m, err
    return {"frames": int(m[1]), "bytes": int(m[2]), "dropped": int(m[3])}
