#!/usr/bin/env python3
"""A capture of N concurrent TCP connections (default 1,000,000): opened, kept alive, closed.

    python bench/gen_flows.py [--flows N] [--out bench/captures/flows1m.pcap]

Six phases, each over every connection in the same shuffled order (so every packet finds its
connection among all N live ones, in a cold part of the table): the client's SYN, the server's
SYN-ACK, the client's ACK (all N open), then the client's FIN/ACK, the server's FIN/ACK and the
client's last ACK (all N closed). 6 N frames of 54 bytes (Ethernet / IPv4 / TCP, no options,
no payload, valid checksums), 1 microsecond apart: the whole capture lasts 6 N microseconds, far
less than any idle timeout, so all N are open at once. Client i is 10.X.Y.Z (i + 1 in the low
three bytes), port 40000 + i % 20000; the server is 192.0.2.1:80. Deterministic (the order
comes from random.Random(seed)).
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
from pathlib import Path

ETH = bytes.fromhex("0200000000020200000000010800")
ETH_BACK = bytes.fromhex("0200000000010200000000020800")
SERVER = bytes([192, 0, 2, 1])
SYN, ACK, FIN = 0x02, 0x10, 0x01


def csum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src: bytes, dst: bytes, sp: int, dp: int, seq: int, ack: int, flags: int) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sp, dp, seq, ack, 5 << 4, flags, 65535, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return (ETH if src != SERVER else ETH_BACK) + ip + tcp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/gen_flows.py", description=__doc__)
    ap.add_argument("--flows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "captures/flows1m.pcap")
    a = ap.parse_args(argv)
    order = list(range(a.flows))
    random.Random(a.seed).shuffle(order)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    t = 1_700_000_000 * 1_000_000  # microseconds
    with open(a.out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for phase in range(6):
            buf = bytearray()
            for i in order:
                cli = struct.pack("!I", (10 << 24) + i + 1)
                cp = 40000 + i % 20000
                isn_c, isn_s = (i * 2654435761) & 0xFFFFFFFF, (i * 40503 + 7) & 0xFFFFFFFF
                c1, s1 = (isn_c + 1) & 0xFFFFFFFF, (isn_s + 1) & 0xFFFFFFFF
                if phase == 0:
                    fr = frame(cli, SERVER, cp, 80, isn_c, 0, SYN)
                elif phase == 1:
                    fr = frame(SERVER, cli, 80, cp, isn_s, c1, SYN | ACK)
                elif phase == 2:
                    fr = frame(cli, SERVER, cp, 80, c1, s1, ACK)
                elif phase == 3:
                    fr = frame(cli, SERVER, cp, 80, c1, s1, FIN | ACK)
                elif phase == 4:
                    fr = frame(SERVER, cli, 80, cp, s1, (c1 + 1) & 0xFFFFFFFF, FIN | ACK)
                else:
                    fr = frame(
                        cli, SERVER, cp, 80, (c1 + 1) & 0xFFFFFFFF, (s1 + 1) & 0xFFFFFFFF, ACK
                    )
                buf += struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(fr), len(fr))
                buf += fr
                t += 1
            f.write(buf)
    sys.stderr.write(f"{a.out}: {6 * a.flows} frames, {a.flows} connections\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
