"""`--write OUT.pcap` and handler verdicts (rg_verdict_give) on real captures.

The driver writes every packet whose verdict is a pass, after the stack ran, in input order (with
--workers N too: the workers give the verdicts, the reading thread writes).
Checked against references written elsewhere: scapy's pcap reader (frames and timestamps of the
input and the output, byte for byte) and tshark's own dissection of the input (which frames
carry a UDP datagram to or from port 53: the frames a handler file dropping DNS must drop).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.pcap_frames import frames

REPO = REPO_ROOT
TRACES = REPO.parent / "shared" / "traces"
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
DROP_DNS = REPO / "tests" / "specs" / "verdict" / "drop_dns_handlers.c"
BUNDLED = REPO / "captures" / "raw-ipv4-ipv6-http.pcap"
# Real captures with DNS over UDP outside tunnels (tcp_ip parses no tunnel), IPv4 and IPv6.
DNS_CAPTURES = ["mixed-android-mobile.pcap", "raw-ipv4-ipv6-http.pcap"]
# All-pass: the output equals the input (Ethernet, raw IP, Linux cooked, a pcapng).
PASS_CAPTURES = ["mixed-android-mobile.pcap", "6in4-tcp-tls.pcap", "sll-dns2tcp-tls.pcap"]


def trace(name: str) -> Path:
    p = BUNDLED if name == BUNDLED.name else TRACES / name
    if not p.exists():
        pytest.skip(f"{p} not found (../shared/traces beside the checkout)")
    return p


def build(out: Path, handlers: Path | None) -> Path:
    argv = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out)]
    if handlers:
        argv += ["--handlers", str(handlers)]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True, text=True)
    return out / "tcp_ip"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("write-plain"), None)


@pytest.fixture(scope="module")
def drop_dns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("write-dns"), DROP_DNS)


def run(binary: Path, capture: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), str(capture), "--write", str(out), *extra]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", PASS_CAPTURES)
def test_all_pass_writes_the_input(plain: Path, tmp_path: Path, name: str) -> None:
    cap = trace(name)
    out = tmp_path / "out.pcap"
    p = run(plain, cap, out, "--summary", "json")
    assert p.returncode == 0, p.stderr
    assert frames(out) == frames(cap)
    assert f'"written":{len(frames(cap))},' in p.stdout


def dns_frames(cap: Path) -> set[int]:
    """0-based indices of the frames tshark says carry UDP to or from port 53 (not quoted
    inside ICMP errors)."""
    p = subprocess.run(
        ["tshark", "-r", str(cap), "-Y", "udp.port == 53 && !icmp && !icmpv6"]
        + ["-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {int(n) - 1 for n in p.stdout.split()}


@pytest.mark.parametrize("workers", [None, 2, 3])
@pytest.mark.parametrize("name", DNS_CAPTURES)
def test_drop_verdict_removes_exactly_the_dns_frames(
    drop_dns: Path, tmp_path: Path, name: str, workers: int | None
) -> None:
    # --workers N: the workers give the verdicts, the reading thread writes in input order
    cap = trace(name)
    drop = dns_frames(cap)
    assert drop, "the capture should carry DNS"
    out = tmp_path / "out.pcap"
    p = run(drop_dns, cap, out, *(["--workers", str(workers)] if workers else []))
    assert p.returncode == 0, p.stderr
    expected = [f for i, f in enumerate(frames(cap)) if i not in drop]
    assert frames(out) == expected
    if workers:
        assert re.search(rf"^workers +{workers} ", p.stdout, re.M), p.stdout


def test_write_refuses_bench(plain: Path, tmp_path: Path) -> None:
    for extra in (["--bench"],):
        p = run(plain, BUNDLED, tmp_path / "o.pcap", *extra)
        assert p.returncode == 2 and "--write" in p.stderr, p.stderr


def test_write_to_unwritable_path_fails_clearly(plain: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "o.pcap"
    p = run(plain, BUNDLED, target)
    assert p.returncode == 1
    assert f"--write {target}" in p.stderr
