"""Floods (bench/flood.py) through the sanitized tcp_ip stack: no crash, and every packet and
instance accounted for in the summary.

Each kind runs small (a few thousand packets; `python bench/flood.py --count 1000000` is the
full size) with a normal TCP connection interleaved (one packet every MIX flood packets), and
with layer caps low enough that the SYN and fragment floods fill their tables and eviction
runs. Checked against what the generator wrote (not against the stack): the packet count, that
every instance opened was closed (after the final flush) with the reasons adding up per layer,
that the normal connections all complete (`accept`) while the flood is what gets evicted, and
for the future-timestamp capture that the clock guard counts its jumps and expires nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.floods import (
    CONN_FRAMES,
    accounted,
    flood,
)
from support.hostile import run_json, sanitized_tcp_ip

MIX = 10


@pytest.mark.parametrize(
    ("kind", "count", "caps"),
    [
        ("syn", 4000, ["--cap", "tcp=1000"]),
        ("frag", 4000, ["--cap", "ip=1000"]),
        ("frag-overlap", 1600, []),
    ],
)
def test_flood(tmp_path: Path, kind: str, count: int, caps: list[str]) -> None:
    pcap = tmp_path / f"{kind}.pcap"
    frames = flood.write_pcap(pcap, flood.frames(kind, count, seed=3, mix=MIX))
    normal = (frames - count) // CONN_FRAMES  # complete normal connections
    summary, _, _ = run_json(sanitized_tcp_ip(), pcap, "count", *caps)
    assert summary["packets"] == frames
    assert summary["skipped"] == 0
    accounted(summary)
    tcp = summary["layers"]["tcp"]
    ip = summary["layers"]["ip"]
    if kind == "syn":  # one half-open connection per SYN: 1000 live at most, the rest evicted
        assert tcp["opened"] == count + -(-(frames - count) // CONN_FRAMES)
        assert tcp["closed"]["evicted"] >= count - 1000
        assert tcp["closed"]["accept"] == normal  # the flood is what gets evicted
    elif kind == "frag":  # one pending datagram per fragment
        assert tcp["closed"]["accept"] == normal
        assert ip["closed"]["evicted"] >= count - 1000
        assert ip["opened"] - ip["one_packet"] == count
    else:  # every overlapped datagram completes (the last fragment closes it)
        per = len(flood.OVERLAPS) + 1
        assert summary["layers"]["udp"]["opened"] >= 1
        assert ip["closed"]["accept"] >= count // per
        assert tcp["closed"]["accept"] == normal


def test_future_timestamp_flood(tmp_path: Path) -> None:
    count = 2000
    pcap = tmp_path / "future.pcap"
    frames = flood.write_pcap(pcap, flood.frames("future-ts", count, seed=3))
    summary, _, _ = run_json(sanitized_tcp_ip(), pcap, "count")
    assert summary["packets"] == frames == count
    accounted(summary)
    # the year-ahead packet (the next ones continue the clock from before it); the day back
    assert summary["clock_jumps"] == {"forward": 1, "backward": 1}
    tcp = summary["layers"]["tcp"]
    assert tcp["closed"]["expired"] == 0  # nothing alive across the jump was expired
    assert tcp["closed"]["accept"] == count // CONN_FRAMES


@pytest.mark.parametrize("policy", ["evict-oldest", "drop-flow", "bypass", "ignore"])
@pytest.mark.parametrize("kind", ["syn", "frag", "far-ahead"])
def test_memcap_policies_sanitized(tmp_path: Path, kind: str, policy: str) -> None:
    """Every memcap policy under a flood that passes the caps (evict-oldest evicting mid-packet,
    drop-flow and bypass freeing the buffers of live instances), through ASan/UBSan: no report,
    every packet and instance accounted for, every hit counted."""
    pcap = tmp_path / f"{kind}.pcap"
    count = 2000
    frames = flood.write_pcap(pcap, flood.frames(kind, count, seed=4, mix=MIX))
    # the flow cap: the key indexes of the 10 flow tables (98304 bytes, with the linger tables
    # and ICMP layers) and 62 KiB for records: the floods still pass it (the hits asserted)
    caps = ["--memcap-reassembly", "32K", "--memcap-flows", "160K", "--memcap-policy", policy]
    summary, _, _ = run_json(sanitized_tcp_ip(), pcap, "streams", *caps)
    assert summary["packets"] == frames
    assert summary["skipped"] == 0
    accounted(summary)
    assert summary["memcap"]["policy"] == policy
    assert sum(layer["memory"]["cap_hits"] for layer in summary["layers"].values()) > 0
