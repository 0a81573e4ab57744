"""Are the hand-made edge-case captures (tests/support/captures.py) and their expectations right?

Checked against tshark before any stack runs: wherever an expectation says tshark agrees, tshark's
follow output for that flow direction is exactly the bytes the case built; where it says tshark
does not, tshark really delivers something else (so the documented difference is real). Also:
the generators are deterministic, and tshark sees exactly the expected flows (for the garbage and
truncation cases, no other flow shares an expected flow's endpoints).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from support.captures import CASES, SNAPLEN, Expectation, build, first_difference, flow_key
from support.oracle import Direction, prefetch, reference_streams, tshark_available

needs_tshark = pytest.mark.skipif(
    not tshark_available(), reason="tshark is not installed (bash ci/setup.sh installs it)"
)

Key = tuple[str, str, int, str, int]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Expectation]]:
    root = tmp_path_factory.mktemp("captures")
    out = {name: build(name, root / name) for name in CASES}
    if tshark_available():
        prefetch(path for path, _ in out.values())
    return out


def _tshark_directions(pcap: Path) -> dict[Key, list[Direction]]:
    out: dict[Key, list[Direction]] = {}
    for stream in reference_streams(pcap):
        for d in stream.directions:
            f = d.flow
            out.setdefault(flow_key(f.proto, f.src, f.sport, f.dst, f.dport), []).append(d)
    return out


def _records(pcap: Path) -> int:
    """Records in a classic pcap file."""
    data, pos, n = pcap.read_bytes(), 24, 0
    while pos < len(data):
        pos += 16 + int.from_bytes(data[pos + 8 : pos + 12], "little")
        n += 1
    return n


@pytest.mark.parametrize("name", sorted(CASES))
def test_generators_are_deterministic(
    name: str, built: dict[str, tuple[Path, Expectation]], tmp_path: Path
) -> None:
    path, exp = built[name]
    again, exp2 = build(name, tmp_path)
    assert again.read_bytes() == path.read_bytes()
    assert exp2 == exp
    assert exp.flows and len({f.key for f in exp.flows}) == len(exp.flows)


@pytest.mark.parametrize("name", sorted(CASES))
def test_expectations_are_well_formed(
    name: str, built: dict[str, tuple[Path, Expectation]]
) -> None:
    path, exp = built[name]
    assert exp.name == name and exp.doc
    data = path.read_bytes()
    assert int.from_bytes(data[16:20], "little") == SNAPLEN
    for f in exp.flows:
        assert f.dir in ("c2s", "s2c")
        assert f.layer in ("tcp", "udp", "tcp6", "udp6")
        assert (f.complete is None) == (f.proto == "udp"), f
        assert f.close in (None, "accept", "evicted", "expired", "flushed")
        assert (f.proto == "udp") <= (f.close != "accept"), "UDP has no PSM to accept"
    # the two directions of a flow come in pairs, c2s first
    for c2s, s2c in zip(exp.flows[::2], exp.flows[1::2], strict=True):
        assert (c2s.dir, s2c.dir) == ("c2s", "s2c")
        assert (c2s.src, c2s.sport, c2s.dst, c2s.dport) == (s2c.dst, s2c.dport, s2c.src, s2c.sport)
    if exp.cap is not None:
        assert exp.args[-2:] == ("--cap", str(exp.cap))


@needs_tshark
@pytest.mark.parametrize("name", sorted(CASES))
def test_tshark_delivers_the_expected_bytes(
    name: str, built: dict[str, tuple[Path, Expectation]]
) -> None:
    path, exp = built[name]
    ref = _tshark_directions(path)
    problems = []
    for f in exp.flows:
        got = ref.get(f.key, [])
        if len(got) != 1:
            problems.append(f"{f.key} {f.dir}: tshark has {len(got)} streams with this direction")
            continue
        (d,) = got
        assert hashlib.sha256(d.data).hexdigest() == d.flow.sha256
        if f.tshark:
            if d.data != f.data:
                at = first_difference(d.data, f.data)
                problems.append(
                    f"{f.key} {f.dir}: tshark {len(d.data)} bytes, expected {len(f.data)},"
                    f" first difference at {at}"
                )
            if d.gaps:
                problems.append(f"{f.key} {f.dir}: tshark reports gaps {d.gaps}")
        elif d.data == f.data:
            problems.append(f"{f.key} {f.dir}: marked as a tshark difference, but tshark agrees")
        if d.flow.dir != f.dir:
            problems.append(f"{f.key}: tshark says {d.flow.dir}, expected {f.dir}")
        if f.complete is not None and d.flow.complete != f.complete:
            problems.append(f"{f.key}: tshark complete={d.flow.complete}, expected {f.complete}")
    expected = set(exp.by_key())
    if exp.exact:
        extra = sorted(set(ref) - expected)
        if extra:
            problems.append(f"tshark has flow directions the case does not expect: {extra}")
    else:
        ends = {frozenset([(k[1], k[2]), (k[3], k[4])]) for k in expected}
        for k in set(ref) - expected:
            if frozenset([(k[1], k[2]), (k[3], k[4])]) in ends:
                problems.append(f"an unexpected flow shares an expected flow's endpoints: {k}")
    assert not problems, f"{name} ({path.name}):\n" + "\n".join(problems)


@needs_tshark
def test_the_cases_exercise_what_they_claim(built: dict[str, tuple[Path, Expectation]]) -> None:
    """A few properties of the captures, read back through tshark."""
    streams = {name: reference_streams(path) for name, (path, _) in built.items()}
    # the fragment cases are fragmented: fewer TCP/UDP packets than frames (tshark reassembled
    # the datagrams), and the frames are those of the cases' pieces
    for name, frames in {
        "ipv4_frag_udp": 6 * (3 + 1),
        "ipv4_frag_tcp": 6 * (3 + 3 + 2 + 3),
        "ipv6_frag": (3 + 1) + (3 + 3 + 4 + 3),
    }.items():
        path, _ = built[name]
        assert _records(path) == frames, name
        assert sum(s.c2s.packets + s.s2c.packets for s in streams[name]) < frames, name
    # the truncated case has truncated frames in the valid IPv4 TCP flow, tshark-visible
    tcp = next(s for s in streams["truncated"] if s.c2s.flow.sport == 55000)
    assert tcp.c2s.truncated_frames >= 1
    # the cut segment of the unchecked side flow: tshark appends its 40 captured bytes
    side = next(s for s in streams["truncated"] if s.c2s.flow.sport == 55100)
    assert side.c2s.flow.bytes == 40 + 100 and side.c2s.truncated_frames == 1
    # the many-flows case: 300 streams, all with a complete handshake
    many = streams["many_flows"]
    assert len(many) == 300 and all(s.c2s.flow.handshake for s in many)
    # the midstream flows have no handshake, the wrap flow has one
    assert not any(s.c2s.flow.handshake for s in streams["tcp_midstream"])
    assert all(s.c2s.flow.handshake for s in streams["tcp_seq_wrap"])
    # tshark marks the overlapping TCP case's retransmissions: more wire bytes than data
    for s in streams["tcp_overlap"]:
        assert s.c2s.wire_bytes > s.c2s.flow.bytes
    # the garbage case makes tshark flag malformed frames
    assert sum(s.malformed_frames for s in streams["garbage"]) > 0
