"""Shared by tests; moved from e2e/test_e2e_tunnels.py."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.captures import Run
from support.streams import our_flows


@dataclass
class UdpRef:
    """tshark's UDP stream `index`: payload bytes per sender (address, port)."""

    index: int
    data: dict[tuple[str, int], bytearray]


def udp_reference(pcap: Path) -> dict[int, UdpRef]:
    """Per-header UDP payloads from tshark's dissection (see the module docstring)."""
    args = ["tshark", "-r", str(pcap), "-n", "-o", "ip.defragment:TRUE"]
    args += ["-o", "ipv6.defragment:TRUE", "-T", "fields", "-E", "separator=/t"]
    args += ["-E", "occurrence=a", "-E", "aggregator=,"]
    for f in _FIELDS:
        args += ["-e", f]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    out: dict[int, UdpRef] = {}
    for line in text.splitlines():
        row = dict(zip(_FIELDS, line.split("\t"), strict=True))
        col = {k: (v.split(",") if v else []) for k, v in row.items()}
        seen = {"ip": 0, "ipv6": 0, "udp": 0}
        net: tuple[str, int] | None = None
        for tok in row["frame.protocols"].split(":"):
            if tok in ("icmp", "icmpv6"):
                break  # what follows is a packet quoted in an error message
            if tok in ("ip", "ipv6"):
                net = (tok, seen[tok])
                seen[tok] += 1
            if tok != "udp":
                continue
            k = seen["udp"]
            seen["udp"] += 1
            if net is None or k >= len(col["udp.stream"]):
                continue
            src = col[net[0] + ".src"][net[1]]
            payload = col["udp.payload"][k] if k < len(col["udp.payload"]) else ""
            if int(col["udp.length"][k]) <= 8:
                payload = ""  # no udp.payload occurrence for an empty datagram
            ref = out.setdefault(int(col["udp.stream"][k]), UdpRef(int(col["udp.stream"][k]), {}))
            sender = (src, int(col["udp.srcport"][k]))
            ref.data.setdefault(sender, bytearray()).extend(bytes.fromhex(payload.replace(":", "")))
    return out


def only(run: Run, proto: str) -> Run:
    r = OnlyProto(**vars(run))
    r.proto = proto
    return r


def compare_udp(name: str, run: Run, refs: dict[int, UdpRef]) -> tuple[list[str], int, int]:
    problems: list[str] = []
    ours = our_flows(only(run, "udp"))
    n_dirs = n_bytes = 0
    for ref in refs.values():
        senders = list(ref.data)
        peer = {}
        # the endpoints: both senders, or the one sender and its peer from the stack's flows
        ends = None
        for e in ours:
            if all(s in e[1] for s in senders):
                ends = e
                break
        if ends is None:
            problems.append(f"{name} [udp {ref.index}]: senders {senders}: no flow of the stack")
            continue
        for s in ends[1]:
            peer[s] = ref.data.get(s, bytearray())
        flows = ours.pop(ends)
        for sender, want in peer.items():
            got = b"".join(run.data(fl.by_sender[sender]) for fl in flows if sender in fl.by_sender)
            n_dirs += 1
            n_bytes += len(want)
            if got != bytes(want):
                problems.append(
                    f"{name} [udp {ref.index}] from {sender}: tshark {len(want)} bytes,"
                    f" stack {len(got)}"
                )
    for ends, flows in ours.items():
        sent = sum(r["bytes"] for fl in flows for r in fl.by_sender.values())
        if sent:
            problems.append(f"{name} {sorted(ends[1])}: {sent} UDP bytes; not in tshark")
    return problems, n_dirs, n_bytes


_FIELDS = ("frame.protocols", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "udp.stream",
           "udp.srcport", "udp.dstport", "udp.length", "udp.payload")  # fmt: skip


class OnlyProto(Run):
    """A run whose records are those of one protocol."""

    proto = ""

    def records(self) -> list[dict[str, Any]]:
        return [r for r in super().records() if r.get("proto") == self.proto]


def _inner_udp_refs(pcap: Path) -> dict[int, UdpRef]:
    """tshark's per-header UDP payloads (udp_reference: the innermost
    `udp.payload` of each frame, not `follow`, which doubles UDP inside UDP), without the GTP-U
    transport's own datagrams (port 2152), which the gtp stack does not deliver."""
    return {
        i: r for i, r in udp_reference(pcap).items() if not any(port == 2152 for _, port in r.data)
    }
