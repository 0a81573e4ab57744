"""The run summary's counts on real captures: per-layer instance counts that add up, and a
headline `flows` that counts what tshark calls conversations.

The stock tcp_ip stack is built once and run on every eligible capture of ../shared/traces
(`oracle.eligible_captures()`), `--nf count --summary json`. Checked:
* per layer with a selector: opened == accept + expired + evicted + live_at_end (live before the
  final flush) and flushed == live_at_end; the headline numbers are the sums of the layers';
* `flows` (instances that outlived the packet that opened them) == the number of rows of
  tshark's `-z conv,tcp` and `-z conv,udp`, on every capture where the two must agree. They
  need not where the stack, by design, sees a conversation as more or fewer instances, so a
  capture is compared only when tshark shows (none of these depends on our output, except the
  last): one stream per conversation (no reused 4-tuple), a SYN in every TCP stream (tcp.yaml
  opens an instance on a SYN), no RST (it ends an instance; a later packet opens another), no
  malformed frame, no IP fragment (a datagram waiting for its fragments is an instance of the
  ip layer that outlives a packet), and no instance of ours expired (an idle timeout splits a
  conversation on purpose);
* the `--bench` JSON carries the same per-layer counts; `--cap` evictions are counted;
* one-packet instances (rg_obs.quiet_transient, issue 13): the counter is not shown the
  unfragmented IPv4 datagrams and adds the stack's count of them, so its summary equals the one
  it gives chained before an NF that is shown every instance (`--nf events`), and ip's
  one_packet and opened equal what tshark counts: the outermost IPv4 headers that are not
  fragments, plus one per fragmented datagram.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle import (
    Stream,
    conversations,
    eligible_captures,
    reference_streams,
    tshark_available,
)
from support.oracle.tshark import _tshark

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
STACK = ROOT / "specs" / "stacks" / "tcp_ip.yaml"
REASONS = ("accept", "expired", "evicted", "flushed")


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    if not eligible_captures():
        pytest.skip("no captures in ../shared/traces")
    return build(STACK, tmp_path_factory.mktemp("counts"), quiet=True).binary


def _summary(binary: Path, capture: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [binary, capture, "--nf", "count", "--summary", "json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _check_layers(s: dict) -> None:
    """Per-layer counts add up, and the headline numbers are their sums."""
    layers = s["layers"]
    assert layers, s
    for name, lay in layers.items():
        closed = lay["closed"]
        before_flush = closed["accept"] + closed["expired"] + closed["evicted"]
        assert lay["opened"] == before_flush + lay["live_at_end"], (name, lay)
        assert closed["flushed"] == lay["live_at_end"], (name, lay)
        assert lay["evicted"] == closed["evicted"]
        assert lay["flows"] == lay["opened"] - lay["one_packet"] >= 0, (name, lay)
        assert lay["state_bytes"] > 0, (name, lay)
    assert s["flows_opened"] == sum(lay["opened"] for lay in layers.values())
    assert s["flows_closed"] == sum(sum(lay["closed"].values()) for lay in layers.values())
    assert s["live_at_end"] == sum(lay["live_at_end"] for lay in layers.values())
    assert s["flows"] == sum(lay["flows"] for lay in layers.values())


def _has_fragments(capture: Path) -> bool:
    out = _tshark(
        ["-r", str(capture), "-Y", "ip.flags.mf == 1 || ip.frag_offset > 0 || ipv6.fraghdr",
         "-T", "fields", "-e", "frame.number"]
    )  # fmt: skip
    return bool(out.strip())


def _must_agree(capture: Path, streams: tuple[Stream, ...], convs: tuple) -> str:
    """Why our flows and tshark's conversations may differ on capture ("" if they must not)."""
    if len(streams) != len(convs):
        return "a conversation with several streams (a reused 4-tuple)"
    for st in streams:
        if st.proto == "tcp" and "syn" not in st.flags:
            return f"TCP stream {st.index} has no SYN"
        if st.proto == "tcp" and "rst" in st.flags:
            return f"TCP stream {st.index} has a RST"
        if st.malformed_frames:
            return f"{st.proto} stream {st.index} has malformed frames"
    if _has_fragments(capture):
        return "IP fragments"
    return ""


CAPTURES = eligible_captures()


@pytest.mark.parametrize("capture", CAPTURES, ids=[c.name for c in CAPTURES])
def test_layer_counts_add_up_and_flows_are_conversations(binary: Path, capture: Path) -> None:
    s = _summary(binary, capture)
    _check_layers(s)
    streams, convs = reference_streams(capture), conversations(capture)
    why = _must_agree(capture, streams, convs)
    if not why and any(lay["closed"]["expired"] for lay in s["layers"].values()):
        why = "an instance expired"
    if why:
        pytest.skip(f"flows need not equal tshark's conversations: {why}")
    # tshark's TCP/UDP conversations; ICMP conversations are compared in test_e2e_icmp.py
    icmp = sum(lay["flows"] for name, lay in s["layers"].items() if name in ("icmp", "icmp6"))
    assert s["flows"] - icmp == len(convs), (s["flows"], convs, s["layers"])


def test_enough_captures_compare_flows_with_tshark(binary: Path) -> None:
    """The flow comparison above is not vacuous: most captures qualify."""
    compared = [
        c
        for c in CAPTURES
        if not _must_agree(c, reference_streams(c), conversations(c)) and conversations(c)
    ]
    assert len(compared) >= min(10, len(CAPTURES) // 2), [c.name for c in compared]


def test_bench_reports_the_same_layer_counts_and_evictions(binary: Path) -> None:
    capture = max(CAPTURES, key=lambda c: len(conversations(c)))
    s = _summary(binary, capture)
    proc = subprocess.run(
        [binary, capture, "--nf", "count", "--bench", "--passes", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    bench = json.loads(proc.stdout.splitlines()[-1])
    assert bench["layers"] == s["layers"]
    assert bench["flows"] == s["flows"]
    # a cap of 2 live instances per layer evicts on a capture with more conversations than that
    capped = _summary(binary, capture, "--cap", "2")
    _check_layers(capped)
    evicted = sum(lay["evicted"] for lay in capped["layers"].values())
    assert evicted > 0 and all(lay["live_at_end"] <= 2 for lay in capped["layers"].values())


# link layers tcp_ip reaches IPv4 through, as tshark names them in frame.protocols
LINKS = {"eth", "ethertype", "vlan", "sll", "null", "raw", "loop"}


def _ipv4_datagrams(capture: Path) -> tuple[int, int]:
    """tshark's count of the outermost IPv4 headers right after a link header tcp_ip reads:
    (not fragments, distinct fragmented datagrams by source, destination, id and protocol)."""
    fields = ["frame.protocols", "ip.flags.mf", "ip.frag_offset", "ip.src", "ip.dst", "ip.id"]
    out = _tshark(
        ["-r", str(capture), "-T", "fields", "-E", "occurrence=f",
         *[x for f in [*fields, "ip.proto"] for x in ("-e", f)]]
    )  # fmt: skip
    whole, frags = 0, set()
    for line in out.splitlines():
        protos, mf, off, *key = line.split("\t")
        tokens = protos.split(":")
        first = next((t for t in tokens if t not in LINKS), "")
        if first != "ip" or "_ws.malformed" in tokens:
            continue
        if mf in ("0", "False") and off == "0":
            whole += 1
        else:
            frags.add(tuple(key))
    return whole, len(frags)


@pytest.mark.parametrize("capture", CAPTURES, ids=[c.name for c in CAPTURES])
def test_one_packet_instances_counted_as_if_shown(binary: Path, capture: Path) -> None:
    s = _summary(binary, capture)
    shown = _summary(binary, capture, "--nf", "events", "--out", str(binary.parent / "ev"))
    assert s.pop("nf") == "count" and shown.pop("nf") == "events"
    # what each wrote differs by design (count: nothing; events: events.jsonl)
    assert s.pop("files_written") == [] and len(shown.pop("files_written")) == 1
    assert s == shown
    ip = s["layers"]["ip"]
    whole, fragmented = _ipv4_datagrams(capture)
    if any(lay["closed"]["expired"] or lay["evicted"] for lay in s["layers"].values()):
        pytest.skip("an instance expired or was evicted: a datagram may be counted twice")
    assert ip["one_packet"] == whole, (ip, whole)
    assert ip["opened"] == whole + fragmented, (ip, whole, fragmented)


def test_one_packet_comparison_sees_fragments_and_datagrams() -> None:
    """The comparison above is not vacuous: captures with IPv4 fragments and with whole
    datagrams are among those compared."""
    counts = [_ipv4_datagrams(c) for c in CAPTURES]
    assert sum(1 for w, f in counts if f) >= 2, counts
    assert sum(1 for w, f in counts if w) >= 10, counts
