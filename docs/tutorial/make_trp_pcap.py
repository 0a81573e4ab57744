"""Writes docs/tutorial/trp.pcap, the tutorial's capture: one TRP connection over UDP port 7000.

The client (10.0.0.1:40000) opens connection 7 with an MSS option, sends a request in two
packets (the second arrives first and the first is then sent twice), the server answers in one
packet, and the client ends with FIN. Run it with `python docs/tutorial/make_trp_pcap.py`;
the output is deterministic (fixed timestamps).
"""

from __future__ import annotations

import struct
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 7000)
CONN = 7


def trp(syn: int, ack: int, fin: int, seq: int, ack_no: int, opts: bytes = b"") -> bytes:
    hlen = 12 + len(opts)
    word = 1 << 30 | syn << 29 | ack << 28 | fin << 27 | hlen << 20 | CONN
    return struct.pack("!III", word, seq, ack_no) + opts


def frame(src: tuple[str, int], dst: tuple[str, int], data: bytes, t: float) -> Ether:
    p = Ether() / IP(src=src[0], dst=dst[0]) / UDP(sport=src[1], dport=dst[1]) / data
    p.time = t
    return p


def main() -> None:
    c, s = 100, 500  # initial offsets; a SYN and a FIN take one each
    req1, req2, resp = b"GET /hello ", b"TRP/1", b"hello, world"
    mss = bytes([2, 4]) + struct.pack("!H", 1200)
    packets = [
        frame(CLIENT, SERVER, trp(1, 0, 0, c, 0, mss), 1.0),
        frame(SERVER, CLIENT, trp(1, 1, 0, s, c + 1), 1.1),
        frame(CLIENT, SERVER, trp(0, 1, 0, c + 1 + len(req1), s + 1) + req2, 1.2),
        frame(CLIENT, SERVER, trp(0, 1, 0, c + 1, s + 1) + req1, 1.3),
        frame(CLIENT, SERVER, trp(0, 1, 0, c + 1, s + 1) + req1, 1.4),  # sent again
        frame(SERVER, CLIENT, trp(0, 1, 0, s + 1, c + 1 + len(req1 + req2)) + resp, 1.5),
        frame(CLIENT, SERVER, trp(0, 1, 1, c + 1 + len(req1 + req2), s + 1 + len(resp)), 1.6),
    ]
    wrpcap(str(Path(__file__).with_name("trp.pcap")), packets)


if __name__ == "__main__":
    main()
