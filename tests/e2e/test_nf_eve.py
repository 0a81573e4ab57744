"""The eve NF (handlers/nf/rg_nf_eve.c, `--nf eve`): Suricata's EVE JSON in OUT/eve.json.

References nobody here wrote: Suricata's own JSON Schema of EVE (etc/schema.json, kept in
../shared/reference/suricata-eve/), which every line must validate against; tshark's
conversation tables and its per-frame dissection (frames, transport bytes, first and last
frame time per direction, who sent the SYN); the PyPI `communityid` package for
"community_id".
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.captures import flow_key
from support.conversations import EXCLUDED_FRAMES, Pkt, Reference, reference
from support.oracle.tshark import REPO, TRACES

SCHEMA = REPO.parent / "shared" / "reference" / "suricata-eve" / "schema.json"
CAPTURES = [
    TRACES / "http-post-upload.pcap",
    TRACES / "mixed-android-mobile.pcap",  # TCP and UDP (DNS, QUIC), IPv4 and IPv6
    TRACES / "tcp-midstream-missing-syn.pcap",  # no handshake: the first packet's sender
    TRACES / "http-ooo-lost-rst-tlpw1.pcap",  # gaps
    TRACES / "tcp-overlap-partial-crafted.pcap",  # overlaps with different bytes
    TRACES / "arp-icmp-vlan.pcap",  # an ICMP conversation: icmp_type/icmp_code
    REPO / "captures" / "veth-http-udp-frag.pcap",  # IPv4 and IPv6, a fragmented datagram
]
Node = tuple[str, int]
Eve = list[dict[str, Any]]


@pytest.fixture(scope="module")
def binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(REPO / "specs/stacks/tcp_ip.yaml", REPO / "build" / "tcp_ip", quiet=True).binary


def _run(binary: Path, pcap: Path, out: Path, nf: str = "eve") -> Eve:
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", nf, "--out", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    name = "eve.json" if nf == "eve" else f"{nf}.jsonl"
    return [json.loads(ln) for ln in (out / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Eve]:
    root = tmp_path_factory.mktemp("eve")
    return {p.name: _run(binary, p, root / p.name) for p in CAPTURES}


@pytest.fixture(scope="module")
def refs() -> dict[str, Reference]:
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    return {p.name: reference(p) for p in CAPTURES}


def _flows(eve: Eve, protos: tuple[str, ...] = ("TCP", "UDP")) -> Eve:
    return [e for e in eve if e["event_type"] == "flow" and e["proto"] in protos]


def _ends(e: dict[str, Any]) -> tuple[str, Node, Node]:
    """(proto, client, server) with tshark's address text (flow_key normalises it)."""
    proto = e["proto"].lower()
    _, a, pa, b, pb = flow_key(proto, e["src_ip"], e["src_port"], e["dest_ip"], e["dest_port"])
    return proto, (a, pa), (b, pb)


