"""End to end: ICMP and ICMPv6 in the tcp_ip stack against tshark's dissection.

The reference is tshark's `icmp`/`icmpv6` fields of every frame (`-T fields`, all
occurrences): the error's type and code, its source (the reporter: the first `ip.src` /
`ipv6.src`), the quoted datagram's addresses (the second occurrence) and ports
(`tcp.*port`/`udp.*port`, the only occurrence in an error frame), and tshark's TCP/UDP
conversations of the frames that are not ICMP (the flows an error can answer). Checked on the
records of every stock NF that writes flow records (`flowstats`, the `events` NF's close lines,
`streams`' and `flowexport`'s records; the ICMP conversations on flowstats'):

- every error whose quoted 5-tuple is one of tshark's TCP/UDP conversations is on that flow's
  record, in `icmp_errors`, with tshark's type, code, reporter and the frame's time, in frame
  order; no record carries any other error (one quoting an unknown flow is attached nowhere);
- queries and other informational messages are conversations per address pair and identifier
  (`icmp.ident`, `icmpv6.echo.identifier`; 0 for messages without one): one record each, with
  tshark's packets per direction and its first frame's `icmp_type`/`icmp_code` (not its time:
  records are dated by the flow clock, which does not go back, and ipv6-http-atomic-frag.pcap's
  second frame is older than its first).

Captures: a crafted one (tests/support/icmp_captures.py: errors of each kind over IPv4 and IPv6 quoting
a TCP and a UDP flow in both directions, fragmentation needed and packet too big included,
echo conversations) and the ../shared/traces captures whose MANIFEST.tsv paths reach ICMP.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import icmp_captures
from support.captures import REPO, flow_key
from support.oracle import TRACES, tshark_available

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
TUNNELS = REPO / "specs" / "stacks" / "tcp_ip_tunnels.yaml"
ERRORS4 = {3, 4, 5, 11, 12}
ERRORS6 = {1, 2, 3, 4}
QUERIES4 = {0, 8, 13, 14, 15, 16, 17, 18}
QUERIES6 = {128, 129}
_FIELDS = ("frame.time_epoch", "frame.protocols", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
           "icmp.type", "icmp.code", "icmp.ident", "icmpv6.type", "icmpv6.code",
           "icmpv6.echo.identifier", "tcp.srcport", "tcp.dstport", "udp.srcport",
           "udp.dstport", "tcp.stream", "udp.stream")  # fmt: skip


def shared_icmp_captures() -> dict[str, Path]:
    """The captures whose MANIFEST.tsv paths end in ICMP, with the stack that parses down to
    it: tcp_ip, or tcp_ip_tunnels where the ICMP is inside a tunnel (IP in IP, MPLS in UDP)."""
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return {}
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    out = {}
    for r in rows:
        paths = [p for p in (r.get("stacks_covered") or "").split(";") if p.endswith("icmp")]
        paths += [p for p in (r.get("stacks_covered") or "").split(";") if p.endswith("icmp6")]
        if not paths or not (TRACES / r["file"]).is_file():
            continue
        tunnel = any(p.count(">ip") > 1 or "mpls" in p for p in paths)
        out[r["file"]] = TUNNELS if tunnel else STACK
    return out


def _ns(epoch: str) -> int:
    sec, _, frac = epoch.partition(".")
    return int(sec) * 10**9 + int((frac + "000000000")[:9])


def tshark_rows(pcap: Path) -> list[dict[str, list[str]]]:
    args = ["tshark", "-r", str(pcap), "-n", "-T", "fields", "-E", "separator=/t"]
    args += ["-E", "occurrence=a", "-E", "aggregator=,"]
    for f in _FIELDS:
        args += ["-e", f]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in text.splitlines():
        row = dict(zip(_FIELDS, line.split("\t"), strict=True))
        rows.append({k: (v.split(",") if v else []) for k, v in row.items()})
    return rows


Tuple = tuple[str, frozenset[tuple[str, int]]]  # proto, both ends (flow_key's normal form)


def conv(proto: str, a: str, p: int, b: str, q: int) -> Tuple:
    """A flow whichever way round: an error may quote either end's datagram."""
    k = flow_key(proto, a, p, b, q)
    return (k[0], frozenset({(k[1], k[2]), (k[3], k[4])}))


