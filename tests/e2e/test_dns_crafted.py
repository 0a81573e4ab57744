"""dns.yaml / dns_rr.yaml and the apps NF on generated DNS messages, against dnspython (PyPI's
reference DNS library) as builder and parser: random names, every record type the NF writes
(A, AAAA, CNAME, NS, PTR, MX, TXT, SRV, SOA) in the three sections, names compressed by
dnspython's writer, over IPv4 and IPv6; and hostile messages (pointer loops, names over 255
bytes, reserved label types, truncation, counts larger than the message) that dnspython
refuses too, run under ASan/UBSan without a finding, each marked `malformed` or cut short."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import wrpcap
from support import REPO_ROOT
from support.nf_run import nf_lines

from rubikgen.toolchain.build import build

SEED = 29
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ_"


@pytest.fixture(scope="module")
def binary() -> Path:
    stack = REPO_ROOT / "specs" / "stacks" / "tcp_ip_apps.yaml"
    return build(stack, REPO_ROOT / "build" / "tcp_ip_apps-asan", sanitize=True, quiet=True).binary


def _name(rng: random.Random, suffix: str) -> str:
    labels = [
        "".join(rng.choice(CHARS) for _ in range(rng.choice((1, 3, 8, 20, 63))))
        for _ in range(rng.randint(0, 3))
    ]
    return ".".join([*labels, suffix]) + "."


def _rdata(rng: random.Random, t: str, zone: str) -> str:
    match t:
        case "A":
            return ".".join(str(rng.randrange(256)) for _ in range(4))
        case "AAAA":
            return ":".join(f"{rng.randrange(65536):x}" for _ in range(8))
        case "CNAME" | "NS" | "PTR":
            return _name(rng, zone)
        case "MX":
            return f"{rng.randrange(100)} {_name(rng, zone)}"
        case "SRV":
            return (
                f"{rng.randrange(10)} {rng.randrange(10)} {rng.randrange(65536)} {_name(rng, zone)}"
            )
        case "SOA":
            return f"{_name(rng, zone)} {_name(rng, zone)} 1 2 3 4 5"
        case _:  # TXT: one to three strings
            return " ".join(
                '"' + "".join(rng.choice(CHARS + " =") for _ in range(rng.randrange(40))) + '"'
                for _ in range(rng.randint(1, 3))
            )


TYPES = ["A", "AAAA", "CNAME", "NS", "PTR", "MX", "TXT", "SRV", "SOA"]


def _messages(rng: random.Random, n: int) -> list[tuple[dns.message.Message, dns.message.Message]]:
    out = []
    for i in range(n):
        zone = rng.choice(("example.com", "b.example.org", "in-addr.arpa", "local"))
        qtype = rng.choice(TYPES)
        q = dns.message.make_query(_name(rng, zone), qtype, id=rng.randrange(65536))
        r = dns.message.make_response(q)
        r.set_rcode(rng.choice((0, 0, 0, 3, 2, 5)))
        for section, k in (
            (r.answer, rng.randint(0, 4)),
            (r.authority, rng.randint(0, 2)),
            (r.additional, rng.randint(0, 2)),
        ):
            # one record per owner and type in a section: dnspython's parse merges an RRset's
            # records (one TTL, wire order lost), which would hide what the wire said
            seen = set()
            for _ in range(k):
                t = rng.choice(TYPES)
                owner = (
                    q.question[0].name
                    if section is r.answer and rng.random() < 0.6
                    else dns.name.from_text(_name(rng, zone))
                )
                if (owner, t) in seen:
                    continue
                seen.add((owner, t))
                rs = dns.rrset.from_text(owner, rng.randrange(2**31), "IN", t, _rdata(rng, t, zone))
                section.append(rs)
        out.append((q, r))
        del i
    return out


def _pcap(path: Path, wires: list[tuple[bytes, bytes]], v6: bool) -> list[tuple[str, int]]:
    pkts: list[Packet] = []
    clients = []
    for i, (q, r) in enumerate(wires):
        cport = 20000 + i
        c, s = ("2001:db8::1", "2001:db8::53") if v6 else ("10.0.0.1", "10.0.0.53")
        ip = IPv6 if v6 else IP
        for src, dst, sport, dport, w in ((c, s, cport, 53, q), (s, c, 53, cport, r)):
            p = (
                Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                / ip(src=src, dst=dst)
                / UDP(sport=sport, dport=dport)
                / Raw(w)
            )
            p.time = 1_700_000_000 + i + (0.25 if src == s else 0)
            pkts.append(p)
        clients.append((c, cport))
    wrpcap(str(path), pkts)
    return clients


def run_apps(binary: Path, pcap: Path, out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in nf_lines(binary, pcap, out, "apps", "dns.jsonl")]


def _text(n: dns.name.Name) -> str:
    return "" if n == dns.name.root else n.to_text(omit_final_dot=True)


def _expected_rdata(rd: Any) -> str:
    t = dns.rdatatype.to_text(rd.rdtype)
    if t in ("A", "AAAA"):
        return str(rd.address)
    if t in ("CNAME", "NS", "PTR"):
        return _text(rd.target)
    if t == "MX":
        return _text(rd.exchange)
    if t == "SRV":
        return _text(rd.target)
    if t == "SOA":
        return _text(rd.mname)
    assert t == "TXT"
    return " ".join(s.decode("latin-1") for s in rd.strings)


def _expected_rrs(r: dns.message.Message) -> list[tuple[Any, ...]]:
    out = []
    for sec, rrsets in (
        ("answer", r.answer),
        ("authority", r.authority),
        ("additional", r.additional),
    ):
        for rs in rrsets:
            for rd in rs:
                out.append(
                    (
                        sec,
                        _text(rs.name),
                        dns.rdatatype.to_text(rd.rdtype),
                        rs.ttl,
                        _expected_rdata(rd),
                    )
                )
    return out


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_generated_messages_equal_dnspython(v6: bool, binary: Path, tmp_path: Path) -> None:
    rng = random.Random(SEED + v6)
    msgs = _messages(rng, 60)
    wires = [(q.to_wire(), r.to_wire()) for q, r in msgs]
    # dnspython's writer compresses: the comparison covers pointers
    assert sum(w.count(b"\xc0") for _, w in wires) > 100
    clients = _pcap(tmp_path / "gen.pcap", wires, v6)
    recs = {
        (r["id.orig_h"], r["id.orig_p"]): r
        for r in run_apps(binary, tmp_path / "gen.pcap", tmp_path / "out")
    }
    assert len(recs) == len(msgs)
    for (q, _), (_, rw), client in zip(msgs, wires, clients, strict=True):
        r = dns.message.from_wire(rw)  # the reference parse of the bytes on the wire
        rec = recs[client]
        assert rec["trans_id"] == q.id and rec["queries"] == 1 and rec["responses"] == 1
        assert rec["query"] == _text(q.question[0].name)
        assert rec["qtype"] == q.question[0].rdtype and rec["qtype_name"] == dns.rdatatype.to_text(
            q.question[0].rdtype
        )
        assert rec["rcode"] == r.rcode() and rec["rcode_name"] == dns.rcode.to_text(r.rcode())
        assert rec["RD"] and rec["AA"] == bool(r.flags & dns.flags.AA)
        got = [(x["section"], x["rrname"], x["rrtype"], x["ttl"], x["rdata"]) for x in rec["rrs"]]
        assert got == _expected_rrs(r)
        assert rec["answers"] == [x[4] for x in got if x[0] == "answer"]
        assert rec["TTLs"] == [x[3] for x in got if x[0] == "answer"]
        assert abs(rec["rtt"] - 0.25) < 1e-6 and not rec["malformed"]


def _hdr(qd: int, an: int = 0, tid: int = 0x1234, flags: int = 0x8180) -> bytes:
    return (
        tid.to_bytes(2, "big")
        + flags.to_bytes(2, "big")
        + qd.to_bytes(2, "big")
        + an.to_bytes(2, "big")
        + bytes(4)
    )


A_RR = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04"
HOSTILE = {
    # the question's name is a pointer to itself
    "self_loop": _hdr(1) + b"\xc0\x0c\x00\x01\x00\x01",
    # two pointers pointing at each other
    "two_loop": _hdr(1) + b"\xc0\x0e\xc0\x0c\x00\x01\x00\x01",
    # an answer whose name loops after a label
    "label_loop": _hdr(1, 1) + b"\x01a\x00\x00\x01\x00\x01" + b"\x01b\xc0\x13" + A_RR[2:],
    # 4 labels of 63: 257 bytes
    "too_long": _hdr(1) + (b"\x3f" + b"a" * 63) * 4 + b"\x00\x00\x01\x00\x01",
    # under 255 on the wire, over it through a pointer to itself's prefix
    "too_long_via_pointer": _hdr(1, 1)
    + (b"\x3f" + b"a" * 63) * 3
    + b"\x00\x00\x01\x00\x01"
    + b"\x3f"
    + b"b" * 63
    + b"\xc0\x0c"
    + A_RR[2:],
    # label type 01 (RFC 6891: extended labels, not used)
    "reserved_label": _hdr(1) + b"\x41a\x00\x00\x01\x00\x01",
    # a pointer past the end of the message
    "pointer_past_end": _hdr(1) + b"\xc3\xff\x00\x01\x00\x01",
    # cut in the middle of a name, of a record, of rdata; counts larger than the message
    "cut_name": _hdr(1) + b"\x07exam",
    "cut_record": _hdr(1, 1) + b"\x01a\x00\x00\x01\x00\x01" + A_RR[:9],
    "cut_rdata": _hdr(1, 1) + b"\x01a\x00\x00\x01\x00\x01" + A_RR[:-2],
    # 65535 answers announced, 3 there: the fourth name is past the end
    "huge_counts": _hdr(1, 0xFFFF) + b"\x01a\x00\x00\x01\x00\x01" + A_RR * 3,
    # a CNAME whose target loops
    "target_loop": _hdr(1, 1)
    + b"\x01a\x00\x00\x01\x00\x01"
    + b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x02\xc0\x23",
}
MALFORMED_NAME = {
    "self_loop",
    "two_loop",
    "label_loop",
    "too_long",
    "too_long_via_pointer",
    "reserved_label",
    "pointer_past_end",
    "cut_name",
    "huge_counts",
}


def test_hostile_messages(binary: Path, tmp_path: Path) -> None:
    names = sorted(HOSTILE)
    for n in names:  # the reference refuses every one of them
        with pytest.raises(dns.exception.DNSException):
            dns.message.from_wire(HOSTILE[n])
    pkts = [
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.53", dst="10.0.0.1")
        / UDP(sport=53, dport=30000 + i)
        / Raw(HOSTILE[n])
        for i, n in enumerate(names)
    ]
    wrpcap(str(tmp_path / "hostile.pcap"), pkts)
    recs = {
        r["id.orig_p"]: r for r in run_apps(binary, tmp_path / "hostile.pcap", tmp_path / "out")
    }
    assert len(recs) == len(names)
    for i, n in enumerate(names):
        rec = recs[30000 + i]
        assert rec["malformed"] == (n in MALFORMED_NAME), n
        if n in MALFORMED_NAME and n not in ("label_loop", "too_long_via_pointer", "huge_counts"):
            assert rec["query"] is None, n  # the question itself could not be read
    assert [x["rdata"] for x in recs[30000 + names.index("huge_counts")]["rrs"]] == ["1.2.3.4"] * 3
    assert recs[30000 + names.index("cut_rdata")]["rrs"] == []
    # a CNAME target that cannot be read: the record is kept, its data as RFC 3597 bytes
    (cname,) = recs[30000 + names.index("target_loop")]["rrs"]
    assert cname["rrtype"] == "CNAME" and cname["rdata"] == "\\# 2 c023"
