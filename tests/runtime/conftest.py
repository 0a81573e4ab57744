"""Fixtures of the runtime tests: the srcdump tool, a network namespace with veth pairs, the DPDK
source, the tcp_ip binary with both sources, the NF-chain binary (module scope: built once per
test file that asks)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.captures import REPO, STACK
from support.sources import RUNTIME, SRCDUMP, Netns, _build


@pytest.fixture(scope="module")
def srcdump() -> Path:
    subprocess.run(["make", "-s", "-C", str(RUNTIME), "tools"], check=True)
    return SRCDUMP


def _veth_netns(tag: str, queues: int = 1, mtu: int = 16000) -> Iterator[Netns]:
    """A namespace with a veth pair va <-> vb of `queues` RX and TX queues each, up, IPv6 off."""
    if os.geteuid() != 0:
        pytest.skip("live capture tests need root (network namespaces, raw sockets)")
    for tool in ("ip", "tcpreplay"):
        if not shutil.which(tool):
            pytest.skip(f"live capture tests need `{tool}` (ci/setup.sh installs it)")
    name = f"{tag}{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"the kernel refuses network namespaces: {r.stderr.strip()}")
    ns = Netns(name)
    q = [] if queues == 1 else ["numrxqueues", str(queues), "numtxqueues", str(queues)]
    try:
        steps = [
            ["ip", "-n", name, "link", "add", "va", *q, "type", "veth", "peer", "name", "vb", *q],
        ]
        for dev in ("va", "vb"):
            steps += [
                [
                    "ip",
                    "netns",
                    "exec",
                    name,
                    "sysctl",
                    "-qw",
                    f"net.ipv6.conf.{dev}.disable_ipv6=1",
                ],
                ["ip", "-n", name, "link", "set", dev, "mtu", str(mtu), "up"],
            ]
        for cmd in steps:
            subprocess.run(cmd, check=True, capture_output=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture(scope="module")
def netns() -> Iterator[Netns]:
    """A namespace with a veth pair va <-> vb, up, IPv6 off, MTU 16000."""
    yield from _veth_netns("rgsrc")


@pytest.fixture(scope="module")
def netns_2q() -> Iterator[Netns]:
    """The same with two RX and TX queues on each end and MTU 3000 (veth's native XDP takes
    no MTU above about 3,500 without multi-buffer programs)."""
    yield from _veth_netns("rgsrc2q", queues=2, mtu=3000)


@pytest.fixture(scope="module")
def dpdk(srcdump: Path) -> Path:
    r = subprocess.run(["pkg-config", "--exists", "libdpdk"], check=False)
    if r.returncode != 0:
        pytest.skip(
            "DPDK is not installed (pkg-config finds no libdpdk; apt-get install libdpdk-dev)"
        )
    return srcdump


@pytest.fixture(scope="module")
def stack_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    has_dpdk = subprocess.run(["pkg-config", "--exists", "libdpdk"], check=False).returncode == 0
    out = tmp_path_factory.mktemp("stack")
    r = _build(out, "dpdk" if has_dpdk else "pcap")
    assert r.returncode == 0, r.stderr
    return out / "tcp_ip"


@pytest.fixture(scope="module")
def binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary
