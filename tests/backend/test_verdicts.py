"""Flow verdicts in the generated code: RG_DROP_FLOW and RG_BYPASS_FLOW mark their instance, and
every later packet of it (both directions) stops at the instance lookup.

The tcp_ip stack runs with tests/specs/verdict/flow_verdicts_handlers.c (NTP and HTTP flows
dropped, TLS flows bypassed, DNS answers dropped one by one) on a real capture with --write.
The reference is tshark's dissection of the input (tests/support/oracle/verdicts.py): which frames
belong to which stream and which carries a stream's first payload. Checked: the written file
holds exactly the input's frames but the dropped ones, byte for byte and in order (read by an
independent pcap reader); the handlers are called exactly once per marked flow (never for the
later packets, which tshark shows carry more data); the per-layer counters `dropped_by_verdict`
and `bypassed` count exactly the later packets of the marked flows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.oracle.tshark import REPO, TRACES
from support.oracle.verdicts import expect
from support.sources import read_pcap

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
HANDLERS = REPO / "tests" / "specs" / "verdict" / "flow_verdicts_handlers.c"
# real captures with HTTP or TLS connections (DNS, NTP) outside tunnels: Ethernet, raw IP, BSD
# NULL and Linux cooked links, IPv4 and IPv6 (behind extension headers), mid-stream flows
CAPTURES = [
    "mixed-android-mobile.pcap",
    "raw-ipv4-ipv6-http.pcap",
    "null-ipv6-http-connect-tls.pcap",
    "ipv6-http-atomic-frag.pcap",
    "ipv6-http-gquic.pcap",
    "sll-dns2tcp-tls.pcap",
]


def trace(name: str) -> Path:
    p = TRACES / name
    if not p.exists():
        pytest.skip(f"{p} not found (../shared/traces beside the checkout)")
    return p


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verdicts")
    argv = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out)]
    subprocess.run([*argv, "--handlers", str(HANDLERS)], cwd=REPO, check=True)
    return out / "tcp_ip"


def calls(stderr: str) -> Counter[tuple[str, int, int]]:
    """Handler calls per flow, keyed (tcp|udp, client port, server port) as the oracle does."""
    n: Counter[tuple[str, int, int]] = Counter()
    for h, sp, dp in re.findall(r"^call (\w+?)6?_data (\d+) (\d+) \d+$", stderr, re.M):
        a, b = int(sp), int(dp)
        server = b if b in (53, 80, 123, 443) or a not in (53, 80, 123, 443) else a
        n[(h, a if server == b else b, server)] += 1
    return n


def layer_stats(stderr: str, layer: str) -> dict[str, int]:
    """The `--stats` counters of one layer (lines "  LAYER  KEY  VALUE")."""
    return {k: int(v) for k, v in re.findall(rf"^ +{layer} +(\S+) +(\d+)$", stderr, re.M)}


@pytest.mark.parametrize("name", CAPTURES)
def test_flow_verdicts_on_a_capture(binary: Path, tmp_path: Path, name: str) -> None:
    cap = trace(name)
    want = expect(cap)
    assert want.dropped_tcp_streams or want.bypassed_streams, "no flow for the rules"
    out = tmp_path / "out.pcap"
    r = subprocess.run(
        [str(binary), str(cap), "--write", str(out), "--stats", "--summary", "json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    sent = read_pcap(cap)
    got = read_pcap(out)
    assert got == [f for i, f in enumerate(sent) if i not in want.dropped]
    summary = json.loads(r.stdout)
    assert summary["written"] == len(sent) - len(want.dropped)
    if name == "mixed-android-mobile.pcap":  # every kind of rule has flows here
        assert want.dropped_tcp_streams and want.bypassed_streams
        assert want.udp_dropped_at_lookup and want.tcp_bypassed and want.tcp_dropped_at_lookup
        assert want.later_payload_frames > 100  # data the one call per flow below never saw
        # flows no verdict marks get their calls (DNS over UDP: one per datagram)
        dns = sum(v for (p, _, srv), v in calls(r.stderr).items() if p == "udp" and srv == 53)
        assert dns > len(want.one_call)

    # one handler call per marked flow: the later packets (data included) reach no handler
    n = calls(r.stderr)
    for key in want.one_call:
        assert n[key] == 1, (key, n[key])

    def count(key: str, *layers: str) -> int:
        return sum(layer_stats(r.stderr, x).get(key, 0) for x in layers)

    assert count("dropped_by_verdict", "tcp", "tcp6") == want.tcp_dropped_at_lookup
    assert count("bypassed", "tcp", "tcp6") == want.tcp_bypassed
    assert count("dropped_by_verdict", "udp", "udp6") == want.udp_dropped_at_lookup
    assert count("bypassed", "udp", "udp6") == 0
    layers = summary["layers"]
    for key, total in (
        ("dropped_by_verdict", want.tcp_dropped_at_lookup),
        ("bypassed", want.tcp_bypassed),
    ):
        assert layers["tcp"][key] + layers["tcp6"][key] == total


def test_without_verdicts_everything_passes(binary: Path, tmp_path: Path) -> None:
    # the same stack on a capture without HTTP, TLS, DNS or NTP: nothing marked, all written
    cap = trace("ssh-duplicate-segments.pcap")
    out = tmp_path / "out.pcap"
    r = subprocess.run(
        [str(binary), str(cap), "--write", str(out), "--stats"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert read_pcap(out) == read_pcap(cap)
    assert "dropped_by_verdict" not in r.stderr and "bypassed" not in r.stderr


def test_observer_verdicts(tmp_path: Path) -> None:
    """The same rules given by an observer (rg_call.verdict) instead of handlers: a Python
    callback of the bindings (Stack.on_event) returns the verdicts; the frames whose verdict
    passes are exactly those tshark's dissection says pass."""
    from rubikgen.bindings import Event, Stack, Verdict

    cap = trace("mixed-android-mobile.pcap")
    want = expect(cap)
    stack = Stack.build(STACK, REPO / "build" / "tcp_ip", no_timeouts=True)
    seen: Counter[tuple[str, int, int]] = Counter()

    def rules(ev: Event) -> Verdict | None:
        if ev.kind != "call" or ev.end or "sport" not in ev.args:
            return None  # (ICMP handler calls carry no ports: the rules are on TCP/UDP)
        sp, dp = ev.args["sport"], ev.args["dport"]
        proto = ev.name[:3]
        server = dp if dp in (53, 80, 123, 443) or sp not in (53, 80, 123, 443) else sp
        seen[(proto, sp if server == dp else dp, server)] += 1
        if proto == "udp":
            return Verdict.DROP_FLOW if dp == 123 else Verdict.DROP if sp == 53 else None
        if 80 in (sp, dp):
            return Verdict.DROP_FLOW
        return Verdict.BYPASS_FLOW if 443 in (sp, dp) else None

    stack.on_event(rules)
    passed = []
    for _, frame in read_pcap(cap):
        assert stack.feed(frame) == []
        if stack.verdict < Verdict.DROP:
            passed.append(frame)
    assert passed == [b for i, (_, b) in enumerate(read_pcap(cap)) if i not in want.dropped]
    for key in want.one_call:
        assert seen[key] == 1, (key, seen[key])
