"""The flow clock cannot be pushed around: packet timestamps that jump.

The tcp_ip stack is built once and run on captures written here with chosen timestamps (ns
pcap), through the `flowstats` NF (one record per instance: close reason, packets, first and
last time) and the `events` NF (one `clock_jump` line per jump):

* a packet dated a year ahead in the middle of normal traffic: connections alive across it are
  not expired by it, connections idle before or opened after it still expire (`expired`), one
  closed by FIN ends `accept`, and the jump is counted (once: the packets after it continue
  the clock from before it);
* the clock set back by a day for good: one backward jump, and idle connections from before and
  after it still expire;
* timestamps after 2038 (pcap: unsigned 32-bit seconds) and after 2106 (pcapng, 64-bit ticks
  with if_tsresol) read as tshark reads them (frame.time_epoch);
* a capture whose last third is dated 2038 (a sustained shift, after one outlier ten years
  ahead): the outlier is not followed, the shift is (one re-synchronisation, with the new
  base), and every flow record is dated by its own packets (tshark's frame.time_epoch of the
  flow's first and last frame).

What must happen is written from the documented rules (docs/reliability.md, the clock): the
guard (300 s by default) keeps a jumped packet at the current clock and later packets follow on
from there, or continue the clock from before the jump when they fit it; expiry runs on the
clock once per second of it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from support.captures import Capture, Tcp, eth
from support.hostile import run_json, sanitized_tcp_ip
from support.oracle.tshark import OracleError, _tshark, tshark_available

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
YEAR = 365 * 86400 * NS
DAY = 86400 * NS


class Timed(Capture):
    """A capture whose frames carry chosen timestamps (ns): `at(t)` dates the frames added
    after it, each 1 ms after the previous one."""

    def __init__(self) -> None:
        super().__init__()
        self.ts: list[int] = []
        self.t = T0

    def at(self, t: int) -> None:
        self.t = t

    def add(self, frame, *, cut=None, pad=True):  # type: ignore[no-untyped-def]
        super().add(frame, cut=cut, pad=pad)
        self.ts.append(self.t)
        self.t += NS // 1000

    def write(self, path: Path) -> Path:
        out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1)]  # ns pcap, Ethernet
        for (data, wire), ts in zip(self.frames, self.ts, strict=True):
            out.append(struct.pack("<IIII", ts // NS, ts % NS, len(data), wire))
            out.append(data)
        path.write_bytes(b"".join(out))
        return path


@pytest.fixture(scope="module")
def binary() -> Path:
    return sanitized_tcp_ip()


def run(binary: Path, pcap: Path, nf: str, *args: str) -> tuple[dict, Path]:
    summary, out, _ = run_json(binary, pcap, nf, *args)
    return summary, out


def flows(binary: Path, pcap: Path) -> dict[tuple[str, int], list[dict]]:
    """flowstats records by (layer, client port)."""
    _, out = run(binary, pcap, "flowstats")
    by: dict[tuple[str, int], list[dict]] = {}
    for line in (out / "flowstats.jsonl").read_text().splitlines():
        r = json.loads(line)
        by.setdefault((r["layer"], r["sport"]), []).append(r)
    return by


def jumps(binary: Path, pcap: Path, *, resyncs: bool = False) -> tuple[dict, list[dict]]:
    """The summary and the `clock_jump` events (re-synchronisations only with `resyncs`)."""
    summary, out = run(binary, pcap, "events")
    lines = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    return summary, [
        e for e in lines if e.get("event") == "clock_jump" and (resyncs or "resync" not in e)
    ]


def conn(cap: Timed, port: int) -> Tcp:
    return Tcp(cap, ("10.0.0.1", port), ("10.0.0.2", 80))


def keepalive(c: Tcp, n: int) -> None:
    c.send("c", bytes([n % 256]) * 10)
    c.send("s", flags="A")


def test_future_timestamp(binary: Path, tmp_path: Path) -> None:
    cap = Timed()
    a = conn(cap, 1001)  # idle from t=0: expires 300 s later
    a.handshake()
    a.send("c", b"a" * 100)
    cap.at(T0 + 1 * NS)
    c = conn(cap, 1003)  # alive across the jump, until the end: flushed
    c.handshake()
    cap.at(T0 + 10 * NS)
    # the hostile packet: a UDP datagram dated a year ahead
    cap.add(eth(IP(src="10.9.9.9", dst="10.9.9.8") / UDP(sport=5000, dport=53) / Raw(b"x" * 20)))
    jump_pkt = len(cap.frames)
    cap.ts[-1] = T0 + 10 * NS + YEAR
    cap.at(T0 + 20 * NS)
    b = conn(cap, 1002)  # closed by FIN after the jump: accept
    b.handshake()
    b.send("c", b"b" * 50)
    b.send("s", flags="A")
    b.close()
    cap.at(T0 + 30 * NS)
    d = conn(cap, 1004)  # opened after the jump, then idle: expires
    d.handshake()
    d.send("c", b"d" * 10)
    for k in range(1, 16):  # c keeps the clock going to t = 900 s
        cap.at(T0 + 60 * k * NS)
        keepalive(c, k)
    pcap = cap.write(tmp_path / "future.pcap")

    by = flows(binary, pcap)
    close = {k: [r["close"] for r in v] for k, v in by.items()}
    assert close[("tcp", 1001)] == ["expired"]
    assert close[("tcp", 1002)] == ["accept"]
    assert close[("tcp", 1003)] == ["flushed"]
    assert close[("tcp", 1004)] == ["expired"]
    assert close[("udp", 5000)] == ["expired"]
    # the connection alive across the jump saw all its packets (3 + 2 per keepalive)
    assert sum(by[("tcp", 1003)][0]["packets"]) == 3 + 2 * 15
    # the flow clock kept the packets' pace: d's last packet is 30 s after t0 on it
    assert abs(by[("tcp", 1004)][0]["last_ts"] - (T0 + 30 * NS)) < NS

    summary, events = jumps(binary, pcap)
    # one jump: the packets after it fit the clock from before it, which they continue
    assert [(e["pkt"], e["dir"]) for e in events] == [(jump_pkt, "forward")]
    assert events[0]["pkt_ts"] == T0 + 10 * NS + YEAR
    assert events[0]["ts"] < T0 + 10 * NS  # processed at the clock, not a year ahead
    assert summary["clock_jumps"] == {"forward": 1, "backward": 0}


def test_clock_set_back(binary: Path, tmp_path: Path) -> None:
    cap = Timed()
    e = conn(cap, 2001)  # idle before the jump: expires
    e.handshake()
    e.send("c", b"e" * 30)
    cap.at(T0 + 1 * NS)
    g = conn(cap, 2003)  # alive across it: flushed
    g.handshake()
    for k in range(1, 3):
        cap.at(T0 + 60 * k * NS)
        keepalive(g, k)
    back = T0 + 121 * NS - DAY  # from here on the capture's clock is a day behind
    cap.at(back)
    jump_pkt = len(cap.frames) + 1
    f = conn(cap, 2002)  # opened after the jump, then idle: expires
    f.handshake()
    f.send("c", b"f" * 30)
    for k in range(1, 14):
        cap.at(back + 60 * k * NS)
        keepalive(g, 100 + k)
    pcap = cap.write(tmp_path / "back.pcap")

    by = flows(binary, pcap)
    close = {k: [r["close"] for r in v] for k, v in by.items()}
    assert close[("tcp", 2001)] == ["expired"]
    assert close[("tcp", 2002)] == ["expired"]
    assert close[("tcp", 2003)] == ["flushed"]
    summary, events = jumps(binary, pcap)
    assert [(ev["pkt"], ev["dir"]) for ev in events] == [(jump_pkt, "backward")]
    assert summary["clock_jumps"] == {"forward": 0, "backward": 1}

    # --max-clock-jump 0 turns the guard off: the clock stays a day ahead, nothing expires
    _, out = run(binary, pcap, "flowstats", "--max-clock-jump", "0")
    recs = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    assert {r["sport"]: r["close"] for r in recs if r["layer"] == "tcp"}[2002] == "flushed"


def pcapng(packets: list[tuple[int, bytes]], tsresol: int) -> bytes:
    """A little-endian pcapng file: SHB, one Ethernet IDB with if_tsresol, EPBs of 64-bit
    ticks."""

    def block(btype: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    opt = struct.pack("<HHB", 9, 1, tsresol) + bytes(3) + struct.pack("<HH", 0, 0)
    out += block(1, struct.pack("<HHI", 1, 0, 262144) + opt)
    for ticks, data in packets:
        hdr = struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data))
        out += block(6, hdr + data)
    return out


def tshark_times(pcap: Path) -> list[int]:
    text = _tshark(["-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch"])
    times = []
    for line in text.split():
        sec, _, frac = line.partition(".")
        times.append(int(sec) * NS + int(frac.ljust(9, "0")[:9]))
    return times


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("fmt", ["pcap-2040", "pcapng-2150", "pcapng-2150-binary"])
def test_far_timestamps_read_as_tshark(binary: Path, tmp_path: Path, fmt: str) -> None:
    frame = bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.1.1.1", dst="10.1.1.2")
        / UDP(sport=7000, dport=7001)
        / Raw(b"t" * 30)
    )
    if fmt == "pcap-2040":  # past 2^31 seconds: negative as a signed 32-bit field
        t = 2_200_000_000 * NS + 123_456_789
        cap = Timed()
        cap.at(t)
        cap.add(frame)
        pcap = cap.write(tmp_path / "far.pcap")
    else:  # past 2^32 seconds (2106): only pcapng's 64-bit ticks hold it
        t = 5_700_000_000 * NS + 987_654_321
        if fmt == "pcapng-2150":
            data = pcapng([(t, frame)], 9)  # nanoseconds
        else:  # 2^-30 s ticks: the time rounds down to the tick
            ticks = (t // NS << 30) + ((t % NS) << 30) // NS
            data = pcapng([(ticks, frame)], 0x80 | 30)
        pcap = tmp_path / "far.pcapng"
        pcap.write_bytes(data)
    try:
        ref = tshark_times(pcap)
    except OracleError as exc:  # pragma: no cover - a tshark that cannot read it
        pytest.fail(str(exc))
    _, out = run(binary, pcap, "flowstats")
    recs = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    assert len(ref) == 1 and len(recs) == 1
    # tshark prints 9 decimals; binary ticks convert with truncation on both sides
    assert abs(recs[0]["first_ts"] - ref[0]) <= 1, (recs[0]["first_ts"], ref[0])
    assert ref[0] // NS == t // NS


def stream_times(pcap: Path) -> dict[int, tuple[int, int]]:
    """tshark: the client port of each TCP stream -> the times of its first and last frame."""
    text = _tshark(
        ["-r", str(pcap), "-Y", "tcp", "-T", "fields", "-e", "tcp.stream"]
        + ["-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "frame.time_epoch"]
    )
    by: dict[int, tuple[int, int]] = {}
    port: dict[str, int] = {}
    for line in text.splitlines():
        stream, sport, dport, epoch = line.split("\t")
        sec, _, frac = epoch.partition(".")
        t = int(sec) * NS + int(frac.ljust(9, "0")[:9])
        cport = port.setdefault(stream, int(sport) if int(dport) == 80 else int(dport))
        first, _ = by.get(cport, (t, t))
        by[cport] = (first, t)
    return by


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_sustained_shift_followed(binary: Path, tmp_path: Path) -> None:
    cap = Timed()
    n = 300  # connections per third
    for i in range(2 * n):  # two thirds in 2023; the outlier in the middle of them
        if i == n:
            cap.add(eth(IP(src="10.9.9.9", dst="10.9.9.8") / UDP(sport=5000, dport=53)))
            outlier = len(cap.frames)
            cap.ts[-1] = cap.ts[-2] + 10 * YEAR
        c = conn(cap, 10000 + i)
        c.handshake()
        keepalive(c, i)
    shift = 2_150_000_000 * NS  # 2038-02-17, for good
    cap.at(shift)
    first_2038 = len(cap.frames) + 1
    for i in range(2 * n, 3 * n):
        c = conn(cap, 10000 + i)
        c.handshake()
        keepalive(c, i)
    pcap = cap.write(tmp_path / "shift.pcap")

    summary, events = jumps(binary, pcap, resyncs=True)
    # the outlier: one jump, dismissed by the packet after it; the shift: one jump, then the
    # re-synchronisation once RG_CLOCK_RESYNC_PKTS (16) packets agreed with it
    assert [(e["pkt"], e["dir"], e.get("resync", False)) for e in events] == [
        (outlier, "forward", False),
        (first_2038, "forward", False),
        (first_2038 + 16, "forward", True),
    ]
    assert events[2]["pkt_ts"] == shift  # the new base
    assert summary["clock_jumps"] == {"forward": 2, "backward": 0}
    assert summary["clock_resyncs"] == 1

    by = flows(binary, pcap)
    ref = stream_times(pcap)
    recs = {port: v for (layer, port), v in by.items() if layer == "tcp"}
    assert sorted(recs) == sorted(ref) == list(range(10000, 10000 + 3 * n))
    for port, (first, last) in ref.items():
        (r,) = recs[port]
        assert (r["first_ts"], r["last_ts"]) == (first, last), port
    # the last third is dated 2038 by its own packets, the rest 2023; nothing expired on the
    # outlier's date or the shift's (the connections alive across them are flushed at the end)
    late = [p for p, (r,) in recs.items() if r["first_ts"] >= shift]
    assert late == list(range(10000 + 2 * n, 10000 + 3 * n))
    assert {r["close"] for (r,) in recs.values()} == {"flushed"}
    # three workers (the reading thread guards the clock, the workers add its offset to the
    # frames' own times): the same times, closes and jumps
    summary3, out3 = run(binary, pcap, "flowstats", "--workers", "3")
    recs3 = [json.loads(x) for x in (out3 / "flowstats.jsonl").read_text().splitlines()]
    times = {(r["layer"], r["sport"]): (r["first_ts"], r["last_ts"], r["close"]) for r in recs3}
    assert times == {
        k: (r["first_ts"], r["last_ts"], r["close"]) for k, (r,) in by.items() if len(by[k]) == 1
    }
    assert summary3["clock_jumps"] == summary["clock_jumps"]
    assert summary3["clock_resyncs"] == 1
