"""The flows1m workload's counts (bench/multicore.py): one TCP instance per connection, closed
once by its FIN handshake, against tshark's count of the same capture.

The capture is built here with scapy the way bench/gen_flows.py builds its 1,000,000: N
connections, six phases (SYN, SYN-ACK, ACK, FIN/ACK, FIN/ACK, ACK) each over every connection
in one shuffled order, so all N are open at once. tshark numbers the TCP streams and says which
saw a FIN from both ends; the harness's command line (`multicore.flows_cmd`) and its reading of
the `--bench` JSON (`multicore.flow_counts`) must agree with it. With the flow-record memcap
that the harness once left at its default (too small for 1,000,000 records) the same reading
shows what went wrong then: evictions, and a second instance per connection opened by the
evicted connections' later packets.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest
from support import REPO_ROOT
from support.oracle import tshark_available
from support.oracle.tshark import _tshark

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
N = 300


def _multicore() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_multicore", ROOT / "bench/multicore.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_multicore"] = mod
    spec.loader.exec_module(mod)
    return mod


def _capture(path: Path, n: int) -> None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    order = list(range(n))
    random.Random(7).shuffle(order)
    frames = []
    t = 1_700_000_000.0
    for phase in range(6):
        for i in order:
            cli, srv = f"10.0.{(i + 1) >> 8}.{(i + 1) & 255}", "192.0.2.1"
            cp = 40000 + i % 20000
            c1, s1 = (i * 2654435761 + 1) & 0xFFFFFFFF, (i * 40503 + 8) & 0xFFFFFFFF
            pkt = [
                (cli, srv, cp, 80, c1 - 1, 0, "S"),
                (srv, cli, 80, cp, s1 - 1, c1, "SA"),
                (cli, srv, cp, 80, c1, s1, "A"),
                (cli, srv, cp, 80, c1, s1, "FA"),
                (srv, cli, 80, cp, s1, c1 + 1, "FA"),
                (cli, srv, cp, 80, c1 + 1, s1 + 1, "A"),
            ][phase]
            src, dst, sp, dp, seq, ack, flags = pkt
            f = (
                Ether()
                / IP(src=src, dst=dst, flags="DF")
                / TCP(sport=sp, dport=dp, seq=seq & 0xFFFFFFFF, ack=ack & 0xFFFFFFFF, flags=flags)
            )
            f.time = t
            t += 1e-6
            frames.append(f)
    wrpcap(str(path), frames)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    tmp = tmp_path_factory.mktemp("flows")
    cap = tmp / "flows.pcap"
    _capture(cap, N)
    binary = build(ROOT / "specs/stacks/tcp_ip.yaml", tmp / "stack", quiet=True).binary
    return binary, cap


def _tshark_counts(cap: Path) -> tuple[int, int, int]:
    """(TCP streams, streams with a FIN from both ends, IPv4 datagrams) as tshark sees them."""
    out = _tshark(
        ["-r", str(cap), "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport"]
        + ["-e", "tcp.flags.fin", "-e", "ip.id"]
    )
    fins: dict[str, set[str]] = defaultdict(set)
    datagrams = 0
    streams = set()
    for line in out.splitlines():
        stream, sport, fin, ipid = line.split("\t")
        streams.add(stream)
        datagrams += ipid != ""
        if fin in ("1", "True"):
            fins[stream].add(sport)
    return len(streams), sum(len(s) == 2 for s in fins.values()), datagrams


def _run(cmd: list[str]) -> dict:
    p = subprocess.run([*cmd, "--burst", "32"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_one_tcp_instance_per_connection_closed_once(setup: tuple[Path, Path]) -> None:
    binary, cap = setup
    mc = _multicore()
    streams, closed, datagrams = _tshark_counts(cap)
    assert (streams, closed, datagrams) == (N, N, 6 * N)
    j = _run(mc.flows_cmd(binary, cap, 1024))
    c = mc.flow_counts(j)
    assert c["tcp_instances"] == streams
    assert c["tcp_closed_by_fin_or_rst"] == closed
    assert c["tcp_evicted"] == c["tcp_expired"] == c["tcp_flushed"] == 0
    assert c["ip_datagrams"] == datagrams
    assert j["flows"] == streams  # instances that outlived their first packet: the connections
    assert c["instances_closed_all_layers"] == streams + datagrams


def test_a_flow_memcap_hit_shows_as_evictions(setup: tuple[Path, Path]) -> None:
    """The oddity once reported (8,000,000 instances closed for 1,000,000 connections): the
    default memcap then held fewer records than connections."""
    # (160K: the key indexes of the stack's 10 flow tables, linger and ICMP ones included, take 96K)
    binary, cap = setup
    mc = _multicore()
    j = _run([*mc.flows_cmd(binary, cap, 1024), "--memcap-flows", "160K"])
    c = mc.flow_counts(j)
    assert c["tcp_evicted"] > 0 and c["tcp_instances"] > N
    ended = c["tcp_closed_by_fin_or_rst"] + c["tcp_evicted"] + c["tcp_expired"] + c["tcp_flushed"]
    assert ended == c["tcp_instances"]
