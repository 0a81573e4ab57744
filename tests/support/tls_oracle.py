"""tshark's view of TLS handshakes over TCP: per ClientHello its flow, SNI, JA3 string and MD5
(tls.handshake.ja3_full / tls.handshake.ja3), per ServerHello its flow, version, cipher suite,
supported_version and ALPN; as compared with the sni NF (e2e/test_tls_frames.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from support.oracle.tshark import _tshark

ClientRow = tuple[str, int, str, int, str, str, str]  # src, sport, dst, dport, sni, ja3_full, ja3
ServerRow = tuple[str, int, str, int, int, int, int, str]  # + version, cipher, selected, alpn


def _rows(pcap: Path, filt: str, fields: list[str]) -> list[list[str]]:
    args = ["-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", filt,
            "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|"]  # fmt: skip
    for f in ["ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport", *fields]:
        args += ["-e", f]
    out = []
    for line in _tshark(args).splitlines():
        f = line.split("\t")
        f += [""] * (6 + len(fields) - len(f))
        src, dst = f[0] or f[1], f[3] or f[4]
        if "|" in src or "|" in dst or "|" in f[2]:  # IP in IP: not what tcp_tls parses
            continue
        out.append([src, f[2], dst, f[5], *f[6:]])
    return out


def tshark_client_hellos(pcap: Path) -> Counter[ClientRow]:
    rows = _rows(
        pcap,
        "tls.handshake.type == 1 && tcp.dstport == 443",
        ["tls.handshake.extensions_server_name", "tls.handshake.ja3_full", "tls.handshake.ja3"],
    )
    out: Counter[ClientRow] = Counter()
    for r in rows:
        # one ClientHello per frame (tshark lists each field once per hello in the frame)
        for sni, full, md5 in zip(r[4].split("|"), r[5].split("|"), r[6].split("|"), strict=False):
            if not md5:
                # a handshake record sent after ChangeCipherSpec (encrypted: TLS 1.2's Finished)
                # whose first byte is 1: tshark, without keys, calls it a ClientHello, of which
                # it can read nothing (no JA3); the stack reads no handshake record after CCS
                continue
            out[(r[0], int(r[1]), r[2], int(r[3]), sni, full, md5)] += 1
    return out


def tshark_server_hellos(pcap: Path) -> Counter[ServerRow]:
    rows = _rows(
        pcap,
        "tls.handshake.type == 2 && tcp.srcport == 443",
        [
            "tls.handshake.version",
            "tls.handshake.ciphersuite",
            "tls.handshake.extensions.supported_version",
            "tls.handshake.extensions_alpn_str",
            "tls.handshake.type",
        ],
    )
    out: Counter[ServerRow] = Counter()
    for r in rows:
        types = r[8].split("|")
        if types.count("2") != 1:  # a frame with two ServerHellos: fields cannot be paired
            continue
        ver = r[4].split("|")
        # tls.handshake.version is listed for each handshake message that has one in the frame:
        # the ServerHello's is the first after any ClientHello (there is none server-side)
        out[(r[0], int(r[1]), r[2], int(r[3]), int(ver[0], 16), int(r[5].split("|")[0], 16),
             int(r[6], 16) if r[6] else 0, r[7])] += 1  # fmt: skip
    return out
