"""The tls_client_hello spec and the sni NF against tshark: the SNI and ALPN of every ClientHello,
over TCP (stack tcp_tls, on the captures the tcp_ip stack is compared on) and over QUIC (stack
quic, every QUIC capture of the manifest), equal tshark's `tls.handshake.extensions_server_name`
and `tls.handshake.extensions_alpn_str`; and the ClientHellos of the hand-made QUIC capture, whose
author wrote them (tests/support/quic_initial.py). Each stack is built once per module."""

from __future__ import annotations

import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from support import REPO_ROOT
from support.oracle.quic_crypto import initial_crypto
from support.oracle.tshark import eligible_captures, tshark_available
from support.quic_captures import CAPTURES as QUIC_CAPTURES
from support.quic_captures import SANITIZER, TRACES
from support.quic_initial import client_hello, write_capture, write_pcap
from support.tls import (
    Hello,
    tshark_tcp_hellos,
)

from rubikgen.toolchain.build import build

REPO = REPO_ROOT


pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    out = {}
    for stack in ("tcp_tls", "quic"):  # build/STACK, shared with the other suites
        d = REPO / "build" / stack
        out[stack] = build(REPO / "specs" / "stacks" / f"{stack}.yaml", d, quiet=True).binary
    return out


def run_sni(binary: Path, pcap: Path, out: Path) -> Counter[Hello]:
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "sni", "--out", str(out), "--summary", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    got: Counter[Hello] = Counter()
    for line in (out / "sni.jsonl").read_text().splitlines():
        h = json.loads(line)
        if h.get("server"):  # a ServerHello (tcp_tls): test_tls_frames.py compares those
            continue
        got[(h["src"], h["sport"], h["dst"], h["dport"], h["sni"] or "", tuple(h["alpn"]))] += 1
    # stdout says the same, one line per ClientHello
    assert sum(1 for x in r.stdout.splitlines() if x.startswith("sni ")) == sum(got.values())
    return got


TCP_CAPTURES = [p.name for p in eligible_captures()]


@pytest.mark.parametrize("capture", TCP_CAPTURES)
def test_tcp_client_hellos_equal_tshark(
    capture: str, binaries: dict[str, Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    want = tshark_tcp_hellos(pcap)
    got = run_sni(binaries["tcp_tls"], pcap, tmp_path)
    assert got == want


def test_tcp_comparison_is_not_vacuous() -> None:
    total = sum(sum(tshark_tcp_hellos(TRACES / c).values()) for c in TCP_CAPTURES)
    if not TCP_CAPTURES:
        pytest.skip("no captures")
    assert total >= 10, total


@pytest.mark.parametrize("capture", QUIC_CAPTURES)
def test_quic_client_hellos_equal_tshark(
    capture: str, binaries: dict[str, Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    want: Counter[Hello] = Counter()
    for (src, sport, dst, dport), d in initial_crypto(pcap).items():
        if d.assembled()[:1] == b"\x01":  # this direction's CRYPTO stream is a ClientHello
            want[(src, sport, dst, dport, d.sni[0] if d.sni else "", tuple(d.alpn))] += 1
    got = run_sni(binaries["quic"], pcap, tmp_path)
    assert got == want


def test_hand_made_quic_client_hellos(binaries: dict[str, Path], tmp_path: Path) -> None:
    pcap = tmp_path / "initials.pcap"
    write_capture(pcap)
    got = run_sni(binaries["quic"], pcap, tmp_path / "out")
    assert got == Counter(
        {
            ("10.0.0.1", 50000, "10.0.0.2", 443, "split.example.org", ("h3", "h3-29")): 1,
            ("10.0.0.1", 50001, "10.0.0.2", 443, "retry.example.net", ("h3",)): 1,
        }
    )


def split_hello_capture(path: Path) -> Counter[Hello]:
    """TCP connections to port 443 whose ClientHello record spans several segments: two
    segments arriving in reverse order, and three segments with a retransmission."""
    rng = random.Random(5)
    frames: list[tuple[bytes, int]] = []
    want: Counter[Hello] = Counter()

    def seg(
        src: str, dst: str, sp: int, dp: int, seq: int, ack: int, flags: str, data: bytes = b""
    ) -> None:
        raw = bytes(
            Ether()
            / IP(src=src, dst=dst)
            / TCP(sport=sp, dport=dp, seq=seq, ack=ack, flags=flags, window=65535)
            / data
        )
        frames.append((raw, len(raw)))

    for port, sni, alpn, size, cuts, order in (
        (40000, "split-tcp.example.com", ["h2", "http/1.1"], 1800, [1000], [1, 0]),
        (40001, "three.example.org", ["h2"], 3000, [1200, 2400], [0, 2, 0, 1]),
    ):
        c, s = "10.1.0.1", "10.1.0.2"
        ch = client_hello(rng, sni, alpn, size)
        record = b"\x16\x03\x01" + len(ch).to_bytes(2, "big") + ch
        ic, is_ = 1000 + port, 5000
        seg(c, s, port, 443, ic, 0, "S")
        seg(s, c, 443, port, is_, ic + 1, "SA")
        seg(c, s, port, 443, ic + 1, is_ + 1, "A")
        bounds = [0, *cuts, len(record)]
        for k in order:
            a, b = bounds[k], bounds[k + 1]
            seg(c, s, port, 443, ic + 1 + a, is_ + 1, "PA", record[a:b])
        seg(s, c, 443, port, is_ + 1, ic + 1 + len(record), "A")
        want[(c, port, s, 443, sni, tuple(alpn))] += 1
    write_pcap(path, frames)
    return want


def test_split_tcp_client_hellos(binaries: dict[str, Path], tmp_path: Path) -> None:
    pcap = tmp_path / "split.pcap"
    want = split_hello_capture(pcap)
    assert tshark_tcp_hellos(pcap) == want  # the capture is what its author says
    assert run_sni(binaries["tcp_tls"], pcap, tmp_path / "out") == want
