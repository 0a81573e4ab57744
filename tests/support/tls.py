"""Shared by tests; moved from e2e/test_tls_hello.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from support.oracle.tshark import _tshark


def tshark_tcp_hellos(pcap: Path) -> Counter[Hello]:
    """ClientHellos tshark sees in TCP connections to port 443 (not in tunnels), with TCP
    reassembly of out-of-order segments on (Wireshark 4.0 leaves it off by default)."""
    text = _tshark(
        [
            "-r",
            str(pcap),
            "-o",
            "tcp.reassemble_out_of_order:TRUE",
            "-Y",
            "tls.handshake.type == 1 && tcp.dstport == 443",
            "-T",
            "fields",
            "-E",
            "separator=\t",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=|",
            "-e",
            "ip.src",
            "-e",
            "ipv6.src",
            "-e",
            "tcp.srcport",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.dst",
            "-e",
            "tcp.dstport",
            "-e",
            "tls.handshake.extensions_server_name",
            "-e",
            "tls.handshake.extensions_alpn_str",
        ]  # fmt: skip
    )
    out: Counter[Hello] = Counter()
    for line in text.splitlines():
        f = line.split("\t")
        src, dst = f[0] or f[1], f[3] or f[4]
        if "|" in src or "|" in dst:  # IP in IP: not what tcp_tls parses
            continue
        sni = f[6].split("|")[0]
        alpn = tuple(a for a in f[7].split("|") if a) if len(f) > 7 else ()
        out[(src, int(f[2]), dst, int(f[5]), sni, alpn)] += 1
    return out


Hello = tuple[str, int, str, int, str, tuple[str, ...]]  # src, sport, dst, dport, sni, alpn