def reference(pcap: Path) -> tuple[dict[Tuple, list[tuple[int, int, str, int]]], dict[Any, Any]]:
    """tshark's errors by the flow they quote (only flows tshark has conversations for), and
    its ICMP conversations: (v6, pair, ident) -> [packets from the first sender, back], the
    first frame's time, type and code, the first sender."""
    errors: dict[Tuple, list[tuple[int, int, str, int]]] = defaultdict(list)
    known: set[Tuple] = set()
    convs: dict[Any, Any] = {}
    rows = tshark_rows(pcap)
    for row in rows:
        protos = row["frame.protocols"][0].split(":")
        if "icmp" in protos or "icmpv6" in protos:
            continue
        for proto in ("tcp", "udp"):
            if row[f"{proto}.srcport"]:
                fam = "ipv6" if "ipv6" in protos else "ip"
                known.add(
                    conv(
                        proto,
                        row[f"{fam}.src"][-1],
                        int(row[f"{proto}.srcport"][0]),
                        row[f"{fam}.dst"][-1],
                        int(row[f"{proto}.dstport"][0]),
                    )  # fmt: skip
                )
    for row in rows:
        protos = row["frame.protocols"][0].split(":")
        v6 = "icmpv6" in protos
        if not v6 and "icmp" not in protos:
            continue
        pre = "icmpv6" if v6 else "icmp"
        fam = "ipv6" if v6 else "ip"
        if not row[f"{pre}.type"]:
            continue
        # the IP header carrying the ICMP message: the last one before it (a tunnel's outer
        # headers come first); the quoted one is the next occurrence
        ih = protos[: protos.index(pre)].count(fam) - 1
        t, code = int(row[f"{pre}.type"][0]), int(row[f"{pre}.code"][0])
        ts = _ns(row["frame.time_epoch"][0])
        src, dst = row[f"{fam}.src"][ih], row[f"{fam}.dst"][ih]
        if t in (ERRORS6 if v6 else ERRORS4):
            for proto in ("tcp", "udp"):
                if row[f"{proto}.srcport"] and len(row[f"{fam}.src"]) >= ih + 2:
                    q = ih + 1
                    k = conv(proto, row[f"{fam}.src"][q], int(row[f"{proto}.srcport"][-1]),
                             row[f"{fam}.dst"][q], int(row[f"{proto}.dstport"][-1]))  # fmt: skip
                    if k in known:
                        errors[k].append((t, code, src, ts))
            continue
        idf = "icmpv6.echo.identifier" if v6 else "icmp.ident"
        ident = int(row[idf][0], 0) if row[idf] and t in (QUERIES6 if v6 else QUERIES4) else 0
        key = (v6, frozenset((src, dst)), ident)
        c = convs.setdefault(key, {"first": src, "packets": [0, 0], "ts": ts, "type": t,
                                   "code": code})  # fmt: skip
        c["packets"][src != c["first"]] += 1
    return dict(errors), convs


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def run_flowstats(pcap: Path, out: Path, stack: Path) -> dict[str, list[dict[str, Any]]]:
    """The records of every stock NF that writes flow records, in one chain: flowstats, the
    events NF's close lines, streams' lines (one per direction: the c2s one, whose src is the
    flow's) and flowexport's (named like flowstats' here)."""
    out.mkdir(parents=True, exist_ok=True)
    chain = out / "chain.yaml"
    chain.write_text("chain: [{nf: events}, {nf: streams}, {nf: flowexport}]\n")
    argv = [sys.executable, "-m", "rubikgen", "run", str(stack.relative_to(REPO)), str(pcap)]
    argv += ["--nf", "flowstats", "--chain", str(chain), "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {"sourceIPAddress": "src", "destinationIPAddress": "dst", "layer": "layer"}
    names |= {"sourceTransportPort": "sport", "destinationTransportPort": "dport"}
    proto = {6: "tcp", 17: "udp", 132: "sctp"}
    exported = [
        {**{names.get(k, k): v for k, v in x.items()}, "proto": proto.get(x["protocolIdentifier"])}
        for x in _jsonl(out / "flows.ipfix.jsonl")
    ]
    return {
        "flowstats": _jsonl(out / "flowstats.jsonl"),
        "events": [e for e in _jsonl(out / "events.jsonl") if e.get("event") == "close"],
        "streams": [x for x in _jsonl(out / "flows.jsonl") if x["dir"] == "c2s"],
        "flowexport": exported,
    }


def check(pcap: Path, out: Path, stack: Path = STACK) -> tuple[int, int]:
    errors, convs = reference(pcap)
    by_nf = run_flowstats(pcap, out, stack)
    for nf, nf_recs in by_nf.items():
        got: dict[Tuple, list[tuple[int, int, str, int]]] = {}
        for r in nf_recs:
            if r["proto"] in ("tcp", "udp") and "icmp_errors" in r:
                k = conv(r["proto"], r["src"], r["sport"], r["dst"], r["dport"])
                got.setdefault(k, []).extend(
                    (e["type"], e["code"], e["reporter"], e["ts"]) for e in r["icmp_errors"]
                )
        assert got == errors, f"{pcap.name} {nf}: errors attached {got}, tshark {errors}"
    recs = by_nf["flowstats"]
    ours = {}
    for r in recs:
        if r["proto"] in ("icmp", "icmpv6"):
            ours.setdefault((r["proto"] == "icmpv6", frozenset((r["src"], r["dst"]))), []).append(
                (r["src"], r["packets"], r["icmp_type"], r["icmp_code"])
            )
    want: dict[Any, list[Any]] = {}
    for (v6, pair, _), c in convs.items():
        want.setdefault((v6, pair), []).append((c["first"], c["packets"], c["type"], c["code"]))
    assert {k: sorted(v) for k, v in ours.items()} == {k: sorted(v) for k, v in want.items()}
    return sum(map(len, errors.values())), len(convs)


def test_crafted_errors_and_echo_equal_tshark(tmp_path: Path) -> None:
    pcap = icmp_captures.write(tmp_path)
    n_err, n_conv = check(pcap, tmp_path / "out")
    print(f"\n[e2e-icmp] crafted: {n_err} errors attached, {n_conv} ICMP conversations")
    # what the capture was written to hold (tshark found it): 9 errors quoting known flows of
    # the 11, two IPv4 echo identifiers, an unanswered ping, one ICMPv6 echo conversation
    assert (n_err, n_conv) == (9, 4)


@pytest.mark.parametrize("name", sorted(shared_icmp_captures()))
def test_shared_captures_icmp_equal_tshark(name: str, tmp_path: Path) -> None:
    n_err, n_conv = check(TRACES / name, tmp_path / "out", shared_icmp_captures()[name])
    print(f"\n[e2e-icmp] {name}: {n_err} errors attached, {n_conv} ICMP conversations")
    assert n_conv > 0


def test_manifest_lists_icmp_captures() -> None:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not there")
    assert "arp-icmp-vlan.pcap" in shared_icmp_captures()
