"""The dns.yaml / dns_rr.yaml specs and the apps NF's dns.jsonl against tshark's dns dissector:
on every capture of the manifest with UDP, per flow, the multiset of queries (id, name, type)
and of responses (id, name, type, rcode, the A/AAAA/CNAME/PTR/MX/TXT/NS data of every
section) equal tshark's, where tshark's path is one tcp_ip parses (tcp_ip_apps opens no
tunnel: the DNS inside 6in4, VXLAN and PPTP is checked to be absent instead). The binary is
built with ASan/UBSan, so the captures also run sanitized."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT
from support.dns import nf_dns, tshark_dns
from support.nf_run import nf_lines
from support.oracle.tshark import TRACES, tshark_available
from support.quic_captures import SANITIZER

from rubikgen.toolchain.build import build

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")


def _udp_captures() -> list[str]:
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return sorted(
        r["file"] for r in rows if "udp" in r["stacks_covered"] and (TRACES / r["file"]).is_file()
    )


CAPTURES = _udp_captures()


@pytest.fixture(scope="module")
def binary() -> Path:
    stack = REPO_ROOT / "specs" / "stacks" / "tcp_ip_apps.yaml"
    return build(stack, REPO_ROOT / "build" / "tcp_ip_apps-asan", sanitize=True, quiet=True).binary


def run_apps(binary: Path, pcap: Path, out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in nf_lines(binary, pcap, out, "apps", "dns.jsonl")]


@pytest.mark.parametrize("capture", CAPTURES)
def test_dns_equals_tshark(capture: str, binary: Path, tmp_path: Path) -> None:
    pcap = TRACES / capture
    want_q, want_r = tshark_dns(pcap)
    recs = run_apps(binary, pcap, tmp_path)
    got_q, got_r = nf_dns(recs)
    assert got_q == want_q
    assert got_r == want_r
    # what only tunnels carry is not reported (tcp_ip_apps opens none)
    all_q, all_r = tshark_dns(pcap, tunnels=True)
    for flow in set(all_q) | set(all_r):
        if flow not in want_q and flow not in want_r:
            assert flow not in got_q and flow not in got_r


def test_comparison_is_not_vacuous() -> None:
    if not CAPTURES:
        pytest.skip("no captures")
    queries = responses = 0
    types: set[str] = set()
    for c in CAPTURES:
        q, r = tshark_dns(TRACES / c)
        queries += sum(sum(x.values()) for x in q.values())
        responses += sum(sum(x.values()) for x in r.values())
        types |= {t for x in r.values() for resp in x for t, _ in resp[4]}
    assert queries >= 10 and responses >= 10
    assert {"A", "CNAME"} <= types


def test_records_carry_zeek_fields(binary: Path, tmp_path: Path) -> None:
    """A transaction with both messages: the flow's uid and Community ID, rtt, names."""
    pcap = TRACES / "raw-ipv4-ipv6-http.pcap"
    if not pcap.is_file():
        pytest.skip("capture missing")
    recs = run_apps(binary, pcap, tmp_path)
    both = [r for r in recs if r["queries"] and r["responses"]]
    assert both
    for r in both:
        assert r["community_id"].startswith("1:") and isinstance(r["uid"], int)
        assert r["rtt"] >= 0 and r["qtype_name"] == "A" and r["rcode_name"] == "NOERROR"
        assert r["TTLs"] and len(r["TTLs"]) == len(r["answers"])


def test_workers_and_flow_uids(binary: Path, tmp_path: Path) -> None:
    """With --workers 2 the lines are the same (each worker's transactions, one file), and in a
    chain with flowstats each line's uid and Community ID are its UDP flow's."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    if not pcap.is_file():
        pytest.skip("capture missing")
    one = run_apps(binary, pcap, tmp_path / "one")
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "apps", "--workers", "2", "--out", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    two = [json.loads(x) for x in (tmp_path / "two" / "dns.jsonl").read_text().splitlines()]

    def key(rec: dict[str, Any]) -> str:
        return json.dumps(
            {k: v for k, v in rec.items() if k not in ("uid", "worker")}, sort_keys=True
        )

    assert sorted(map(key, one)) == sorted(map(key, two)) and len(one) >= 20
    chain = tmp_path / "chain.yaml"
    chain.write_text("chain:\n  - nf: apps\n  - nf: flowstats\n")
    out = tmp_path / "chain"
    r = subprocess.run(
        [str(binary), str(pcap), "--chain", str(chain), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    flows = {}
    for line in (out / "flowstats.jsonl").read_text().splitlines():
        f = json.loads(line)
        if f["proto"] == "udp":
            flows[f["uid"]] = f
    recs = [json.loads(x) for x in (out / "dns.jsonl").read_text().splitlines()]
    assert recs
    for rec in recs:
        f = flows[rec["uid"]]
        ends = {(f["src"], f["sport"]), (f["dst"], f["dport"])}
        assert ends == {(rec["id.orig_h"], rec["id.orig_p"]), (rec["id.resp_h"], rec["id.resp_p"])}
        assert rec["community_id"] == f["community_id"]
