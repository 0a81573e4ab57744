"""A real capture of what a test sends on the loopback interface: tcpdump -i lo -w."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def capture_lo(out: Path, bpf: str) -> Iterator[Path]:
    """tcpdump on lo writing out, for the packets matching bpf, from when the block starts
    until it ends (then flushed and stopped).  tcpdump says "listening" before its filter
    sees packets, so readiness is proven: probes to a port of its own go out until one is in
    the file (they are not in bpf's traffic: filter them out by port when reading)."""
    if not shutil.which("tcpdump"):
        pytest.skip("tcpdump is not installed")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    pport = probe.getsockname()[1]
    # immediate mode: without it libpcap hands packets over in blocks (a timeout of about a
    # second), and the last block is lost when tcpdump is stopped
    cmd = ["tcpdump", "--immediate-mode", "-Z", "root", "-i", "lo", "-U", "-n", "-w", str(out)]
    td = subprocess.Popen(
        [*cmd, f"({bpf}) or (udp and dst port {pport})"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not (out.is_file() and out.stat().st_size > 24):  # more than the file header
            assert td.poll() is None, td.stderr.read().decode() if td.stderr else "tcpdump died"
            assert time.monotonic() < deadline, "tcpdump captured no probe in 20 s"
            probe.sendto(b"probe", ("127.0.0.1", pport))
            time.sleep(0.05)
        yield out
        time.sleep(0.2)  # what was sent last reaches the capture
    finally:
        td.send_signal(signal.SIGINT)
        td.communicate(timeout=20)
        probe.close()
