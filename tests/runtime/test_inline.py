"""Inline mode (`--inline`): frames go on to the peer port or interface unless a verdict drops
them, on real devices and real captures.

The tcp_ip stack runs with tests/specs/verdict/flow_verdicts_handlers.c (HTTP and NTP flows
dropped, TLS flows bypassed, DNS answers dropped; tests/support/oracle/verdicts.py says, from tshark's
dissection of the input, which frames that drops). What leaves the peer must be exactly the
input's other frames, byte for byte and in order:

- DPDK: two pcap virtual devices (no hugepages, no NIC): port 0 reads the capture and its frames
  leave through port 1's tx_pcap file, the same mbufs (port 1 reads an empty capture, so port
  0's tx_pcap stays empty);
- live: two veth pairs in a network namespace the test creates: tcpreplay sends the capture
  into a0, the stack reads b0 and injects into b1, and srcdump (runtime-c/tests/srcdump.c)
  captures what arrives at a1; then the other way round (a1 -> b1 -> b0 -> a0), since the
  stack forwards both ways.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.oracle.tshark import REPO, TRACES
from support.oracle.verdicts import expect
from support.sources import SRCDUMP, Netns, _eal, read_pcap

# replays and paced input: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
HANDLERS = REPO / "tests" / "specs" / "verdict" / "flow_verdicts_handlers.c"
CAPTURE = "mixed-android-mobile.pcap"


def _has_dpdk() -> bool:
    return subprocess.run(["pkg-config", "--exists", "libdpdk"], check=False).returncode == 0


@pytest.fixture(scope="module")
def capture() -> Path:
    p = TRACES / CAPTURE
    if not p.exists():
        pytest.skip(f"{p} not found (../shared/traces beside the checkout)")
    return p


@pytest.fixture(scope="module")
def passed(capture: Path) -> list[bytes]:
    """The frames the handlers let through, in order."""
    drop = expect(capture).dropped
    assert drop
    return [b for i, (_, b) in enumerate(read_pcap(capture)) if i not in drop]


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inline")
    argv = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out)]
    argv += ["--handlers", str(HANDLERS), "--io", "dpdk" if _has_dpdk() else "pcap"]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True)
    return out / "tcp_ip"


def _empty_pcap(path: Path) -> Path:
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


def _tx_line(summary: str) -> dict[str, int]:
    m = re.search(r"^forwarded +(\d+) +\(withheld (\d+) by verdicts, (\d+) failed", summary, re.M)
    assert m, summary
    return {"sent": int(m[1]), "withheld": int(m[2]), "failed": int(m[3])}


# ---- DPDK ----------------------------------------------------------------------------------


# the capture with verdicts, and one whose frames of up to 3633 bytes arrive as mbuf chains
# (several segments) and must leave as they came (no port a rule names: all pass)
@pytest.mark.parametrize("name", [CAPTURE, "tcp-retransmissions.pcap"])
def test_dpdk_inline_forwards_what_passes(binary: Path, tmp_path: Path, name: str) -> None:
    if not _has_dpdk():
        pytest.skip("DPDK is not installed (pkg-config finds no libdpdk)")
    capture = TRACES / name
    if not capture.exists():
        pytest.skip(f"{capture} not found (../shared/traces beside the checkout)")
    drop = expect(capture).dropped
    passed = [b for i, (_, b) in enumerate(read_pcap(capture)) if i not in drop]
    n = len(read_pcap(capture))
    out0, out1 = tmp_path / "out0.pcap", tmp_path / "out1.pcap"
    empty = _empty_pcap(tmp_path / "empty.pcap")
    vdevs = (
        f"net_pcap0,rx_pcap={capture},tx_pcap={out0}",
        f"net_pcap1,rx_pcap={empty},tx_pcap={out1}",
    )
    cmd = [str(binary), "--io", "dpdk", "--inline", "--count", str(n), "--duration", "60"]
    cmd += ["--no-timeouts", "--", *_eal(tmp_path, *vdevs)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [b for _, b in read_pcap(out1)] == passed
    assert read_pcap(out0) == []
    assert _tx_line(r.stdout) == {"sent": len(passed), "withheld": n - len(passed), "failed": 0}


def test_dpdk_inline_workers_forward_what_passes(binary: Path, tmp_path: Path) -> None:
    """--workers 2 on DPDK: each worker lcore sends its frames on through its own TX queue of
    the peer port (a pcap vdev writes each TX queue to a file of its own): together exactly the
    frames that pass, each queue in input order, each frame on the queue of the worker a
    symmetric-RSS NIC gives its addresses (the Toeplitz hash of test_multicore.py)."""
    if not _has_dpdk():
        pytest.skip("DPDK is not installed (pkg-config finds no libdpdk)")
    from support.multicore import SYMMETRIC_KEY, _eal_workers, parse, toeplitz

    capture = TRACES / CAPTURE
    if not capture.exists():
        pytest.skip(f"{capture} not found (../shared/traces beside the checkout)")
    drop = expect(capture).dropped
    passed = [b for i, (_, b) in enumerate(read_pcap(capture)) if i not in drop]
    n = len(read_pcap(capture))
    outs = {p: [tmp_path / f"out{p}{q}.pcap" for q in (0, 1)] for p in (0, 1)}
    empty = _empty_pcap(tmp_path / "empty.pcap")
    vdevs = [
        f"net_pcap{p},rx_pcap={capture if p == 0 else empty},"
        + ",".join(f"tx_pcap={o}" for o in outs[p])
        for p in (0, 1)
    ]
    cmd = [str(binary), "--io", "dpdk", "--inline", "--workers", "2", "--count", str(n)]
    cmd += ["--duration", "60", "--no-timeouts", "--", *_eal_workers(tmp_path, 2, *vdevs)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    queues = [[b for _, b in read_pcap(o)] for o in outs[1]]
    assert all(queues) and sorted(queues[0] + queues[1]) == sorted(passed)
    for q, frames in enumerate(queues):
        it = iter(passed)
        assert all(any(f == p for p in it) for f in frames), f"queue {q}: input order"
        for f in frames:
            p = parse(f)
            if p is not None:
                assert (toeplitz(SYMMETRIC_KEY, p.src + p.dst) & 127) % 2 == q
    assert all(read_pcap(o) == [] for o in outs[0])
    assert _tx_line(r.stdout) == {"sent": len(passed), "withheld": n - len(passed), "failed": 0}


def test_readme_middlebox_inline_on_dpdk_vdevs(tmp_path: Path) -> None:
    """The README's rules (docs/examples/middlebox.rules.yaml) inline between two DPDK pcap
    vdevs forward exactly what `--write` writes offline on the same capture, byte for byte (the
    offline output is checked against tshark by tests/e2e/test_rules.py::test_readme_middlebox):
    telnet withheld, the web connection on 8080 both ways, VoIP marked, checksums fixed up."""
    if not _has_dpdk():
        pytest.skip("DPDK is not installed (pkg-config finds no libdpdk)")
    from support.rules import _voip_capture

    capture = tmp_path / "voip.pcap"
    _voip_capture(capture)
    rules = REPO / "docs" / "examples" / "middlebox.rules.yaml"
    out = tmp_path / "b"
    argv = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out)]
    argv += ["--rules", str(rules), "--io", "dpdk"]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True)
    binary = out / "tcp_ip"
    offline = tmp_path / "offline.pcap"
    r = subprocess.run([str(binary), str(capture), "--write", str(offline)], capture_output=True)
    assert r.returncode == 0, r.stderr
    n = len(read_pcap(capture))
    out0, out1 = tmp_path / "out0.pcap", tmp_path / "out1.pcap"
    vdevs = (
        f"net_pcap0,rx_pcap={capture},tx_pcap={out0}",
        f"net_pcap1,rx_pcap={_empty_pcap(tmp_path / 'empty.pcap')},tx_pcap={out1}",
    )
    cmd = [str(binary), "--io", "dpdk", "--inline", "--count", str(n), "--duration", "60"]
    cmd += ["--no-timeouts", "--", *_eal(tmp_path, *vdevs)]
    r2 = subprocess.run(cmd, capture_output=True, text=True)
    assert r2.returncode == 0, r2.stderr
    written = [b for _, b in read_pcap(offline)]
    assert 0 < len(written) < n  # telnet dropped, the rest passed
    assert [b for _, b in read_pcap(out1)] == written
    assert _tx_line(r2.stdout) == {"sent": len(written), "withheld": n - len(written), "failed": 0}


def test_dpdk_inline_needs_port_pairs(binary: Path, capture: Path, tmp_path: Path) -> None:
    if not _has_dpdk():
        pytest.skip("DPDK is not installed (pkg-config finds no libdpdk)")
    cmd = [str(binary), "--io", "dpdk", "--inline", "--count", "1", "--"]
    cmd += _eal(tmp_path, f"net_pcap0,rx_pcap={capture}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 1
    assert "--inline pairs the ports" in r.stderr, r.stderr


def test_inline_option_errors(binary: Path, capture: Path) -> None:
    cases = [
        ([str(capture), "--inline"], "--io live or dpdk"),
        (["--io", "live", "--iface", "lo", "--inline"], "needs --peer IF"),
        (["--io", "live", "--iface", "lo", "--peer", "lo"], "--peer names the second"),
    ]
    for args, msg in cases:
        r = subprocess.run([str(binary), *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert msg in r.stderr, (args, r.stderr)


# ---- live ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wire() -> Iterator[Netns]:
    """A namespace with two veth pairs a0 <-> b0 and a1 <-> b1, up, IPv6 off, MTU 16000."""
    if os.geteuid() != 0:
        pytest.skip("inline live tests need root (network namespaces, raw sockets)")
    for tool in ("ip", "tcpreplay"):
        if not shutil.which(tool):
            pytest.skip(f"inline live tests need `{tool}` (ci/setup.sh installs it)")
    name = f"rginl{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"the kernel refuses network namespaces: {r.stderr.strip()}")
    try:
        for k in ("0", "1"):
            subprocess.run(
                ["ip", "-n", name, "link", "add", f"a{k}", "type", "veth", "peer", "name", f"b{k}"],
                check=True,
                capture_output=True,
            )
            for dev in (f"a{k}", f"b{k}"):
                sysctl = f"net.ipv6.conf.{dev}.disable_ipv6=1"
                subprocess.run(
                    ["ip", "netns", "exec", name, "sysctl", "-qw", sysctl],
                    check=True,
                    capture_output=True,
                )
                subprocess.run(
                    ["ip", "-n", name, "link", "set", dev, "mtu", "16000", "up"],
                    check=True,
                    capture_output=True,
                )
        yield Netns(name)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _packet_sockets(ns: Netns) -> int:
    return len(ns.run("cat", "/proc/net/packet").stdout.splitlines()[1:])


@pytest.mark.parametrize(
    ("way", "workers"), [("a0-to-a1", None), ("a1-to-a0", None), ("a0-to-a1", 2)]
)
def test_live_inline_forwards_what_passes(
    wire: Netns,
    binary: Path,
    capture: Path,
    passed: list[bytes],
    tmp_path: Path,
    way: str,
    workers: int | None,
) -> None:
    # --workers 2: the workers give the verdicts, the reading thread sends the frames on in
    # input order
    src, dst = ("a0", "a1") if way == "a0-to-a1" else ("a1", "a0")
    subprocess.run(["make", "-s", "-C", str(REPO / "runtime-c"), "tools"], check=True)
    n = len(read_pcap(capture))
    got = tmp_path / "got.pcap"
    dump = wire.popen(
        str(SRCDUMP), "--io", "live", "--name", dst, "-w", str(got),
        "--count", str(len(passed)), "--duration", "60",
    )  # fmt: skip
    assert dump.stderr is not None
    assert dump.stderr.readline().strip() == "ready"
    cmd = [str(binary), "--io", "live", "--iface", "b0", "--peer", "b1", "--inline"]
    cmd += ["--count", str(n), "--duration", "60", "--no-timeouts"]
    cmd += ["--workers", str(workers)] if workers else []
    with open(tmp_path / "summary.txt", "w") as summary:
        stack = subprocess.Popen(
            ["ip", "netns", "exec", wire.name, *cmd],
            stdout=summary,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(200):  # srcdump's socket and the stack's two
            if _packet_sockets(wire) >= 3:
                break
            time.sleep(0.05)
        # 1000 frames/s: the stack reads two interfaces and injects every frame; a shared
        # machine must not make the kernel drop (the summary says so: `dropped 0`)
        r = wire.run("tcpreplay", "-q", "-i", src, "--pps", "1000", str(capture))
        assert r.returncode == 0, r.stdout + r.stderr
        assert stack.stderr is not None
        err = stack.stderr.read()
        assert stack.wait(timeout=90) == 0, err
    rc = dump.wait(timeout=90)
    assert rc == 0, dump.stderr.read()
    out = (tmp_path / "summary.txt").read_text()
    assert re.search(r"^dropped +0 ", out, re.M), out
    assert _tx_line(out) == {"sent": len(passed), "withheld": n - len(passed), "failed": 0}
    assert [b for _, b in read_pcap(got)] == passed
    if workers:
        m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", out, re.M)
        assert m and int(m[1]) > 0 and int(m[2]) > 0, out


def test_rubikgen_run_passes_the_inline_options_on(binary: Path, capture: Path) -> None:
    # the same build (handlers, sources): run reuses it; the binary judges the options
    argv = [sys.executable, "-m", "rubikgen", "run", str(STACK), str(capture), "--nf", "none"]
    argv += ["--build-dir", str(binary.parent), "--handlers", str(HANDLERS)]
    argv += ["--io", "dpdk" if _has_dpdk() else "pcap"]
    for extra, msg in (
        (["--inline"], "--io live or dpdk"),
        (["--peer", "eth9"], "--peer names the second interface of --inline"),
    ):
        r = subprocess.run([*argv, *extra], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
        assert msg in r.stderr and "rebuilt" not in r.stderr, r.stderr
