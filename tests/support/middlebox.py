"""Two network namespaces joined through a third where a rubikgen stack runs inline: a client
(c0, 10.31.0.1) and a server (s0, 10.31.0.2) on one subnet, their veths' peers b0 and b1 in
the box, which bridges them with `--io live --iface b0 --peer b1 --inline`. Offloads are off
on every veth so that each frame the box reads is a whole frame with its checksums computed
(a TSO super-frame or a partial checksum would not survive pcap_inject). IPv6 is off: the
tests' traffic is the only traffic."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.sources import Netns

CLIENT, SERVER = "10.31.0.1", "10.31.0.2"


class Box:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.client, self.server, self.box = (Netns(prefix + x) for x in ("c", "s", "b"))

    def packet_sockets(self) -> int:
        return len(self.box.run("cat", "/proc/net/packet").stdout.splitlines()[1:])


def missing_tools() -> str | None:
    """Why the tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the middlebox tests need root (network namespaces, packet sockets)"
    for tool in ("ip", "ethtool", "curl", "tcpdump"):
        if not shutil.which(tool):
            return f"the middlebox tests need `{tool}`"
    return None


def _must(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"


def create() -> tuple[Box | None, str]:
    """The three namespaces, or None and the kernel's refusal."""
    b = Box(f"rgmb{os.getpid()}")
    r = subprocess.run(["ip", "netns", "add", b.client.name], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    for ns in (b.server, b.box):
        _must("ip", "netns", "add", ns.name)
    _must("ip", "link", "add", "c0", "netns", b.client.name, "type", "veth", "peer", "name", "b0",
          "netns", b.box.name)  # fmt: skip
    _must("ip", "link", "add", "s0", "netns", b.server.name, "type", "veth", "peer", "name", "b1",
          "netns", b.box.name)  # fmt: skip
    for ns, dev, addr in ((b.client, "c0", CLIENT), (b.server, "s0", SERVER),
                          (b.box, "b0", None), (b.box, "b1", None)):  # fmt: skip
        _must("ip", "netns", "exec", ns.name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        _must("ip", "netns", "exec", ns.name, "ethtool", "-K", dev, "tx", "off", "tso", "off",
              "gso", "off", "gro", "off")  # fmt: skip
        if addr:
            _must("ip", "-n", ns.name, "addr", "add", f"{addr}/24", "dev", dev)
        _must("ip", "-n", ns.name, "link", "set", dev, "up")
        _must("ip", "-n", ns.name, "link", "set", "lo", "up")
    return b, ""


def box_or_skip() -> Iterator[Box]:
    """A module fixture's body: the namespaces while the tests run (destroyed after), or the
    tests skipped with the reason (no root, a tool or tshark missing, namespaces refused)."""
    import pytest

    from support.oracle.tshark import tshark_available

    why = missing_tools()
    if why:
        pytest.skip(why)
    if not tshark_available():
        pytest.skip("tshark is not installed")
    b, err = create()
    if b is None:
        pytest.skip(f"the kernel refuses network namespaces: {err}")
    try:
        yield b
    finally:
        destroy(b)


def destroy(b: Box) -> None:
    for ns in (b.client, b.server, b.box):
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, check=False)


@contextmanager
def inline(b: Box, binary: Path, out: Path, *extra: str) -> Iterator[Path]:
    """The stack bridging b0 and b1 while the block runs; its summary in the file yielded
    (complete after the block: the stack is stopped with SIGINT, as an operator would)."""
    summary = out / "summary.txt"
    cmd = [str(binary), "--io", "live", "--iface", "b0", "--peer", "b1", "--inline"]
    cmd += ["--duration", "120", "--no-timeouts", *extra]
    with open(summary, "w") as fh:
        p = subprocess.Popen(["ip", "netns", "exec", b.box.name, *cmd], stdout=fh,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            for _ in range(200):  # its two packet sockets
                if b.packet_sockets() >= 2 or p.poll() is not None:
                    break
                time.sleep(0.05)
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            yield summary
        finally:
            p.send_signal(signal.SIGINT)
            err = p.stderr.read() if p.stderr else ""
            rc = p.wait(timeout=30)
    assert rc == 0, err


def wait_listening(ns: Netns, proto: str, port: int) -> None:
    """Until a socket of the namespace listens on (tcp) or is bound to (udp) port."""
    flag = "-ltn" if proto == "tcp" else "-lun"
    for _ in range(200):
        if f":{port} " in ns.run("ss", flag).stdout:
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing {proto} on port {port} within 10 s")


@contextmanager
def tcpdump(ns: Netns, dev: str, path: Path, flt: str) -> Iterator[None]:
    """A capture of dev in ns into path while the block runs."""
    p = subprocess.Popen(["ip", "netns", "exec", ns.name, "tcpdump", "-i", dev, "-U", "-n",
                          "-w", str(path), flt],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stderr is not None
        line = p.stderr.readline()  # "tcpdump: listening on ..."
        assert "listening" in line, line
        yield
    finally:
        time.sleep(0.2)  # the last frames of the block reach the capture
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
