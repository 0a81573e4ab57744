"""What the flow-verdict handlers (tests/specs/verdict/flow_verdicts_handlers.c) must do to a
capture, from tshark's dissection of it (stream numbers, ports, TCP payload lengths). Nothing
here runs the stack.

The handlers' rules, per frame tshark dissects as TCP or UDP (not quoted inside ICMP):

- UDP from port 53 (a DNS answer): RG_DROP, that frame only;
- the first UDP datagram to port 123 (NTP) of a stream: RG_DROP_FLOW, so every frame of that
  stream from it on is dropped, the later ones at the UDP instance lookup;
- the first TCP frame with payload of a stream with port 80 on either side: RG_DROP_FLOW, so
  every frame of the stream from it on is dropped, the later ones at the TCP lookup;
- the same for port 443: RG_BYPASS_FLOW, so every frame passes and the later ones reach no
  handler (they are counted as bypassed at the TCP lookup).

The first frame with payload of a TCP stream is where the stack delivers its first data when
that frame is in order; `expect` therefore checks that no stream the rules touch has a
retransmission or out-of-order segment before it (tshark's analysis flags), so that the
capture is a fair test.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FIELDS = [
    "frame.number",
    "tcp.stream",
    "udp.stream",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.len",
    "udp.srcport",
    "udp.dstport",
    "icmp.type",
    "icmpv6.type",
    "tcp.analysis.retransmission",
    "tcp.analysis.out_of_order",
]


@dataclass
class Expect:
    """Frame indices are 0-based positions in the capture."""

    dropped: set[int] = field(default_factory=set)  # frames no output may hold
    tcp_dropped_at_lookup: int = 0  # frames of dropped TCP streams after their trigger
    udp_dropped_at_lookup: int = 0
    tcp_bypassed: int = 0  # frames of bypassed streams after their trigger
    # handler calls per flow verdict stream: exactly one (the trigger), keyed by the
    # stream's (protocol, client port, server port)
    one_call: set[tuple[str, int, int]] = field(default_factory=set)
    bypassed_streams: int = 0
    # frames with TCP payload after the trigger of a marked stream: data no handler may see
    later_payload_frames: int = 0
    dropped_tcp_streams: int = 0


def _rows(cap: Path) -> list[dict[str, str]]:
    cmd = ["tshark", "-n", "-r", str(cap), "-T", "fields", "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


def expect(cap: Path) -> Expect:
    e = Expect()
    tcp: dict[str, list[tuple[int, dict[str, str]]]] = {}
    udp: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for i, r in enumerate(_rows(cap)):
        if r["icmp.type"] or r["icmpv6.type"]:
            continue  # an ICMP error quoting a datagram: the stack sees ICMP
        if r["tcp.stream"]:
            tcp.setdefault(r["tcp.stream"], []).append((i, r))
        elif r["udp.stream"]:
            udp.setdefault(r["udp.stream"], []).append((i, r))
            if r["udp.srcport"] == "53":
                e.dropped.add(i)
    for frames in udp.values():
        trig = next((k for k, (_, r) in enumerate(frames) if r["udp.dstport"] == "123"), None)
        if trig is None:
            continue
        e.dropped.update(i for i, _ in frames[trig:])
        e.udp_dropped_at_lookup += len(frames) - trig - 1
        r = frames[trig][1]
        e.one_call.add(("udp", int(r["udp.srcport"]), int(r["udp.dstport"])))
    for frames in tcp.values():
        ports = {frames[0][1]["tcp.srcport"], frames[0][1]["tcp.dstport"]}
        rule = "drop" if "80" in ports else "bypass" if "443" in ports else None
        trig = next((k for k, (_, r) in enumerate(frames) if int(r["tcp.len"] or 0) > 0), None)
        if rule is None or trig is None:
            continue
        for _, r in frames[: trig + 1]:
            assert not r["tcp.analysis.retransmission"] and not r["tcp.analysis.out_of_order"], (
                f"{cap.name}: stream {r['tcp.stream']} is not in order up to its first data"
            )
        r = frames[trig][1]
        sp, dp = int(r["tcp.srcport"]), int(r["tcp.dstport"])
        e.one_call.add(("tcp", sp, dp) if dp in (80, 443) else ("tcp", dp, sp))
        later = len(frames) - trig - 1
        e.later_payload_frames += sum(int(r["tcp.len"] or 0) > 0 for _, r in frames[trig + 1 :])
        if rule == "drop":
            e.dropped.update(i for i, _ in frames[trig:])
            e.tcp_dropped_at_lookup += later
            e.dropped_tcp_streams += 1
        else:
            e.tcp_bypassed += later
            e.bypassed_streams += 1
    return e
