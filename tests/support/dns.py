"""DNS messages as tshark's dns dissector reports them, and as the apps NF's dns.jsonl lines
say them, in one shape, so a test compares the two per flow.

A message is reduced to what both sides report: the transaction id, the first question's name
and type, and for a response its rcode and the data of its A, AAAA, CNAME, PTR, MX, TXT and NS
records (every section, as tshark's `dns.a` ... fields list them; TXT as its strings, MX as the
exchange's name). A flow is its two endpoints, unordered."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from support.oracle.tshark import TCP_IP_PATH, _tshark

Endpoint = tuple[str, int]
Flow = frozenset[Endpoint]
# (trans_id, qname, qtype)
Query = tuple[int, str, int]
# (trans_id, qname, qtype, rcode, sorted (type name, data) pairs)
Response = tuple[int, str, int, int, tuple[tuple[str, str], ...]]

#: the record types compared, by tshark's field for their data
FIELDS = {
    "A": "dns.a",
    "AAAA": "dns.aaaa",
    "CNAME": "dns.cname",
    "PTR": "dns.ptr.domain_name",
    "MX": "dns.mx.mail_exchange",
    "TXT": "dns.txt",
    "NS": "dns.ns",
}
_DNS_PATH = re.compile(TCP_IP_PATH.pattern + r":(?:dns|mdns)")


def _last(layers: Mapping[str, list[str]], k: str, d: str = "") -> str:
    v = layers.get(k)
    return v[-1] if v else d


def _first(layers: Mapping[str, list[str]], k: str, d: str = "") -> str:
    v = layers.get(k)
    return v[0] if v else d


def _name(text: str) -> str:
    return "" if text == "<Root>" else text


def tshark_dns(
    pcap: Path, *, tunnels: bool = False
) -> tuple[dict[Flow, Counter[Query]], dict[Flow, Counter[Response]]]:
    """Per flow, the queries and responses tshark sees over UDP; only on the paths tcp_ip
    parses (no tunnel) unless tunnels."""
    fields = ["frame.protocols", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "udp.srcport",
              "udp.dstport", "dns.id", "dns.flags.response", "dns.qry.name", "dns.qry.type",
              "dns.flags.rcode", *FIELDS.values()]  # fmt: skip
    args = ["-r", str(pcap), "-Y", "udp && (dns || mdns)", "-T", "json"]
    for f in fields:
        args += ["-e", f]
    text = _tshark(args)
    queries: dict[Flow, Counter[Query]] = {}
    responses: dict[Flow, Counter[Response]] = {}
    for pkt in json.loads(text or "[]"):
        layers: Mapping[str, list[str]] = pkt["_source"]["layers"]

        protos = _last(layers, "frame.protocols")
        if not tunnels and not _DNS_PATH.fullmatch(protos):
            continue
        src, dst = (
            _last(layers, "ip.src") or _last(layers, "ipv6.src"),
            _last(layers, "ip.dst") or _last(layers, "ipv6.dst"),
        )
        flow = frozenset(
            {(src, int(_last(layers, "udp.srcport"))), (dst, int(_last(layers, "udp.dstport")))}
        )
        tid = int(_first(layers, "dns.id"), 0)
        qname, qtype = (
            _name(_first(layers, "dns.qry.name")),
            int(_first(layers, "dns.qry.type", "0")),
        )
        if _first(layers, "dns.flags.response") in ("1", "True"):
            data = tuple(
                sorted((t, _name(v)) for t, f in FIELDS.items() for v in layers.get(f, []))
            )
            r = (tid, qname, qtype, int(_first(layers, "dns.flags.rcode", "0")), data)
            responses.setdefault(flow, Counter())[r] += 1
        else:
            queries.setdefault(flow, Counter())[(tid, qname, qtype)] += 1
    return queries, responses


def nf_dns(
    lines: Iterable[dict[str, Any]],
) -> tuple[dict[Flow, Counter[Query]], dict[Flow, Counter[Response]]]:
    """The same from the apps NF's dns.jsonl records (one per transaction): its query part
    counted `queries` times, its response part once when a response came."""
    queries: dict[Flow, Counter[Query]] = {}
    responses: dict[Flow, Counter[Response]] = {}
    for rec in lines:
        flow = frozenset(
            {(rec["id.orig_h"], rec["id.orig_p"]), (rec["id.resp_h"], rec["id.resp_p"])}
        )
        tid, qname, qtype = rec["trans_id"], rec["query"] or "", rec.get("qtype", 0)
        if rec["queries"]:
            queries.setdefault(flow, Counter())[(tid, qname, qtype)] += rec["queries"]
        if rec["responses"]:
            data: list[tuple[str, str]] = []
            for rr in rec["rrs"]:
                if rr["rrtype"] == "TXT":
                    data += [("TXT", s) for s in rr["txt"]]
                elif rr["rrtype"] in FIELDS:
                    data.append((rr["rrtype"], rr["rdata"]))
            r = (tid, qname, qtype, rec["rcode"], tuple(sorted(data)))
            responses.setdefault(flow, Counter())[r] += rec["responses"]
    return queries, responses
