"""Community ID v1 (`community_id` on the stock NFs' flow records) against the reference
implementation on PyPI, `communityid` (corelight/community-id-spec's own Python package):

* the C function (runtime-c/src/rg_community_id.c) through a tiny harness
  (runtime-c/tests/cidcalc.c) on a table of tuples: TCP, UDP, SCTP over IPv4 and IPv6 in both
  orders (equal addresses too), protocols without ports, every ICMP and ICMPv6 type with
  several codes in both directions (the request/response pairs and the one-way types), seeds
  0, 1, 65535; the expected values are computed here by `communityid`;
* every flow record of every capture in ../shared/traces, of every stock NF that writes flow
  records (flowstats, the events NF's close lines, streams' flows.jsonl, flowexport; one run
  with a chain of them, on the stack the tshark tests use for the capture; a sample of the
  captures in the normal run, all of them with RG_FULL_MATRIX=1): the record's `community_id` equals `communityid`'s from the record's own
  tuple AND from the tuple tshark dissects for that flow (a TCP/UDP/SCTP header and the IP
  header right before it, so tunnelled flows hash their inner 5-tuple and the tunnels' outer
  UDP flows theirs); every record whose endpoints are a TCP/UDP/SCTP flow of tshark's has one,
  and a record of an IP datagram (no ports) one of the protocols tshark saw between its
  addresses, or none for TCP/UDP/SCTP, which the spec hashes only with ports;
* `--community-id-seed` changes them as the reference's seed does; the streams
  (flows.jsonl) and flowexport records carry the same IDs, hostlog's lines their connection's.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from support.captures import REPO, rubikgen_command
from support.oracle import TRACES, tshark_available
from support.oracle.tshark import _tshark

communityid = pytest.importorskip("communityid")

PROTO = {"tcp": 6, "udp": 17, "sctp": 132}
STACKS = REPO / "specs" / "stacks"


def reference(
    seed: int, proto: int, src: str, dst: str, sport: int | None, dport: int | None
) -> str:
    cid = communityid.CommunityID(seed)
    if proto in (1, 58):
        assert sport is not None and dport is not None
        make = communityid.FlowTuple.make_icmp6 if proto == 58 else communityid.FlowTuple.make_icmp
        return str(cid.calc(make(src, dst, sport, dport)))
    if sport is None:
        return str(cid.calc(communityid.FlowTuple.make_ip(src, dst, proto)))
    return str(cid.calc(communityid.FlowTuple(proto, src, dst, sport, dport)))


@pytest.fixture(scope="module")
def cidcalc() -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "runtime-c"), "build/tools/cidcalc"], check=True)
    return REPO / "runtime-c" / "build" / "tools" / "cidcalc"


def test_vectors_match_communityid(cidcalc: Path) -> None:
    rows: list[tuple[int, int, str, str, int | None, int | None]] = []
    pairs = [("10.0.0.1", "192.168.1.2"), ("2001:db8::1", "fe80::1:2"), ("10.1.1.1", "10.1.1.1")]
    for seed in (0, 1, 65535):
        for a, b in pairs:
            for proto in (6, 17, 132):
                for sp, dp in ((40000, 80), (80, 40000), (5, 5), (0, 65535)):
                    rows += [(seed, proto, a, b, sp, dp), (seed, proto, b, a, sp, dp)]
            for proto in (47, 50, 89, 0, 255):  # no ports
                rows += [(seed, proto, a, b, None, None), (seed, proto, b, a, None, None)]
    for seed in (0, 7):
        for v6, (a, b) in ((False, pairs[0]), (True, pairs[1]), (False, pairs[2])):
            for t in range(256):
                for code in (0, 1, 3, 255):
                    for s, d in ((a, b), (b, a)):
                        rows.append((seed, 58 if v6 else 1, s, d, t, code))
    lines = []
    for seed, proto, s, d, sp, dp in rows:
        kind = "icmp" if proto in (1, 58) else str(proto)
        ports = f"{sp} {dp}" if sp is not None else "- -"
        lines.append(f"{seed} {kind} {s} {d} {ports}")
    out = subprocess.run(
        [str(cidcalc)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(out) == len(rows)
    bad = [(r, o) for r, o in zip(rows, out, strict=True) if reference(*r) != o]
    assert not bad, f"{len(bad)} of {len(rows)} differ, e.g. {bad[:5]}"


# ---- records of the shared captures ----------------------------------------------------------


def stack_of(name: str, covered: str) -> str:
    """The stack the tshark tests run a capture on (test_e2e_tshark, test_e2e_tunnels,
    test_e2e_gtp_pptp, test_e2e_sctp)."""
    if "udp>gtp" in covered:
        return "gtp"
    if "gre>ppp" in covered:
        return "pptp"
    if name.startswith("sctp-"):
        return "sctp"
    tunnels = ("vxlan", "mpls", "4in6", "6in4", "pppoe")
    return "tcp_ip_tunnels" if any(t in name for t in tunnels) else "tcp_ip"


def captures() -> list[tuple[str, str]]:
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [
        (r["file"], stack_of(r["file"], r.get("stacks_covered") or ""))
        for r in rows
        if (TRACES / r["file"]).is_file()
    ]


def run(stack: str, pcap: Path, out: Path, nf: str, *args: str) -> list[dict]:
    argv = [*rubikgen_command(), "run", f"specs/stacks/{stack}.yaml", str(pcap), "--nf", nf]
    argv += ["--out", str(out), "--summary", "json", *args]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=900)
    assert proc.returncode == 0, proc.stderr
    files = {"flowstats": "flowstats.jsonl", "streams": "flows.jsonl", "hostlog": "hostlog.jsonl"}
    file = files.get(nf, "flows.ipfix.jsonl")
    path = out / file
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


_TFIELDS = ("frame.protocols", "ip.src", "ip.dst", "ip.proto", "ipv6.src", "ipv6.dst")
_TFIELDS += tuple(f"{p}.{e}" for p in PROTO for e in ("srcport", "dstport"))


def _nth(row: dict[str, str], protos: list[str], field: str, pos: int) -> str:
    """A field of the header at protos[pos]: its occurrence among the headers of its kind."""
    return row[field].split(",")[protos[:pos].count(protos[pos])]


def tshark_tuples(pcap: Path) -> tuple[dict[tuple, tuple], set[tuple[str, str, int]]]:
    """tshark's flows: (proto, {(addr, port), (addr, port)}) -> the first frame's tuple
    (proto, src, dst, sport, dport), from each transport header and the IP header before it;
    and the (src, dst, protocol) of every IPv4 header (flows without ports)."""
    args = ["-r", str(pcap), "-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE"]
    args += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in _TFIELDS:
        args += ["-e", f]
    flows: dict[tuple, tuple] = {}
    ip: set[tuple[str, str, int]] = set()
    for line in _tshark(args).splitlines():
        row = dict(zip(_TFIELDS, line.split("\t"), strict=True))
        protos = row["frame.protocols"].split(":")
        for s, d, p in zip(
            *(row[f].split(",") for f in ("ip.src", "ip.dst", "ip.proto")), strict=False
        ):
            if s and p:
                ip.add((s, d, int(p)))
        # every transport header with the IP header right before it (a tunnel's outer flow
        # and its inner one), each field list indexed by the header's occurrence in the frame
        for at in (i for i, p in enumerate(protos) if p in PROTO):
            ip_at = max((i for i, p in enumerate(protos[:at]) if p in ("ip", "ipv6")), default=-1)
            t = protos[at]
            ports = row[f"{t}.srcport"].split(",")
            if ip_at < 0 or len(ports) <= protos[:at].count(t) or not ports[0]:
                continue
            net = protos[ip_at]
            src, dst = (_nth(row, protos, f"{net}.{e}", ip_at) for e in ("src", "dst"))
            sp, dp = (int(_nth(row, protos, f"{t}.{e}", at)) for e in ("srcport", "dstport"))
            flows.setdefault((t, frozenset([(src, sp), (dst, dp)])), (PROTO[t], src, dst, sp, dp))
    return flows, ip


_IFIELDS = ("frame.protocols", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "icmp.type")
_IFIELDS += ("icmp.code", "icmpv6.type", "icmpv6.code")


def tshark_icmp(pcap: Path) -> set[tuple[str, str, int, int]]:
    """(src, dst, type, code) of every ICMP/ICMPv6 message tshark dissects, with the addresses
    of the IP header that carries it (the one right before it: a tunnel's inner header)."""
    args = ["-r", str(pcap), "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"]
    args += ["-E", "aggregator=,"]
    for f in _IFIELDS:
        args += ["-e", f]
    out: set[tuple[str, str, int, int]] = set()
    for line in _tshark(args).splitlines():
        row = dict(zip(_IFIELDS, line.split("\t"), strict=True))
        protos = row["frame.protocols"].split(":")
        at = next((i for i, p in enumerate(protos) if p in ("icmp", "icmpv6")), -1)
        ip_at = max((i for i, p in enumerate(protos[:at]) if p in ("ip", "ipv6")), default=-1)
        if at < 0 or ip_at < 0:
            continue
        net, t = protos[ip_at], protos[at]
        src, dst = (_nth(row, protos, f"{net}.{e}", ip_at) for e in ("src", "dst"))
        typ, code = (int(row[f"{t}.{e}"].split(",")[0]) for e in ("type", "code"))
        out.add((src, dst, typ, code))
    return out


CASES = captures()


#: the flow-record NFs run with flowstats, in one chain: their records (the events NF's close
#: lines) with flowstats' field names
CHAIN = "chain: [{nf: events}, {nf: streams}, {nf: flowexport}]\n"
IPFIX = {"sourceIPAddress": "src", "destinationIPAddress": "dst"}
IPFIX |= {"sourceTransportPort": "sport", "destinationTransportPort": "dport"}


def every_nf(stack: str, pcap: Path, out: Path) -> dict[str, list[dict]]:
    out.mkdir(parents=True)
    (out / "chain.yaml").write_text(CHAIN)
    recs = {"flowstats": run(stack, pcap, out, "flowstats", "--chain", str(out / "chain.yaml"))}
    lines = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    recs["events"] = [e for e in lines if e.get("event") == "close"]
    recs["streams"] = [json.loads(x) for x in (out / "flows.jsonl").read_text().splitlines()]
    recs["flowexport"] = [
        {IPFIX.get(k, k): v for k, v in json.loads(x).items()}
        for x in (out / "flows.ipfix.jsonl").read_text().splitlines()
    ]
    return recs


def check_records(
    name: str,
    recs: list[dict],
    flows: dict[tuple, tuple],
    ip: set[tuple[str, str, int]],
    icmp: set[tuple[str, str, int, int]],
) -> int:
    """How many records' Community IDs were compared (all of those that can be)."""
    checked = 0
    for r in recs:
        cid = r["community_id"]
        if "sport" in r and "dport" in r and r["src"] and r["dst"]:
            key = frozenset([(r["src"], r["sport"]), (r["dst"], r["dport"])])
            match = [flows[(t, key)] for t in PROTO if (t, key) in flows]
            if not match:
                continue  # not a TCP/UDP/SCTP flow of tshark's (a QUIC connection's CIDs...)
            (ref,) = match
            assert cid is not None, f"{name}: no community_id on {r}"
            assert cid == reference(0, ref[0], *ref[1:]), (name, r, ref)
            assert cid == reference(0, ref[0], r["src"], r["dst"], r["sport"], r["dport"])
            checked += 1
        elif "icmp_type" in r:  # an ICMP conversation: its first message's type and code
            proto = 58 if ":" in r["src"] else 1
            assert cid == reference(0, proto, r["src"], r["dst"], r["icmp_type"], r["icmp_code"])
            assert (r["src"], r["dst"], r["icmp_type"], r["icmp_code"]) in icmp, (name, r)
            checked += 1
        elif cid is not None:  # an IP flow without ports: one of the protocols tshark saw
            protos = {p for s, d, p in ip if {s, d} == {r["src"], r["dst"]}}
            assert cid in {reference(0, p, r["src"], r["dst"], None, None) for p in protos}, r
            checked += 1
    return checked


def check_capture(name: str, stack: str, out: Path) -> dict[str, int]:
    """Every flow record of every flow-record NF on one capture; how many each had checked."""
    pcap = TRACES / name
    by_nf = every_nf(stack, pcap, out)
    flows, ip = tshark_tuples(pcap)
    icmp = tshark_icmp(pcap)
    checked = {
        nf: check_records(f"{name} {nf}", recs, flows, ip, icmp) for nf, recs in by_nf.items()
    }
    fs = by_nf["flowstats"]
    assert checked["flowstats"] or not flows or not fs, f"{name}: no record compared"
    # the others write the TCP/UDP/SCTP flows flowstats writes (events and streams: and more)
    ported = [r for r in fs if "sport" in r and r["close"] != "open"]
    for nf in ("events", "flowexport"):
        uids = {(r["src"], r.get("sport"), r["community_id"]) for r in by_nf[nf]}
        missing = [r for r in ported if (r["src"], r["sport"], r["community_id"]) not in uids]
        assert not missing, f"{name} {nf}: no record of {missing[:2]}"
    return checked


#: a sample of the captures for the normal run: one per stack at least, ICMP, tunnels, SCTP
SAMPLE = {"arp-icmp-vlan.pcap", "raw-ipv4-ipv6-http.pcap", "mpls-over-udp.pcap"}
SAMPLE |= {"vxlan-http.pcap", "gtp-u-tls.pcap", "pptp-gre-ppp-udp-dns.pcap", "sctp-m3ua.pcap"}


#: the rest: `-m full_matrix` or RG_FULL_MATRIX=1 (tests/conftest.py)
FULL = (pytest.mark.full_matrix,)


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize(
    ("name", "stack"),
    [pytest.param(n, s, marks=() if n in SAMPLE else FULL, id=n) for n, s in CASES],
)
def test_records_match_communityid(name: str, stack: str, tmp_path: Path) -> None:
    """Every flow record of flowstats, events (close lines), streams and flowexport."""
    checked = check_capture(name, stack, tmp_path / "out")
    print(f"\n[community-id] {name}: {checked}")


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_seed_and_other_nfs(tmp_path: Path) -> None:
    pcap = TRACES / "raw-ipv4-ipv6-http.pcap"
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    base = run("tcp_ip", pcap, tmp_path / "s0", "flowstats")
    seeded = run("tcp_ip", pcap, tmp_path / "s7", "flowstats", "--community-id-seed", "7")
    assert len(base) == len(seeded) > 0
    for r0, r7 in zip(base, seeded, strict=True):
        if r0["community_id"] is None:
            continue
        proto = PROTO[r0["proto"]]
        tup = (r0["src"], r0["dst"], r0["sport"], r0["dport"])
        assert r0["community_id"] == reference(0, proto, *tup)
        assert r7["community_id"] == reference(7, proto, *tup) != r0["community_id"]
    ids = {r["uid"]: r["community_id"] for r in base}
    lines = [x for x in run("tcp_ip", pcap, tmp_path / "streams", "streams") if x["uid"] in ids]
    assert lines
    for line in lines:
        assert line["community_id"] == ids[line["uid"]], line
    exported = run("tcp_ip", pcap, tmp_path / "fx", "flowexport")
    assert exported
    by_tuple = {(r["src"], r["sport"], r["dst"], r["dport"]): r["community_id"] for r in base}
    for x in exported:
        key = (x["sourceIPAddress"], x["sourceTransportPort"], x["destinationIPAddress"])
        assert x["community_id"] == by_tuple[(*key, x["destinationTransportPort"])], x


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize(
    ("name", "stack", "proto"),
    [
        ("sll-dns2tcp-tls.pcap", "tcp_tls_http", 6),
        ("null-ipv6-http-connect-tls.pcap", "tcp_tls_http", 6),
        ("quic-v1-chromium.pcap", "quic", 17),
    ],
)
def test_hostlog_records(name: str, stack: str, proto: int, tmp_path: Path) -> None:
    """hostlog's lines (TLS SNI over TCP or QUIC, HTTP Host) carry their connection's
    Community ID."""
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    lines = run(stack, pcap, tmp_path / "out", "hostlog")
    assert lines
    for x in lines:
        want = reference(0, proto, x["src"], x["dst"], x["sport"], x["dport"])
        assert x["community_id"] == want, x


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("seed", [0, 7])
def test_bindings_close_events(seed: int, tmp_path: Path) -> None:
    """The Python bindings' close events (FlowKey.community_id, Stack(community_id_seed=...))
    on real captures with TCP, UDP, IPv6 and ICMP: each equals `communityid`'s from the tuple
    tshark dissects for the flow; an ICMP conversation's is not None and is the hash of one of
    the (type, code) pairs tshark saw between its addresses."""
    bindings = pytest.importorskip("rubikgen.bindings")
    stack = bindings.Stack.build(
        str(STACKS / "tcp_ip.yaml"), str(REPO / "build" / "tcp_ip"), community_id_seed=seed
    )
    counts = {"ports": 0, "icmp": 0}
    for name in ("arp-icmp-vlan.pcap", "raw-ipv4-ipv6-http.pcap", "ipv6-http-atomic-frag.pcap"):
        pcap = TRACES / name
        if not pcap.is_file():
            pytest.skip(f"{pcap} missing")
        flows, _ = tshark_tuples(pcap)
        icmp = tshark_icmp(pcap)
        for ev in stack.feed_pcap(pcap):
            if ev.kind != "close" or ev.key is None:
                continue
            k = ev.key
            if k.sport is not None and k.src and k.dst:
                key = frozenset([(k.src, k.sport), (k.dst, k.dport)])
                match = [flows[(t, key)] for t in PROTO if (t, key) in flows]
                if match:
                    (ref,) = match
                    assert k.community_id == reference(seed, ref[0], *ref[1:]), (name, ev)
                    counts["ports"] += 1
            elif ev.layer in ("icmp", "icmp6"):
                proto = 58 if ev.layer == "icmp6" else 1
                refs = {
                    reference(seed, proto, s, d, t, c)
                    for s, d, t, c in icmp
                    if (s, d) == (k.src, k.dst)
                }
                assert k.community_id is not None and k.community_id in refs, (name, ev)
                counts["icmp"] += 1
    assert counts["ports"] > 5 and counts["icmp"] > 0, counts
