"""tshark as the reference for the CRYPTO bytes of QUIC Initial packets.

tshark (Wireshark 4.x) removes Initial packet protection by itself (the keys derive from the
client's first Destination Connection ID, RFC 9001 5.2) and shows every CRYPTO frame it
decrypted: `quic.crypto.offset`, `quic.crypto.length` and the frame's bytes as
`quic.crypto.crypto_data_raw` in `-T json -x --no-duplicate-keys` output. Without TLS key logs
it cannot decrypt Handshake or 1-RTT packets, so every CRYPTO frame it shows belongs to the
Initial packet number space.

`initial_crypto(pcap)` reassembles those frames here, independently of rubikgen: per flow
direction (sender address and port, receiver address and port), the bytes from offset 0 up to
the first hole, the first copy of a byte winning (retransmissions carry the same bytes). It
also returns tshark's SNI and ALPN per direction (`tls.handshake.extensions_server_name`,
`tls.handshake.extensions_alpn_str`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tshark import _tshark

Dir = tuple[str, int, str, int]  # (src, sport, dst, dport)


@dataclass
class CryptoDir:
    pieces: dict[int, bytes] = field(default_factory=dict)  # offset -> first copy
    frames: int = 0
    sni: list[str] = field(default_factory=list)
    alpn: list[str] = field(default_factory=list)

    def assembled(self) -> bytes:
        """Bytes from offset 0 to the first hole (first copy of each byte wins)."""
        got: dict[int, int] = {}
        for off in sorted(self.pieces):  # insertion order would do; sorted is deterministic
            for i, b in enumerate(self.pieces[off]):
                got.setdefault(off + i, b)
        out = bytearray()
        while len(out) in got:
            out.append(got[len(out)])
        return bytes(out)


def _list(x: Any) -> list[Any]:
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def _walk(o: Any, key: str) -> list[Any]:
    """Every value of `key` anywhere below o (tshark nests TLS inside the QUIC tree)."""
    out: list[Any] = []
    if isinstance(o, dict):
        for k, v in o.items():
            if k == key:
                out += _list(v)
            else:
                out += _walk(v, key)
    elif isinstance(o, list):
        for x in o:
            out += _walk(x, key)
    return out


@functools.cache
def initial_crypto(pcap: Path | str) -> dict[Dir, CryptoDir]:
    text = _tshark(["-r", str(pcap), "-T", "json", "-x", "--no-duplicate-keys", "-Y", "quic"])
    out: dict[Dir, CryptoDir] = {}
    for pkt in json.loads(text or "[]"):
        layers = pkt["_source"]["layers"]
        ip = layers.get("ip") or layers.get("ipv6")
        udp = layers.get("udp")
        if not ip or not udp:
            continue
        if isinstance(ip, list):  # a tunnel: the innermost header carries the UDP one
            ip = ip[-1]
        src = ip.get("ip.src") or ip.get("ipv6.src")
        dst = ip.get("ip.dst") or ip.get("ipv6.dst")
        key = (src, int(udp["udp.srcport"]), dst, int(udp["udp.dstport"]))
        d = out.setdefault(key, CryptoDir())
        for q in _list(layers.get("quic")):
            for fr in _walk(q, "quic.frame"):
                if not isinstance(fr, dict) or "quic.crypto.offset" not in fr:
                    continue
                off = int(fr["quic.crypto.offset"])
                length = int(fr["quic.crypto.length"])
                raw = fr.get("quic.crypto.crypto_data_raw")
                data = bytes.fromhex(raw[0]) if raw else b""
                assert len(data) == length, (pcap, key, off, length, len(data))
                d.frames += 1
                if off not in d.pieces or len(d.pieces[off]) < len(data):
                    d.pieces[off] = data
        tls = layers.get("tls")
        for v in _walk(layers.get("quic"), "tls.handshake.extensions_server_name") + _walk(
            tls, "tls.handshake.extensions_server_name"
        ):
            d.sni.append(str(v))
        for v in _walk(layers.get("quic"), "tls.handshake.extensions_alpn_str") + _walk(
            tls, "tls.handshake.extensions_alpn_str"
        ):
            d.alpn.append(str(v))
    return out
