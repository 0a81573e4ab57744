"""Closed TCP connections linger (tcp.yaml `linger:`), close reasons and the originator, on
crafted packets (scapy), through the stock tcp_ip stack and its `flowstats` NF.

Each case writes a capture, runs the binary and reads flowstats.jsonl. Checked against what
RFC 9293 says the packets mean (not against the implementation):
* late packets after the accept state (the last ACK after a FIN handshake, a second RST, a FIN
  after a RST) are counted on the closed connection's record (`late_packets`, and in its
  packets per direction), open no new flow and raise no new instance (the summary's `opened`);
* a SYN for the same ports after a FIN close whose sequence number lies beyond the old
  connection's (RFC 9293 3.10.7.4, TIME-WAIT) is a new connection, a retransmission of the old
  SYN is not; after a RST any new SYN is;
* the linger lasts the spec's 5 s unless `--linger` says otherwise (`--linger 0`: none);
* `reason` is fin / rst_orig / rst_resp / rejected / timeout / evicted / flushed as the
  packets say; `originator` is the SYN sender, and for a flow picked up mid-stream without a
  SYN, the side with the higher port;
* payload-less mid-stream packets (ACKs, a FIN) create a flow (option midstream).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT

from rubikgen.toolchain.build import build

scapy = pytest.importorskip("scapy.all")
from support.tcpconn import SP, Conn, S  # noqa: E402  (after the importorskip)

IP, TCP, UDP, Ether, Raw = scapy.IP, scapy.TCP, scapy.UDP, scapy.Ether, scapy.Raw

ROOT = REPO_ROOT
STACK = ROOT / "specs" / "stacks" / "tcp_ip.yaml"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(STACK, tmp_path_factory.mktemp("linger"), quiet=True).binary


#: every stock NF that writes flow records, in one chain (docs/nf.md)
CHAIN = "chain:\n" + "".join(f"  - nf: {n}\n" for n in ("events", "streams", "flowexport"))
#: how each of them ends a flow, as flowstats writes it (rg_nf_end_fields)
END_FIELDS = ("reason", "late_packets", "originator", "conn_state", "history", "community_id")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def run(binary: Path, tmp: Path, pkts: list[Any], *args: str) -> tuple[list[dict], dict]:
    """flowstats' TCP records and the summary; the other flow-record NFs (events' close lines,
    streams' two lines per flow, flowexport's record) must say the same of each flow."""
    cap = tmp / "c.pcap"
    scapy.wrpcap(str(cap), sorted(pkts, key=lambda p: float(p.time)))
    out = tmp / "out"
    chain = tmp / "chain.yaml"
    chain.write_text(CHAIN)
    proc = subprocess.run(
        [binary, cap, "--nf", "flowstats", "--chain", chain, "--out", out, "--summary", "json"]
        + list(args),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    recs = [r for r in jsonl(out / "flowstats.jsonl") if r["proto"] == "tcp"]
    closes = {e["flow"]: e for e in jsonl(out / "events.jsonl") if e.get("event") == "close"}
    streams: dict[int, list[dict]] = {}
    for line in jsonl(out / "flows.jsonl"):
        streams.setdefault(line["uid"], []).append(line)
    exported = {
        (
            x["sourceIPAddress"],
            x["sourceTransportPort"],
            x["destinationTransportPort"],
            x["flowStartNanoseconds"],
        ): x
        for x in jsonl(out / "flows.ipfix.jsonl")
        if x["protocolIdentifier"] == 6
    }
    for r in recs:
        want = {k: r[k] for k in END_FIELDS}
        if r["close"] == "open":
            continue
        assert {k: closes[r["uid"]].get(k) for k in END_FIELDS} == want, closes[r["uid"]]
        for line in streams[r["uid"]]:
            assert {k: line.get(k) for k in END_FIELDS} == want, line
        x = exported[(r["src"], r["sport"], r["dport"], r["first_ts"])]
        assert {k: x.get(k) for k in END_FIELDS} == want, x
    assert len(exported) == len(recs)
    return recs, json.loads(proc.stdout.splitlines()[-1])


def one(recs: list[dict]) -> dict:
    assert len(recs) == 1, recs
    return recs[0]


def test_last_ack_and_retransmitted_fin_after_fin_close_are_late(
    binary: Path, tmp_path: Path
) -> None:
    k = Conn()
    k.handshake()
    k.c2s("PA", b"GET / HTTP/1.0\r\n\r\n")
    k.s2c("PA", b"HTTP/1.0 200 OK\r\n\r\n")
    k.fin_close()
    k.s2c("FA", adv=False, dt=0.2)  # the server did not see the last ACK: its FIN again
    k.s2c("FA", adv=False, dt=0.2)
    k.c2s("A", dt=0.01)  # and the client's ACK of it
    recs, summ = run(binary, tmp_path, k.pkts)
    r = one(recs)
    assert r["reason"] == "fin" and r["late_packets"] == 3, r
    assert r["packets"] == [6, 5] and r["originator"] == "a"
    assert r["complete"] is True
    assert summ["layers"]["tcp"]["opened"] == 1


def test_second_rst_and_fin_after_rst_are_late(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.handshake()
    k.c2s("RA")
    k.c2s("RA", adv=False)  # a second RST
    k.s2c("FA")  # a FIN after the RST
    recs, summ = run(binary, tmp_path, k.pkts)
    r = one(recs)
    assert r["reason"] == "rst_orig" and r["late_packets"] == 2, r
    assert r["packets"] == [4, 2]
    assert summ["layers"]["tcp"]["opened"] == 1

    k = Conn()
    k.handshake()
    k.s2c("RA")
    k.c2s("FA")
    recs, _ = run(binary, tmp_path, k.pkts)
    r = one(recs)
    assert r["reason"] == "rst_resp" and r["late_packets"] == 1, r


def test_data_after_a_rst_is_a_new_flow(binary: Path, tmp_path: Path) -> None:
    """RST-injection evasion: a RST the receiver never got (injected, dropped on the way) must
    not blind the box to what follows: data after a reset starts a mid-stream flow whose bytes
    are delivered; a payload-less ACK after it stays late."""
    k = Conn()
    k.handshake()
    k.c2s("PA", b"hello")
    k.s2c("RA")  # an in-window RST from the responder's side
    k.c2s("A")  # payload-less: late
    k.c2s("PA", b"still here")  # data: a new (mid-stream) flow
    k.s2c("A")
    recs, summ = run(binary, tmp_path, k.pkts)
    assert [r["reason"] for r in recs] == ["rst_resp", "flushed"], recs
    old, new = recs
    assert old["late_packets"] == 1 and old["packets"] == [4, 2], old
    # the new flow carries the data segment and the ACK after it: both TCP headers of 20 bytes
    assert sorted(new["packets"]) == [1, 1] and sum(new["bytes"]) == 20 + 10 + 20, new
    assert summ["layers"]["tcp"]["opened"] == 2


def test_rejected_and_the_retransmitted_syn(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.c2s("S")
    k.s2c("RA")  # RST, ACK of the SYN: connection refused (RFC 9293 3.10.7.3)
    k.c -= 1
    k.c2s("S", dt=0.5)  # the same SYN again (its ISN): a late packet, not a new connection
    recs, _ = run(binary, tmp_path, k.pkts)
    r = one(recs)
    assert r["reason"] == "rejected" and r["late_packets"] == 1, r


def test_time_wait_syn_replaces_the_closed_connection(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.handshake()
    k.fin_close()
    old_isn = k.c - 2  # ISN of the first connection: SYN and FIN took one number each
    # a new connection on the same ports, its ISN beyond the old window (TIME-WAIT rule)
    k.c += 100_000
    k.s += 7_000_000
    k.handshake()
    k.c2s("RA")
    recs, summ = run(binary, tmp_path, k.pkts)
    assert [r["reason"] for r in recs] == ["fin", "rst_orig"], recs
    assert [r["late_packets"] for r in recs] == [0, 0]
    assert summ["layers"]["tcp"]["opened"] == 2
    # the same capture with the old SYN retransmitted after the close: late, no new flow
    k2 = Conn()
    k2.handshake()
    k2.fin_close()
    k2.c = old_isn
    k2.c2s("S", dt=0.3)
    recs, summ = run(binary, tmp_path, k2.pkts)
    assert one(recs)["late_packets"] == 1
    assert summ["layers"]["tcp"]["opened"] == 1


def test_new_syn_after_rst_is_a_new_connection(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.handshake()
    k.s2c("RA")
    k.c = 123_456  # any other ISN (after a RST there is no TIME-WAIT)
    k.handshake()
    recs, _ = run(binary, tmp_path, k.pkts)
    assert [r["reason"] for r in recs] == ["rst_resp", "flushed"], recs


def test_linger_time_and_option(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.handshake()
    k.fin_close()
    k.c2s("A", adv=False, dt=6.0)  # 6 s after the close: past the spec's 5 s linger
    recs, _ = run(binary, tmp_path, k.pkts)
    assert [(r["reason"], r["late_packets"]) for r in recs] == [("fin", 0), ("flushed", 0)]
    recs, _ = run(binary, tmp_path, k.pkts, "--linger", "10")
    assert [(r["reason"], r["late_packets"]) for r in recs] == [("fin", 1)]
    k = Conn()
    k.handshake()
    k.fin_close()
    k.c2s("A", adv=False, dt=0.1)
    recs, _ = run(binary, tmp_path, k.pkts, "--linger", "0")
    assert [(r["reason"], r["late_packets"]) for r in recs] == [("fin", 0), ("flushed", 0)]


def test_timeout_evicted_flushed(binary: Path, tmp_path: Path) -> None:
    k = Conn()
    k.handshake()
    late = Ether() / IP(src="10.9.9.9", dst=S) / UDP(sport=1, dport=2)
    late.time = k.t + 400  # past tcp.yaml's 300 s timeout
    recs, _ = run(binary, tmp_path, [*k.pkts, late], "--max-clock-jump", "1000")
    assert one(recs)["reason"] == "timeout"
    a, b = Conn(cport=40001), Conn(cport=40002)
    a.handshake()
    b.t = a.t + 1
    b.handshake()
    recs, _ = run(binary, tmp_path, a.pkts + b.pkts, "--cap", "tcp=1")
    assert sorted((r["sport"], r["reason"]) for r in recs) == [
        (40001, "evicted"),
        (40002, "flushed"),
    ]


def test_payload_less_midstream_flow_and_its_originator(binary: Path, tmp_path: Path) -> None:
    k = Conn(cport=51234)
    # picked up mid-stream: the server's ACK comes first, then the client's FIN and so on
    k.s2c("A")
    k.c2s("A")
    k.c2s("FA")
    k.s2c("FA")
    k.c2s("A")
    recs, _ = run(binary, tmp_path, k.pkts)
    r = one(recs)
    assert (r["src"], r["sport"]) == (S, SP)  # side a: the first packet's sender
    assert r["originator"] == "p"  # the higher (ephemeral) port: the client
    assert r["packets"] == [2, 3] and r["reason"] == "fin"
    # a SYN seen later names its sender the originator whatever the ports
    k = Conn(cport=79)  # the client's port is the lower one
    k.s2c("A")
    k.c2s("S", adv=True)
    recs, _ = run(binary, tmp_path, k.pkts)
    assert one(recs)["originator"] == "p"
    k = Conn(cport=79)
    k.c2s("A")
    recs, _ = run(binary, tmp_path, k.pkts)
    assert one(recs)["originator"] == "p"  # port 80 > 79: the "server" side is the originator


def test_midstream_off_creates_no_payload_less_flow(tmp_path: Path) -> None:
    st = tmp_path / "s.yaml"
    st.write_text(
        STACK.read_text()
        .replace("../protocols/", str(STACK.parent.parent / "protocols") + "/")
        .replace(
            "tcp:  {protocol: "
            + str(STACK.parent.parent / "protocols")
            + "/tcp.yaml, args: {ip: ip}}",
            "tcp:  {protocol: "
            + str(STACK.parent.parent / "protocols")
            + "/tcp.yaml, args: {ip: ip}, options: {midstream: false}}",
        )
    )
    assert "midstream: false" in st.read_text()
    b = build(st, tmp_path / "b", quiet=True).binary
    k = Conn()
    k.s2c("A")
    k.c2s("PA", b"data")
    recs, _ = run(b, tmp_path, k.pkts)
    assert recs == []


def test_python_close_events_carry_the_record_fields(tmp_path: Path) -> None:
    bindings = pytest.importorskip("rubikgen.bindings")
    k = Conn()
    k.handshake()
    k.c2s("PA", b"hello")
    k.s2c("RA")
    k.c2s("A", adv=False)  # late: after the responder's RST
    cap = tmp_path / "c.pcap"
    scapy.wrpcap(str(cap), k.pkts)
    stack = bindings.Stack.build(str(STACK), str(tmp_path / "py"))
    closes = [e for e in stack.feed_pcap(str(cap)) if e.kind == "close" and e.layer == "tcp"]
    assert len(closes) == 1
    a = closes[0].args
    assert (a["reason"], a["late_packets"], a["originator"]) == ("rst_resp", 1, "a"), a
    # Zeek: established, then the responder's RST (RSTR); S h A D r, in order
    assert (a["conn_state"], a["history"]) == ("RSTR", "ShADr"), a
