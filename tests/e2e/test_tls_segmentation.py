"""Framing is independent of how the stream was cut: the same crafted TLS conversation
(support/tls_streams.py: a ClientHello in one or several records, a ServerHello, encrypted
records, a handshake-typed record after ChangeCipherSpec) split into TCP segments at every
boundary, at random boundaries and in random orders, gives the same sni NF lines (SNI, ALPN,
JA3; ServerHello version, cipher, ALPN), equal to tshark's reading of the unsplit stream. A
segment lost inside the ClientHello gives no line for that connection (nothing parsed after
the gap), and a lost segment on a real capture gives only lines tshark also sees."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO_ROOT
from support.lossy import segments, write_without
from support.nf_run import nf_lines
from support.oracle.tshark import tshark_available
from support.quic_captures import TRACES
from support.tls_oracle import tshark_client_hellos, tshark_server_hellos
from support.tls_streams import connection, conversation, write

from rubikgen.toolchain.build import build

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")

CLIENT, SERVER, HOLD = conversation(random.Random(2929), "seg.example.net", hello_cuts=(300,))


@pytest.fixture(scope="module")
def binary() -> Path:
    d = REPO_ROOT / "build" / "tcp_tls"  # shared with test_tls_hello.py
    return build(REPO_ROOT / "specs" / "stacks" / "tcp_tls.yaml", d, quiet=True).binary


def lines(binary: Path, pcap: Path, out: Path) -> dict[int, Counter[str]]:
    """Per client port, the NF's lines without the packet number and the ports."""
    got: dict[int, Counter[str]] = {}
    for line in nf_lines(binary, pcap, out, "sni", "sni.jsonl"):
        h = json.loads(line)
        port = h["sport"] if h["dport"] == 443 else h["dport"]
        for k in ("pkt", "sport", "dport"):
            del h[k]
        got.setdefault(port, Counter())[json.dumps(h, sort_keys=True)] += 1
    return got


@pytest.fixture(scope="module")
def reference(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Counter[str]:
    """The unsplit conversation's lines, checked against tshark's dissection of it."""
    d = tmp_path_factory.mktemp("ref")
    pcap = write(d / "one.pcap", connection(19999, CLIENT, SERVER, hold=HOLD))
    got = lines(binary, pcap, d)
    ch = [json.loads(x) for x in got[19999] if "sni" in json.loads(x)]
    sh = [json.loads(x) for x in got[19999] if json.loads(x).get("server")]
    (want_ch,) = tshark_client_hellos(pcap)
    (want_sh,) = tshark_server_hellos(pcap)
    assert len(ch) == 1 and (ch[0]["sni"], ch[0]["ja3_full"], ch[0]["ja3"]) == want_ch[4:]
    assert len(sh) == 1
    s = sh[0]
    alpn = ",".join(s["alpn"])
    assert (s["version"], s["cipher"], s["selected_version"], alpn) == want_sh[4:]
    return got[19999]


def test_every_boundary(binary: Path, reference: Counter[str], tmp_path: Path) -> None:
    """One connection per split point: the client stream in two segments at p, the server
    stream at p too (modulo its length)."""
    frames: list[bytes] = []
    ports = {}
    for p in range(1, len(CLIENT)):
        port = 20000 + p
        ports[port] = p
        frames += connection(port, CLIENT, SERVER, [p], [p % len(SERVER)], hold=HOLD)
    got = lines(binary, write(tmp_path / "splits.pcap", frames), tmp_path)
    bad = {ports[k]: v for k, v in got.items() if v != reference}
    assert not bad and len(got) == len(ports), (sorted(bad)[:10], len(got))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_segmentations(
    binary: Path, reference: Counter[str], tmp_path: Path, data: st.DataObject
) -> None:
    """Several connections per example, each cut into random segments sent in a random order
    (TCP reorders them), and a ClientHello cut into other records: the same lines."""
    frames: list[bytes] = []
    for i in range(8):
        cuts = data.draw(st.lists(st.integers(1, len(CLIENT) - 1), max_size=12), label="cuts")
        scuts = data.draw(st.lists(st.integers(1, len(SERVER) - 1), max_size=6), label="scuts")
        n = len(set(cuts) | {HOLD}) + 1
        order = data.draw(st.permutations(range(n)), label="order")
        frames += connection(30000 + i, CLIENT, SERVER, cuts, scuts, order, hold=HOLD)
    got = lines(binary, write(tmp_path / "rand.pcap", frames), tmp_path)
    assert got == {30000 + i: reference for i in range(8)}


def test_hello_over_records_any_cut(binary: Path, tmp_path: Path) -> None:
    """The ClientHello's handshake message cut into 1..5 records at random offsets (the stream
    changes, so each connection is its own reference: tshark's reading of it)."""
    rng = random.Random(7)
    frames: list[bytes] = []
    for i in range(40):
        cuts = [rng.randrange(1, 500) for _ in range(rng.randrange(0, 5))]
        c, s, hold = conversation(random.Random(2929), "seg.example.net", hello_cuts=cuts)
        segcuts = [rng.randrange(1, hold) for _ in range(rng.randrange(0, 6))]
        frames += connection(40000 + i, c, s, segcuts, hold=hold)
    pcap = write(tmp_path / "recs.pcap", frames)
    want = tshark_client_hellos(pcap)
    got = lines(binary, pcap, tmp_path)
    mine = Counter()
    for port, ls in got.items():
        for x in ls:
            h = json.loads(x)
            if "sni" in h:
                mine[(h["src"], port, h["dst"], 443, h["sni"], h["ja3_full"], h["ja3"])] += 1
    assert sum(want.values()) == 40
    assert mine == want


def test_gap_in_client_hello_gives_nothing(
    binary: Path, reference: Counter[str], tmp_path: Path
) -> None:
    """A segment lost inside the ClientHello: that connection's client direction is given up
    (no ClientHello line, and nothing after the gap read as a message); its ServerHello, in
    the other direction, is still read; the intact connection beside it is unaffected."""
    cuts = [100, 200, 400]
    frames = connection(50001, CLIENT, SERVER, cuts, drop=[1], hold=HOLD)
    frames += connection(50002, CLIENT, SERVER, cuts, hold=HOLD)
    got = lines(binary, write(tmp_path / "gap.pcap", frames), tmp_path)
    assert got[50002] == reference
    server_only = Counter({k: v for k, v in reference.items() if json.loads(k).get("server")})
    assert got.get(50001) == server_only


LOSSY = [c for c in ("mixed-android-mobile.pcap", "sll-dns2tcp-tls.pcap") if (TRACES / c).is_file()]


@pytest.mark.parametrize("capture", LOSSY)
def test_lossy_copy_gives_no_garbage(capture: str, binary: Path, tmp_path: Path) -> None:
    """Every third data segment dropped from a real capture: every ClientHello the stack still
    prints is one tshark reads in the intact capture (same flow, SNI and JA3)."""
    pcap = TRACES / capture
    if pcap.read_bytes()[:4] not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4"):
        pytest.skip("not a classic pcap")
    data = [s.frame for s in segments(pcap) if s.length > 0]
    lossy = write_without(pcap, data[1::3], tmp_path / "lossy.pcap")
    want = set(tshark_client_hellos(pcap))
    got = lines(binary, lossy, tmp_path)
    seen = set()
    for port, ls in got.items():
        for x in ls:
            h = json.loads(x)
            if "sni" in h and h.get("layer") == "tls":
                seen.add((h["src"], port, h["dst"], 443, h["sni"] or "", h["ja3_full"], h["ja3"]))
    assert seen <= want, seen - want
