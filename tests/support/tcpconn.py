"""A crafted TCP connection (scapy packets with timestamps) for the lifecycle tests: linger,
late packets, close reasons (tests/e2e/test_linger.py, tests/runtime/test_late_packets.py)."""

from __future__ import annotations

from typing import Any

from scapy.all import IP, TCP, Ether, Raw

C, S = "10.0.0.1", "10.0.0.2"
CP, SP = 40000, 80


class Conn:
    """Packets of one TCP connection between C:cport and S:SP, with their timestamps."""

    def __init__(self, cport: int = CP, cisn: int = 1000, sisn: int = 5000) -> None:
        self.cport = cport
        self.c = cisn  # next sequence number of each side
        self.s = sisn
        self.pkts: list[Any] = []
        self.t = 1_700_000_000.0

    def _add(self, frm_client: bool, flags: str, data: bytes = b"", dt: float = 0.01) -> None:
        self.t += dt
        if frm_client:
            p = IP(src=C, dst=S) / TCP(sport=self.cport, dport=SP, flags=flags, seq=self.c,
                                       ack=self.s if "A" in flags else 0)  # fmt: skip
        else:
            p = IP(src=S, dst=C) / TCP(sport=SP, dport=self.cport, flags=flags, seq=self.s,
                                       ack=self.c if "A" in flags else 0)  # fmt: skip
        if data:
            p = p / Raw(data)
        e = Ether() / p
        e.time = self.t
        self.pkts.append(e)

    def c2s(self, flags: str, data: bytes = b"", dt: float = 0.01, adv: bool = True) -> None:
        self._add(True, flags, data, dt)
        if adv:
            self.c += len(data) + ("S" in flags) + ("F" in flags)

    def s2c(self, flags: str, data: bytes = b"", dt: float = 0.01, adv: bool = True) -> None:
        self._add(False, flags, data, dt)
        if adv:
            self.s += len(data) + ("S" in flags) + ("F" in flags)

    def handshake(self) -> None:
        self.c2s("S")
        self.s2c("SA")
        self.c2s("A")

    def fin_close(self) -> None:
        self.c2s("FA")
        self.s2c("FA")
        self.c2s("A")  # acknowledges the server's FIN: the connection is closed here
