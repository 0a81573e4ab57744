"""Hand-made QUIC captures: Initial packets protected here, with Python's `cryptography`
package, independently of rubikgen's runtime (RFC 9001 5: HKDF-SHA256, AES-128-GCM, AES-128-ECB
header protection; v2 per RFC 9369), and what a correct stack must deliver.

`write_capture(path)` writes one Ethernet pcap with two connections and returns, per flow
direction (src, sport, dst, dport), the CRYPTO bytes the Initial packets it protected carry
(never bytes from a stack or from tshark), plus the number of Initials a stack must reject.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

V1, V2 = 0x00000001, 0x6B3343CF
SALT = {
    V1: bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a"),
    V2: bytes.fromhex("0dede3def700a6db819381be6e269dcbf9bd2ed9"),
}
# long header packet types per version (RFC 9369 3.2)
TYPES = {
    V1: {"initial": 0, "handshake": 2, "retry": 3},
    V2: {"initial": 1, "handshake": 3, "retry": 0},
}


def varint(v: int) -> bytes:
    if v < 1 << 6:
        return bytes([v])
    if v < 1 << 14:
        return struct.pack("!H", 0x4000 | v)
    if v < 1 << 30:
        return struct.pack("!I", 0x80000000 | v)
    return struct.pack("!Q", 0xC000000000000000 | v)


def _expand_label(secret: bytes, label: str, n: int) -> bytes:
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", n, len(full)) + full + b"\x00"
    return HKDFExpand(hashes.SHA256(), n, info).derive(secret)


def keys(version: int, cid: bytes, server: bool) -> tuple[bytes, bytes, bytes]:
    h = hmac.HMAC(SALT[version], hashes.SHA256())
    h.update(cid)
    secret = _expand_label(h.finalize(), "server in" if server else "client in", 32)
    p = "quicv2 " if version == V2 else "quic "
    return (
        _expand_label(secret, p + "key", 16),
        _expand_label(secret, p + "iv", 12),
        _expand_label(secret, p + "hp", 16),
    )


def client_hello(rng: random.Random, sni: str, alpn: list[str], size: int) -> bytes:
    """A TLS 1.3 ClientHello handshake message of `size` bytes (a padding extension fills it):
    SNI, ALPN, supported_versions, signature_algorithms, then padding (RFC 8446, RFC 7685)."""

    def ext(t: int, body: bytes) -> bytes:
        return struct.pack("!HH", t, len(body)) + body

    name = sni.encode()
    exts = ext(0, struct.pack("!HBH", len(name) + 3, 0, len(name)) + name)
    names = b"".join(bytes([len(a)]) + a.encode() for a in alpn)
    exts += ext(16, struct.pack("!H", len(names)) + names)
    exts += ext(43, b"\x02\x03\x04")
    exts += ext(13, b"\x00\x04\x04\x03\x08\x04")
    ciphers = b"\x13\x01\x13\x02\x13\x03"
    body = b"\x03\x03" + bytes(rng.randrange(256) for _ in range(32)) + b"\x00"
    body += struct.pack("!H", len(ciphers)) + ciphers + b"\x01\x00"
    pad = size - 4 - len(body) - 2 - len(exts) - 4
    assert pad >= 0
    exts += ext(21, bytes(pad))
    body += struct.pack("!H", len(exts)) + exts
    return b"\x01" + len(body).to_bytes(3, "big") + body


def server_hello(rng: random.Random, size: int) -> bytes:
    """A handshake message of type ServerHello with `size` bytes (the body is not parsed)."""
    body = b"\x03\x03" + bytes(rng.randrange(256) for _ in range(size - 6))
    return b"\x02" + len(body).to_bytes(3, "big") + body


def crypto_frame(offset: int, data: bytes) -> bytes:
    return b"\x06" + varint(offset) + varint(len(data)) + data


def initial(
    version: int,
    dcid: bytes,
    scid: bytes,
    pn: int,
    frames: bytes,
    *,
    key_cid: bytes,
    server: bool,
    token: bytes = b"",
    pad_to: int = 0,
    pn_len: int = 2,
    corrupt_tag: bool = False,
) -> bytes:
    """One protected Initial packet (PADDING appended up to pad_to bytes)."""
    head = bytes([0xC0 | TYPES[version]["initial"] << 4 | (pn_len - 1)])
    head += struct.pack("!I", version) + bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
    head += varint(len(token)) + token
    fixed = len(head) + 2 + pn_len + 16  # Length as a 2-byte varint
    if pad_to > fixed + len(frames):
        frames += bytes(pad_to - fixed - len(frames))
    frames += bytes(max(0, 4 - pn_len - len(frames)))  # room for the header protection sample
    head += struct.pack("!H", 0x4000 | (pn_len + len(frames) + 16))  # Length, 2-byte varint
    pn_off = len(head)
    header = head + pn.to_bytes(pn_len, "big")
    key, iv, hp = keys(version, key_cid, server)
    nonce = bytes(a ^ b for a, b in zip(iv, bytes(4) + pn.to_bytes(8, "big"), strict=True))
    body = AESGCM(key).encrypt(nonce, frames, header)
    if corrupt_tag:
        body = body[:-1] + bytes([body[-1] ^ 0x01])
    pkt = bytearray(header + body)
    sample = bytes(pkt[pn_off + 4 : pn_off + 20])
    enc = Cipher(algorithms.AES(hp), modes.ECB()).encryptor()
    mask = enc.update(sample) + enc.finalize()
    pkt[0] ^= mask[0] & 0x0F
    for i in range(pn_len):
        pkt[pn_off + i] ^= mask[1 + i]
    return bytes(pkt)


def retry(version: int, dcid: bytes, scid: bytes, token: bytes) -> bytes:
    """A Retry packet (the integrity tag is not checked by a passive observer: random)."""
    first = bytes([0xC0 | TYPES[version]["retry"] << 4])
    rng = random.Random(7)
    tag = bytes(rng.randrange(256) for _ in range(16))
    return (
        first
        + struct.pack("!I", version)
        + bytes([len(dcid)])
        + dcid
        + bytes([len(scid)])
        + scid
        + token
        + tag
    )


def opaque_long(version: int, kind: str, dcid: bytes, scid: bytes, size: int) -> bytes:
    """A Handshake (or other) long header packet with a random protected body."""
    rng = random.Random(size)
    body = bytes(rng.randrange(256) for _ in range(size))
    first = bytes([0xC0 | TYPES[version][kind] << 4 | 1])
    return (
        first
        + struct.pack("!I", version)
        + bytes([len(dcid)])
        + dcid
        + bytes([len(scid)])
        + scid
        + varint(len(body))
        + body
    )


@dataclass
class Expected:
    crypto: dict[tuple[str, int, str, int], bytes] = field(default_factory=dict)
    rejected: int = 0  # Initials that must fail authentication (counted, not delivered)


def write_capture(path: Path) -> Expected:
    rng = random.Random(1729)
    exp = Expected()
    frames: list[tuple[bytes, int]] = []
    C, S = "10.0.0.1", "10.0.0.2"

    def dgram(src: str, sport: int, dst: str, dport: int, payload: bytes, snap: int = 0) -> None:
        raw = bytes(Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / payload)
        frames.append((raw[:snap] if snap else raw, len(raw)))

    # -- connection A, QUIC v1: a 1500-byte ClientHello split over Initials sent out of order,
    # two of them coalesced in one datagram, a retransmission, a packet with a bad tag, a packet
    # cut by the capture's snaplen; the server's Initial coalesced with a Handshake packet
    ch = client_hello(rng, "split.example.org", ["h3", "h3-29"], 1500)
    sh = server_hello(rng, 90)
    dcid, cscid, sscid = b"\x11" * 8, b"\x22" * 5, b"\x33" * 8

    def cinit(pn: int, fr: bytes, **kw: object) -> bytes:
        return initial(V1, dcid, cscid, pn, fr, key_cid=dcid, server=False, **kw)  # type: ignore[arg-type]

    dgram(C, 50000, S, 443, cinit(1, crypto_frame(700, ch[700:1400]), pad_to=1200))
    first = cinit(0, crypto_frame(0, ch[:300]))  # PING, then CRYPTO, padded inside the packet
    dgram(C, 50000, S, 443, first + cinit(2, b"\x01" + crypto_frame(300, ch[300:700]),
                                          pad_to=1200 - len(first)))  # fmt: skip
    forged = bytes(rng.randrange(256) for _ in range(100))
    dgram(C, 50000, S, 443, cinit(3, crypto_frame(1400, forged), pad_to=1200, corrupt_tag=True))
    exp.rejected += 1
    dgram(C, 50000, S, 443, cinit(4, crypto_frame(1400, ch[1400:1500]), pad_to=1200))
    dgram(C, 50000, S, 443, cinit(5, crypto_frame(0, ch[:300]), pad_to=1200))  # retransmission
    # cut by the snaplen: its CRYPTO bytes [1500, 1600) are never seen whole
    more = bytes(rng.randrange(256) for _ in range(100))  # a second message's first bytes
    dgram(C, 50000, S, 443, cinit(6, crypto_frame(1500, more), pad_to=1200), snap=400)
    ack = b"\x02\x01\x00\x00\x01"  # ACK largest 1, delay 0, 0 ranges, first range 1
    srv = initial(V1, cscid, sscid, 0, ack + crypto_frame(0, sh), key_cid=dcid, server=True)
    dgram(S, 443, C, 50000, srv + opaque_long(V1, "handshake", cscid, sscid, 300))
    exp.crypto[(C, 50000, S, 443)] = ch[:1500]
    exp.crypto[(S, 443, C, 50000)] = sh

    # -- connection B, QUIC v2 with a Retry: the client's second Initial uses the DCID the
    # Retry chose, and the keys derive from it from then on (both directions)
    ch2 = client_hello(rng, "retry.example.net", ["h3"], 700)
    sh2 = server_hello(rng, 120)
    d1, cs, rs = b"\x44" * 8, b"\x55" * 8, b"\x66" * 10
    dgram(C, 50001, S, 443, initial(V2, d1, cs, 0, crypto_frame(0, ch2[:400]), key_cid=d1,
                                   server=False, pad_to=1200))  # fmt: skip
    dgram(S, 443, C, 50001, retry(V2, cs, rs, b"tok" * 10))
    dgram(C, 50001, S, 443, initial(V2, rs, cs, 1, crypto_frame(400, ch2[400:]) +
                                   crypto_frame(0, ch2[:400]), key_cid=rs, server=False,
                                   token=b"tok" * 10, pad_to=1200))  # fmt: skip
    dgram(S, 443, C, 50001, initial(V2, cs, rs, 0, crypto_frame(0, sh2), key_cid=rs, server=True))
    exp.crypto[(C, 50001, S, 443)] = ch2
    exp.crypto[(S, 443, C, 50001)] = sh2

    write_pcap(path, frames)
    return exp


def write_pcap(path: Path, frames: list[tuple[bytes, int]]) -> None:
    """Classic pcap, Ethernet; each frame with its wire length (caplen < len: snaplen cut)."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, (data, wire) in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000, i * 1000, len(data), wire) + data)
    path.write_bytes(b"".join(out))
