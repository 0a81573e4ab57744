"""IPFIX export (handlers/nf/rg_nf_ipfix.c, `--ipfix [tcp://]HOST:PORT`).

The export is sent to a real socket on lo while tcpdump captures it; tshark's cflow dissector
(the reference: RFC 7011 messages, IANA information elements, RFC 5103 reverse elements)
decodes it, and the flows must be the flowstats NF's records of the same run: addresses,
ports, protocol, packets and octets per direction, start/end milliseconds, flowEndReason
(RFC 7012 5.11.3: 1 idle timeout, 3 end of flow detected, 4 forced end, 5 lack of
resources).  The source of a flow is the SYN sender where tshark sees one.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.captures import flow_key
from support.conversations import reference
from support.lo_capture import capture_lo
from support.oracle.tshark import REPO, TRACES

CAPTURES = [
    TRACES / "mixed-android-mobile.pcap",  # TCP and UDP, IPv4 and IPv6, flows still open
    TRACES / "http-post-upload.pcap",  # a connection closed by FIN
    TRACES / "http-ooo-lost-rst-tlpw1.pcap",  # closed by RST
    REPO / "captures" / "veth-http-udp-frag.pcap",  # IPv6, a fragmented datagram
]
END_REASON = {"expired": 1, "accept": 3, "flushed": 4, "open": 4, "evicted": 5}
PROTO = {"tcp": 6, "udp": 17}
# (IE, enterprise number) of both templates, in order; IPv6's addresses are 27/28
FIELDS = [(8, 0), (12, 0), (7, 0), (11, 0), (4, 0), (401, 0), (2, 0), (401, 29305),
          (2, 29305), (152, 0), (153, 0), (136, 0)]  # fmt: skip
Pairs = list[tuple[str, Any]]


@pytest.fixture(scope="module")
def binary() -> Path:
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    from rubikgen.toolchain.build import build

    return build(REPO / "specs/stacks/tcp_ip.yaml", REPO / "build" / "tcp_ip", quiet=True).binary


def _get(pairs: Pairs, key: str) -> list[Any]:
    return [v for k, v in pairs if k == key]


def _walk(pairs: Pairs, prefix: str) -> list[tuple[str, Pairs]]:
    """Members of pairs (nested) whose key starts with prefix."""
    out: list[tuple[str, Pairs]] = []
    for k, v in pairs:
        if isinstance(v, list):
            if k.startswith(prefix):
                out.append((k, v))
            else:
                out += _walk(v, prefix)
    return out


def _ms(text: str) -> int:
    """tshark's absolute time ("Feb 23, 2020 10:47:51.827000000 UTC") in ms since the epoch."""
    mon, day, year, hms, _ = text.replace(",", "").split()
    whole, _, frac = hms.partition(".")
    t = datetime.strptime(f"{mon} {day} {year} {whole}", "%b %d %Y %H:%M:%S")
    return int(t.replace(tzinfo=UTC).timestamp()) * 1000 + int(frac[:3])


def decode(cap: Path, port: int, transport: str) -> list[dict[str, Any]]:
    """The IPFIX messages tshark finds in cap, each with its header, sets and records."""
    args = ["tshark", "-r", str(cap), "-o", "tcp.desegment_tcp_streams:TRUE"]
    args += ["-d", f"{transport}.port=={port},cflow", "-Y", "cflow", "-T", "json", "-J", "cflow"]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    # a record holds the forward and the reverse counters under the same key: keep both
    pkts = json.loads(text, object_pairs_hook=list)
    msgs = []
    for pkt in pkts:
        layers = _get(_get(pkt, "_source")[0], "layers")[0]
        for cflow in _get(layers, "cflow"):
            m: dict[str, Any] = {
                "version": int(_get(cflow, "cflow.version")[0]),
                "len": int(_get(cflow, "cflow.len")[0]),
                "seq": int(_get(cflow, "cflow.sequence")[0]),
                "domain": int(_get(cflow, "cflow.od_id")[0]),
                "templates": [],
                "records": [],
            }
            for _, tmpl in _walk(cflow, "Template (Id"):
                fields = []
                for _, f in _walk(tmpl, "Field ("):
                    pen = _get(f, "cflow.template_ipfix_field_pen")
                    fields.append((int(_get(f, "cflow.template_ipfix_field_type")[0]),
                                   int(pen[0]) if pen else 0))  # fmt: skip
                m["templates"].append((int(_get(tmpl, "cflow.template_id")[0]), fields))
            for _, rec in _walk(cflow, "Flow "):
                src = (_get(rec, "cflow.srcaddr") + _get(rec, "cflow.srcaddrv6"))[0]
                dst = (_get(rec, "cflow.dstaddr") + _get(rec, "cflow.dstaddrv6"))[0]
                octets = [int(x) for x in _get(rec, "cflow.transport_octet_delta_count")]
                packets = [int(x) for x in _get(rec, "cflow.packets")]
                tree = _get(rec, "cflow.timedelta_tree")[0]
                m["records"].append({
                    "src": (src, int(_get(rec, "cflow.srcport")[0])),
                    "dst": (dst, int(_get(rec, "cflow.dstport")[0])),
                    "proto": int(_get(rec, "cflow.protocol")[0]),
                    "octets": octets, "packets": packets,
                    "start": _ms(_get(tree, "cflow.abstimestart")[0]),
                    "end": _ms(_get(tree, "cflow.abstimeend")[0]),
                    "reason": int(_get(rec, "cflow.flow_end_reason")[0]),
                })  # fmt: skip
            msgs.append(m)
    return msgs


def _norm(proto: str, a: tuple[str, int], b: tuple[str, int]) -> tuple[Any, ...]:
    _, x, px, y, py = flow_key(proto, a[0], a[1], b[0], b[1])
    return (x, px), (y, py)


def from_flowstats(path: Path) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["proto"] not in PROTO or "sport" not in r:
            continue
        a, b = _norm(r["proto"], (r["src"], r["sport"]), (r["dst"], r["dport"]))
        sides = sorted([(a, r["packets"][0], r["bytes"][0]), (b, r["packets"][1], r["bytes"][1])])
        key = [PROTO[r["proto"]], sides, r["first_ts"] // 10**6, r["last_ts"] // 10**6,
               END_REASON[r["close"]]]  # fmt: skip
        out[json.dumps(key)] += 1
    return out


def from_ipfix(msgs: list[dict[str, Any]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for m in msgs:
        for r in m["records"]:
            name = {6: "tcp", 17: "udp"}[r["proto"]]
            a, b = _norm(name, r["src"], r["dst"])
            sides = sorted([(a, r["packets"][0], r["octets"][0]),
                            (b, r["packets"][1], r["octets"][1])])  # fmt: skip
            out[json.dumps([r["proto"], sides, r["start"], r["end"], r["reason"]])] += 1
    return out


def _udp_port() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))  # a bound port: no ICMP "port unreachable" answers the export
    return s


def _run(binary: Path, pcap: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), str(pcap), "--nf", "flowstats", "--out", str(out), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def _check_messages(
    msgs: list[dict[str, Any]], tcp: bool = False, domains: tuple[int, ...] = (1,)
) -> None:
    assert msgs, "tshark decoded no IPFIX message"
    seq: Counter[int] = Counter()  # per Observation Domain (--workers: one per worker)
    for i, m in enumerate(msgs):
        assert m["version"] == 10 and m["domain"] in domains and m["len"] <= 1400, m
        # data records sent before this message
        assert m["seq"] == seq[m["domain"]], (i, m["seq"], seq)
        seq[m["domain"]] += len(m["records"])
        if m["templates"]:
            v4, v6 = dict(m["templates"])[256], dict(m["templates"])[257]
            assert v4 == FIELDS
            assert v6 == [(27, 0), (28, 0), *FIELDS[2:]]
    assert msgs[0]["templates"], "the first message carries the templates"
    if tcp:
        assert not any(m["templates"] for m in msgs[1:]), "TCP: templates once"


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_udp_export_is_flowstats(binary: Path, tmp_path: Path, pcap: Path) -> None:
    sink = _udp_port()
    port = sink.getsockname()[1]
    with capture_lo(tmp_path / "ipfix.pcap", f"udp and dst port {port}") as cap:
        r = _run(binary, pcap, tmp_path, "--ipfix", f"127.0.0.1:{port}")
    sink.close()
    assert r.returncode == 0, r.stderr
    msgs = decode(cap, port, "udp")
    _check_messages(msgs)
    want = from_flowstats(tmp_path / "flowstats.jsonl")
    assert want, "not vacuous: flows to export"
    assert from_ipfix(msgs) == want
    # the source is the client: the SYN sender wherever tshark sees a SYN
    syn = {}
    for p in reference(pcap).pkts:
        if p.proto == "tcp" and p.flags & 0x12 == 0x02:
            syn.setdefault(frozenset([p.src, p.dst]), p.src)
    records = [x for m in msgs for x in m["records"] if x["proto"] == 6]
    pairs = Counter(frozenset(_norm("tcp", x["src"], x["dst"])) for x in records)
    for x in records:
        pair = frozenset(_norm("tcp", x["src"], x["dst"]))
        if pairs[pair] == 1 and pair in syn:
            assert _norm("tcp", x["src"], x["dst"])[0] == syn[pair], x