def _when(text: str) -> int:
    """Microseconds since the epoch of an EVE time (2024-05-01T12:00:00.123456+0000)."""
    t = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(t.timestamp()) * 10**6 + t.microsecond


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_every_line_validates_against_suricatas_schema(runs: dict[str, Eve], pcap: Path) -> None:
    if not SCHEMA.is_file():
        pytest.skip(f"Suricata's EVE schema is not at {SCHEMA} (../shared/reference)")
    import jsonschema  # type: ignore[import-untyped]

    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    eve = runs[pcap.name]
    assert _flows(eve, ("TCP", "UDP", "ICMP", "IPv6-ICMP")), "no flow event"
    for e in eve:
        errors = [f"{list(x.absolute_path)}: {x.message}" for x in validator.iter_errors(e)]
        assert not errors, (e, errors)
        assert e["event_type"] in ("flow", "anomaly"), e


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_flows_match_tshark(runs: dict[str, Eve], refs: dict[str, Reference], pcap: Path) -> None:
    """Frames and transport bytes per direction (summed per address/port pair: tshark and the
    stack may cut a reused pair in different places), the first and last frame times of a pair
    seen once, and the client: the SYN sender, else the first frame's sender."""
    ref = refs[pcap.name]
    want: Counter[tuple[str, Node, Node]] = Counter()
    for (proto, _), conv in ref.convs.items():
        a, b = conv.frames  # the two endpoints, each with the frames it sent
        want[proto, a, b] += conv.frames[a]
        want[proto, b, a] += conv.frames[b]
    pkts: dict[tuple[str, frozenset[Node]], list[Pkt]] = defaultdict(list)
    for p in ref.pkts:
        pkts[p.proto, frozenset([p.src, p.dst])].append(p)
    got: Counter[tuple[str, Node, Node]] = Counter()
    got_bytes: Counter[tuple[str, Node, Node]] = Counter()
    seen: Counter[tuple[str, frozenset[Node]]] = Counter()
    for e in _flows(runs[pcap.name]):
        proto, c, s = _ends(e)
        f = e["flow"]
        got[proto, c, s] += f["pkts_toserver"]
        got[proto, s, c] += f["pkts_toclient"]
        got_bytes[proto, c, s] += f["bytes_toserver"]
        got_bytes[proto, s, c] += f["bytes_toclient"]
        seen[proto, frozenset([c, s])] += 1
    assert +got == +want
    for (proto, pair), pk in pkts.items():
        if any((pcap.name, p.frame) in EXCLUDED_FRAMES for p in pk):
            continue
        for snd in pair:
            (rcv,) = pair - {snd} or {snd}
            sent = sum(p.l4 - p.cut for p in pk if p.src == snd)
            assert got_bytes[proto, snd, rcv] == sent, (pcap.name, proto, snd, rcv)
    for e in _flows(runs[pcap.name]):
        proto, c, s = _ends(e)
        pk = sorted(pkts[proto, frozenset([c, s])], key=lambda p: p.frame)
        if seen[proto, frozenset([c, s])] != 1:
            continue
        assert _when(e["flow"]["start"]) == min(p.ts for p in pk) // 1000, e
        assert _when(e["flow"]["end"]) == max(p.ts for p in pk) // 1000, e
        assert e["timestamp"] == e["flow"]["end"]
        syn = [p for p in pk if proto == "tcp" and p.flags & 0x12 == 0x02]
        synack = [p for p in pk if proto == "tcp" and p.flags & 0x12 == 0x12]
        client = syn[0].src if syn else synack[0].dst if synack else pk[0].src
        assert c == client, (e, "SYN" if syn else "SYN-ACK" if synack else "first packet")


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_community_id_is_the_reference_implementations(runs: dict[str, Eve], pcap: Path) -> None:
    communityid = pytest.importorskip("communityid")
    cid = communityid.CommunityID()
    n = 0
    for e in _flows(runs[pcap.name], ("TCP", "UDP", "ICMP", "IPv6-ICMP")):
        if e["proto"] in ("TCP", "UDP"):
            make = getattr(communityid.FlowTuple, f"make_{e['proto'].lower()}")
            t = make(e["src_ip"], e["dest_ip"], e["src_port"], e["dest_port"])
        else:
            proto = communityid.PROTO_ICMP if e["proto"] == "ICMP" else communityid.PROTO_ICMP6
            t = communityid.FlowTuple(
                proto, e["src_ip"], e["dest_ip"], e["icmp_type"], e["icmp_code"]
            )
        assert e["community_id"] == cid.calc(t), e
        n += 1
    assert n


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_anomalies_are_the_events_nfs_gaps_and_overlaps(
    binary: Path, runs: dict[str, Eve], pcap: Path, tmp_path: Path
) -> None:
    """Each gap and overlap the events NF reports is one anomaly event (tshark's view of the
    same holes is test_gaps.py's): same time, same flow, sent by that direction's sender."""
    events = [e for e in _run(binary, pcap, tmp_path, "events") if "handler" not in e]
    closes = {e["flow"]: e for e in events if e["event"] == "close"}
    names = {"gap": "stream.reassembly_seq_gap",
             "overlap": "stream.reassembly_overlap_different_data"}  # fmt: skip
    want = []
    for e in events:
        if e["event"] in names:
            c = closes[e["flow"]]  # src/sport: side a, the sender of direction c2s
            snd = (c["src"], c["sport"]) if e["dir"] == "c2s" else (c["dst"], c["dport"])
            want.append((names[e["event"]], e["flow"], e["ts"] // 1000, snd, c["community_id"]))
    got = [
        (a["anomaly"]["event"], a["flow_id"], _when(a["timestamp"]), (a["src_ip"], a["src_port"]),
         a["community_id"])
        for a in runs[pcap.name]
        if a["event_type"] == "anomaly"
    ]  # fmt: skip
    assert sorted(got) == sorted(want)
    if pcap.name.startswith(("http-ooo", "tcp-overlap")):
        assert got, "not vacuous: this capture has holes or overlaps"


def test_eve_is_listed_by_help_and_takes_workers(binary: Path, tmp_path: Path) -> None:
    h = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    assert any(ln.split()[:1] == ["eve"] for ln in h.splitlines()), h
    pcap = TRACES / "mixed-android-mobile.pcap"
    one = _run(binary, pcap, tmp_path / "one")
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "eve", "--workers", "2", "--out", str(tmp_path / "w")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    two = [json.loads(ln) for ln in (tmp_path / "w" / "eve.json").read_text().splitlines()]
    # flow_id: the uid, unique across the workers (worker K's: (i - 1) * 2 + K + 1), the same
    # events otherwise
    flows = [e["flow_id"] for e in two if e["event_type"] == "flow"]
    assert len(set(flows)) == len(flows) and one

    def key(e: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in e.items() if k != "flow_id"})

    assert sorted(map(key, two)) == sorted(map(key, one))
