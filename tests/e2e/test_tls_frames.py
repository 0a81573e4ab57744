"""The framed TLS of tcp_tls (tls_stream -> tls_record -> tls_handshake: records and handshake
messages cut by the protocol language's framing) against tshark's TLS dissector: per flow the
ClientHellos' SNI, JA3 string and JA3 MD5 (tls.handshake.ja3_full, tls.handshake.ja3) and the
ServerHellos' version, cipher suite, supported_version and ALPN, on every shared capture the
tcp_ip stack is compared on; and a ClientHello spread over two TLS records, crafted here,
parsed whole and equal to tshark's reading of it."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap
from support import REPO_ROOT
from support.nf_run import nf_lines
from support.oracle.tshark import eligible_captures, tshark_available
from support.quic_captures import TRACES
from support.quic_initial import client_hello
from support.tls_oracle import (
    ClientRow,
    ServerRow,
    tshark_client_hellos,
    tshark_server_hellos,
)

from rubikgen.toolchain.build import build

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")


@pytest.fixture(scope="module")
def binary() -> Path:
    d = REPO_ROOT / "build" / "tcp_tls"  # shared with test_tls_hello.py
    return build(REPO_ROOT / "specs" / "stacks" / "tcp_tls.yaml", d, quiet=True).binary


def run(binary: Path, pcap: Path, out: Path) -> tuple[Counter[ClientRow], Counter[ServerRow]]:
    ch: Counter[ClientRow] = Counter()
    sh: Counter[ServerRow] = Counter()
    for line in nf_lines(binary, pcap, out, "sni", "sni.jsonl"):
        h = json.loads(line)
        flow = (h["src"], h["sport"], h["dst"], h["dport"])
        if h.get("server"):
            alpn = ",".join(h["alpn"])
            sh[(*flow, h["version"], h["cipher"], h["selected_version"], alpn)] += 1
        elif h["dport"] == 443:
            ch[(*flow, h["sni"] or "", h["ja3_full"], h["ja3"])] += 1
    return ch, sh


CAPTURES = [p.name for p in eligible_captures()]


@pytest.mark.parametrize("capture", CAPTURES)
def test_handshakes_equal_tshark(capture: str, binary: Path, tmp_path: Path) -> None:
    pcap = TRACES / capture
    ch, sh = run(binary, pcap, tmp_path)
    assert ch == tshark_client_hellos(pcap)
    assert sh == tshark_server_hellos(pcap)


def test_comparison_is_not_vacuous() -> None:
    if not CAPTURES:
        pytest.skip("no captures")
    ch = sum(sum(tshark_client_hellos(TRACES / c).values()) for c in CAPTURES)
    sh = sum(sum(tshark_server_hellos(TRACES / c).values()) for c in CAPTURES)
    assert ch >= 10 and sh >= 5, (ch, sh)


def two_record_capture(path: Path) -> None:
    """One connection whose ClientHello (with a large padding-like extension, so it is long) is
    cut into two TLS handshake records, each sent in its own segments."""
    hello = client_hello(random.Random(29), "two.records.example", ["h2", "http/1.1"], 3000)
    cut = 700  # the handshake message's first 700 bytes in record 1, the rest in record 2
    recs = b"".join(
        b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part for part in (hello[:cut], hello[cut:])
    )
    c, s = "10.1.0.1", "10.1.0.2"
    frames = [
        Ether() / IP(src=c, dst=s) / TCP(sport=40000, dport=443, flags="S", seq=99),
        Ether() / IP(src=s, dst=c) / TCP(sport=443, dport=40000, flags="SA", seq=499, ack=100),
        Ether() / IP(src=c, dst=s) / TCP(sport=40000, dport=443, flags="A", seq=100, ack=500),
    ]
    for off in range(0, len(recs), 1000):
        frames.append(
            Ether() / IP(src=c, dst=s)
            / TCP(sport=40000, dport=443, flags="PA", seq=100 + off, ack=500)
            / recs[off : off + 1000]
        )  # fmt: skip
    wrpcap(str(path), frames)


def test_client_hello_over_two_records(binary: Path, tmp_path: Path) -> None:
    pcap = tmp_path / "two.pcap"
    two_record_capture(pcap)
    want = tshark_client_hellos(pcap)
    assert len(want) == 1 and next(iter(want))[4] == "two.records.example", want
    ch, _ = run(binary, pcap, tmp_path)
    assert ch == want
