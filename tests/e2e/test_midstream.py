"""Mid-stream pickup against tshark: connections whose handshake is not in the capture.

tcp.yaml follows a connection from the first segment that carries data (or a SYN) whatever
state it is in (the `midstream` transition; see the protocol's doc and docs/spec-language.md):
each direction starts at its first segment, and the direction of the first packet is "c2s".
tshark's `follow,tcp,raw` does the same. Compared here, byte for byte and per direction (the
tests of test_e2e_tshark.py compare only streams with a complete handshake):

- tcp-midstream-missing-syn.pcap (the client's SYN was never captured);
- real captures cut in the middle (the test drops their first N frames, so every connection
  open at the cut is picked up mid-stream, in both directions).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import lossy
from support.captures import REPO, Run, first_difference, flow_key, rubikgen_command
from support.oracle import TRACES, reference_streams, tshark_available

#: capture -> the first frame kept (1: the capture as it is)
CUTS = {
    "tcp-midstream-missing-syn.pcap": 1,
    "http-post-upload.pcap": 5,
    "vlan-http-syn-retransmit.pcap": 40,
    "ssh-duplicate-segments.pcap": 100,
    "null-ipv6-http-connect-tls.pcap": 10,
    "mixed-android-mobile.pcap": 200,
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    return tmp_path_factory.mktemp("midstream")


@pytest.mark.parametrize("capture", sorted(CUTS))
def test_midstream_flows_deliver_what_tshark_follows(capture: str, work: Path) -> None:
    src = TRACES / capture
    if not src.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    pcap = lossy.write_from(src, CUTS[capture], work / capture)
    r = lossy.run("tcp_ip", pcap, work / f"out-{capture[:-5]}")
    assert r.returncode == 0, r.describe()
    got: dict[tuple, bytes] = {}
    for key, rec in r.directions():
        got[key[1:]] = got.get(key[1:], b"") + r.data(rec)
    problems, midstream, compared = [], 0, 0
    for s in reference_streams(pcap):
        if s.proto != "tcp":
            continue
        midstream += not s.c2s.flow.handshake
        for d in s.directions:
            f = d.flow
            mine = got.get(flow_key("tcp", f.src, f.sport, f.dst, f.dport)[1:], b"")
            compared += len(d.data)
            if mine != d.data:
                problems.append(
                    f"[tcp {s.index}] {f.dir} {f.src}:{f.sport} handshake={f.handshake}:"
                    f" tshark {len(d.data)} bytes, stack {len(mine)}, first difference at"
                    f" {first_difference(mine, d.data)}"
                )
    assert midstream > 0, f"no mid-stream connection in {capture} cut at {CUTS[capture]}"
    assert compared > 0
    assert not problems, "\n".join(problems)


def test_midstream_off_follows_only_connections_seen_from_their_start(work: Path) -> None:
    """`options: {midstream: false}` on the TCP layers: on a capture cut in the middle, the
    connections open at the cut deliver nothing, the ones that start after it deliver what
    tshark follows."""
    src = TRACES / "mixed-android-mobile.pcap"
    if not src.is_file():
        pytest.skip(f"{src.name} is not in {TRACES}")
    spec = (REPO / "specs" / "stacks" / "tcp_ip.yaml").read_text()
    spec = spec.replace("stack: tcp_ip", "stack: tcp_strict").replace(
        "../protocols/", f"{REPO / 'specs' / 'protocols'}/"
    )
    for layer in ("tcp", "tcp6"):
        old = f"args: {{ip: {'ip' if layer == 'tcp' else 'ipv6'}}}}}"
        assert old in spec
        spec = spec.replace(old, old[:-1] + ", options: {midstream: false}}", 1)
    stack = work / "tcp_strict.yaml"
    stack.write_text(spec)
    argv = [*rubikgen_command(), "build", str(stack), "-o", str(work / "tcp_strict")]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pcap = lossy.write_from(src, CUTS["mixed-android-mobile.pcap"], work / "strict.pcap")
    out = work / "out-strict"
    proc = subprocess.run(
        [str(work / "tcp_strict" / "tcp_strict"), str(pcap), "--nf", "streams", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    r = Run(pcap, out, argv, 0, proc.stdout, proc.stderr, 0.0)
    got: dict[tuple, bytes] = {}
    for key, rec in r.directions():
        got[key[1:]] = got.get(key[1:], b"") + r.data(rec)
    kinds = {True: 0, False: 0}
    for s in reference_streams(pcap):
        if s.proto != "tcp" or not any(d.data for d in s.directions):
            continue
        started = "syn" in s.flags or "synack" in s.flags
        kinds[started] += 1
        for d in s.directions:
            f = d.flow
            mine = got.get(flow_key("tcp", f.src, f.sport, f.dst, f.dport)[1:], b"")
            assert mine == (d.data if started else b""), (s.index, f.dir, started, len(mine))
    assert kinds[True] and kinds[False], kinds
