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

from pathlib import Path

import lossy
import pytest
from oracle import TRACES, reference_streams, tshark_available

from captures import first_difference, flow_key

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