def test_workers_export_the_flows_of_one_context(binary: Path, tmp_path: Path) -> None:
    """--workers 2: each worker its own session and Observation Domain (1 and 2); together
    the flows flowstats writes with one context."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    r = _run(binary, pcap, tmp_path / "one")
    assert r.returncode == 0, r.stderr
    sink = _udp_port()
    port = sink.getsockname()[1]
    with capture_lo(tmp_path / "ipfix.pcap", f"udp and dst port {port}") as cap:
        r = _run(binary, pcap, tmp_path / "w", "--workers", "2", "--ipfix", f"127.0.0.1:{port}")
    sink.close()
    assert r.returncode == 0, r.stderr
    msgs = decode(cap, port, "udp")
    _check_messages(msgs, domains=(1, 2))
    assert {m["domain"] for m in msgs} == {1, 2}
    for d in (1, 2):
        assert [m for m in msgs if m["domain"] == d][0]["templates"]
    assert from_ipfix(msgs) == from_flowstats(tmp_path / "one" / "flowstats.jsonl")


def test_template_refresh_over_udp(binary: Path, tmp_path: Path) -> None:
    """refresh_msgs 2: the templates go out again in every second message."""
    sink = _udp_port()
    port = sink.getsockname()[1]
    chain = tmp_path / "chain.yaml"
    chain.write_text(
        f"chain:\n  - nf: ipfix\n    params: {{to: '127.0.0.1:{port}', refresh_msgs: 2}}\n"
    )
    with capture_lo(tmp_path / "ipfix.pcap", f"udp and dst port {port}") as cap:
        r = _run(binary, TRACES / "mixed-android-mobile.pcap", tmp_path, "--chain", str(chain))
    sink.close()
    assert r.returncode == 0, r.stderr
    msgs = decode(cap, port, "udp")
    _check_messages(msgs)
    assert len(msgs) >= 3, "the capture's flows fill three messages"
    assert [bool(m["templates"]) for m in msgs] == [i % 2 == 0 for i in range(len(msgs))]
    assert from_ipfix(msgs) == from_flowstats(tmp_path / "flowstats.jsonl")


def test_tcp_export_is_flowstats(binary: Path, tmp_path: Path) -> None:
    """tcp://: one session, the templates once (even with refresh_msgs 1), the same flows."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    got = bytearray()

    def collect() -> None:
        conn, _ = srv.accept()
        with conn:
            while chunk := conn.recv(65536):
                got.extend(chunk)

    t = threading.Thread(target=collect)
    t.start()
    chain = tmp_path / "chain.yaml"
    chain.write_text(f"chain:\n  - nf: ipfix\n    params: {{to: 'tcp://127.0.0.1:{port}', "
                     "refresh_msgs: 1}\n")  # fmt: skip
    pcap = TRACES / "mixed-android-mobile.pcap"
    with capture_lo(tmp_path / "ipfix.pcap", f"tcp port {port}") as cap:
        r = _run(binary, pcap, tmp_path, "--chain", str(chain))
        t.join(timeout=60)
    srv.close()
    assert r.returncode == 0, r.stderr
    msgs = decode(cap, port, "tcp")
    _check_messages(msgs, tcp=True)
    assert sum(m["len"] for m in msgs) == len(got)  # the collector read every message
    assert from_ipfix(msgs) == from_flowstats(tmp_path / "flowstats.jsonl")


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("localhost", "is not [udp://|tcp://]HOST:PORT"),
        ("[::1]:", "is not [udp://|tcp://]HOST:PORT"),
        ("no.such.host.invalid:4739", "no.such.host.invalid:4739"),
        ("tcp://127.0.0.1:1", "cannot connect to tcp://127.0.0.1:1"),
    ],
)
def test_bad_collector_is_a_clear_error(
    binary: Path, tmp_path: Path, arg: str, message: str
) -> None:
    r = _run(binary, TRACES / "http-post-upload.pcap", tmp_path, "--ipfix", arg)
    assert r.returncode != 0 and f"--ipfix {arg}: " in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
