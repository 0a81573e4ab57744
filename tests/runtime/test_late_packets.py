"""Late packets of a closed TCP connection (issue 27): they belong to that connection, keep its
verdict inline, and a new connection on the same ports is judged afresh.

* On real captures, the reference is tshark: its `tcp.stream` frame sets, and the frame that
  closes each stream computed here from tshark's fields by RFC 9293 (the first RST; else the
  frame by which both FINs are acknowledged, 3.6). Every stream with frames after its close
  has exactly one flowstats record, whose packets per direction are the stream's frames per
  direction (so the late frames are counted on it), whose `late_packets` is the number of
  frames after the close; no other record has the stream's ports (no mid-stream flow), and the
  layer opened one instance per record (no new-instance event).
* Inline (`--write`, crafted packets written with scapy): a connection a handler dropped stays
  dropped for everything after the verdict, its FIN handshake and last ACK included, and so
  does a retransmission of its SYN; a SYN beyond the old window on the same ports (RFC 9293
  3.10.7.4) is a new connection, forwarded and judged again. A verdict given on a late packet
  (a handler on every packet, which late packets run) holds for the closed record's later
  late packets, and a new connection is judged afresh there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT
from support.oracle import TRACES, tshark_available
from support.tcpconn import CP, SP, Conn

from rubikgen.toolchain.build import build

scapy = pytest.importorskip("scapy.all")

ROOT = REPO_ROOT
STACKS = ROOT / "specs" / "stacks"
# (stack, capture): every capture of ../shared/traces with frames after a stream's close
# (checked below: each has at least one), but tcp-rst-injection's, whose data after the RST
# is a new mid-stream flow by design (tcp.yaml's linger reopen)
LATE = [
    ("tcp_ip", "tcp-retransmissions.pcap"),
    ("tcp_ip", "mixed-android-mobile.pcap"),
    ("tcp_ip", "http-post-upload.pcap"),
    ("tcp_ip", "ssh-duplicate-segments.pcap"),
    ("gtp", "gtp-u-tls-anon.pcap"),  # inner TCP of GTP-U
]
FIELDS = ["frame.number", "tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst"]
FIELDS += ["ipv6.dst", "tcp.dstport", "tcp.flags.ack", "tcp.flags.fin", "tcp.flags.reset"]
FIELDS += ["tcp.seq_raw", "tcp.ack_raw", "tcp.len"]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        s: build(STACKS / f"{s}.yaml", tmp_path_factory.mktemp(s), quiet=True).binary
        for s in sorted({s for s, _ in LATE})
    }


def tshark_streams(pcap: Path) -> dict[int, list[dict[str, str]]]:
    """tcp.stream -> its frames' fields (the innermost IP and TCP header: occurrence=l)."""
    argv = ["tshark", "-n", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "occurrence=l"]
    argv += ["-E", "separator=\t", *[x for f in FIELDS for x in ("-e", f)]]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    streams: dict[int, list[dict[str, str]]] = defaultdict(list)
    for line in out.splitlines():
        v = dict(zip(FIELDS, line.split("\t"), strict=True))
        streams[int(v["tcp.stream"])].append(v)
    return streams


def _on(v: dict[str, str], f: str) -> bool:
    return v[f] in ("1", "True")


def _end(v: dict[str, str], side: str) -> tuple[str, int]:
    return (v[f"ip.{side}"] or v[f"ipv6.{side}"], int(v[f"tcp.{side}port"]))


def close_frame(frames: list[dict[str, str]]) -> int | None:
    """The frame that closes the stream (RFC 9293): the first RST, or the frame by which each
    side's FIN is acknowledged by the other (an ACK at or past the FIN's sequence number + 1)."""
    fin_end: dict[tuple[str, int], int] = {}
    acked: set[tuple[str, int]] = set()
    for v in frames:
        if _on(v, "tcp.flags.reset"):
            return int(v["frame.number"])
        src = _end(v, "src")
        seq, ln, ack = int(v["tcp.seq_raw"]), int(v["tcp.len"] or 0), int(v["tcp.ack_raw"] or 0)
        for side, end in fin_end.items():
            if side != src and _on(v, "tcp.flags.ack") and (ack - end) % 2**32 < 2**31:
                acked.add(side)
        if _on(v, "tcp.flags.fin") and src not in fin_end:
            fin_end[src] = (seq + ln + 1) % 2**32
        if len(acked) == 2:
            return int(v["frame.number"])
    return None


def records(binary: Path, pcap: Path, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    argv = [str(binary), str(pcap), "--nf", "flowstats", "--out", str(out), "--summary", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    return [r for r in recs if r["proto"] == "tcp"], json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize(("stack", "name"), LATE, ids=[n for _, n in LATE])
def test_late_frames_are_counted_on_their_streams_one_record(
    binaries: dict[str, Path], tmp_path: Path, stack: str, name: str
) -> None:
    pcap = TRACES / name
    if not pcap.exists():
        pytest.skip(f"{pcap} missing")
    recs, summary = records(binaries[stack], pcap, tmp_path / "out")
    tcp_layers = [k for k in summary["layers"] if k in ("tcp", "tcp6")]
    assert sum(summary["layers"][k]["opened"] for k in tcp_layers) == len(recs)
    late_streams = 0
    for sid, frames in tshark_streams(pcap).items():
        closed = close_frame(frames)
        late = [v for v in frames if closed is not None and int(v["frame.number"]) > closed]
        if not late:
            continue
        late_streams += 1
        a, b = _end(frames[0], "src"), _end(frames[0], "dst")
        per_dir = {a: 0, b: 0}
        for v in frames:
            per_dir[_end(v, "src")] += 1
        mine = [r for r in recs if {(r["src"], r["sport"]), (r["dst"], r["dport"])} == {a, b}]
        assert len(mine) == 1, (sid, mine)  # the late frames opened no mid-stream flow
        r = mine[0]
        want = [per_dir[(r["src"], r["sport"])], per_dir[(r["dst"], r["dport"])]]
        assert r["packets"] == want, (sid, r, want)
        assert r["late_packets"] == len(late), (sid, r, [v["frame.number"] for v in late])
    assert late_streams > 0, "no stream with frames after its close"


# -- inline -------------------------------------------------------------------------------

HANDLERS = ROOT / "tests" / "specs" / "verdict" / "flow_verdicts_handlers.c"  # port 80: drop

# a handler on every TCP packet (late ones too): drops the flow of a late packet to port 81
LATE_STACK = """\
stack: late_judge
extends: {tcp_ip}
handlers:
  judge: {{layer: tcp, args: {{dport: header.dport}}}}
"""
LATE_C = """\
#include <stdio.h>

#include "late_judge_gen.h"

void judge(const struct judge_args *args, rg_hctx *h)
{
    if (h->flow != NULL && (h->flow->linger & RG_FL_CLOSED) != 0) {
        fprintf(stderr, "late %u\\n", (unsigned)args->dport);
        if (args->dport == 81) rg_verdict_give(h->verdict, h->flow, RG_DROP_FLOW);
    }
}
"""


def inline(binary: Path, tmp: Path, pkts: list[Any]) -> tuple[list[bool], str]:
    """Which of pkts the binary forwards (--write), and its stderr."""
    cap, out = tmp / "in.pcap", tmp / "out.pcap"
    scapy.wrpcap(str(cap), pkts)
    proc = subprocess.run(
        [str(binary), str(cap), "--nf", "none", "--write", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = [bytes(p) for p in scapy.rdpcap(str(out))]
    sent = [bytes(p) for p in pkts]
    kept: list[bool] = []
    i = 0
    for s in sent:  # the written frames are a subsequence of the input's
        kept.append(i < len(got) and got[i] == s)
        i += kept[-1]
    assert i == len(got), "frames written that were not sent"
    return kept, proc.stderr


@pytest.fixture(scope="module")
def dropping(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("drop80")
    return build(STACKS / "tcp_ip.yaml", d, handlers=HANDLERS, quiet=True).binary


def test_a_dropped_connection_stays_dropped_and_a_new_one_is_judged_afresh(
    dropping: Path, tmp_path: Path
) -> None:
    k = Conn()  # C:40000 -> S:80
    k.handshake()  # 0-2 forwarded
    k.c2s("PA", b"GET / HTTP/1.0\r\n\r\n")  # 3: its data: the handler drops the flow
    k.s2c("A")  # 4
    k.fin_close()  # 5-7: the FIN handshake and the last ACK
    k.c2s("A", dt=0.2, adv=False)  # 8: a late ACK again
    old_isn = k.c - 20  # SYN 1 + 18 bytes + FIN 1
    k.c, isn = old_isn, k.c
    k.c2s("S", dt=0.2, adv=False)  # 9: the old SYN retransmitted: the old connection's
    k.c = isn + 100_000  # a new connection, its ISN beyond the old window (TIME-WAIT)
    k.s += 5_000_000
    k.handshake()  # 10-12: forwarded
    k.c2s("PA", b"GET /2 HTTP/1.0\r\n\r\n")  # 13: judged again: dropped
    k.s2c("A")  # 14
    kept, err = inline(dropping, tmp_path, k.pkts)
    assert kept == [True] * 3 + [False] * 7 + [True] * 3 + [False] * 2, kept
    # the handler ran on each connection's first data, never on the dropped flow's later packets
    assert err.count(f"call tcp_data {CP} {SP} ") == 2, err


@pytest.fixture(scope="module")
def late_judge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("late_judge")
    spec = d / "late_judge.yaml"
    spec.write_text(LATE_STACK.format(tcp_ip=STACKS / "tcp_ip.yaml"), encoding="utf-8")
    hfile = d / "late_judge_handlers.c"
    hfile.write_text(LATE_C, encoding="utf-8")
    # the stock stack's own handlers: empty stubs
    argv = [sys.executable, "-m", "rubikgen", "stubs", str(spec), "--append", "--handlers"]
    subprocess.run([*argv, str(hfile)], cwd=ROOT, check=True, capture_output=True)
    return build(spec, d / "b", handlers=hfile, quiet=True).binary


def test_a_verdict_on_a_late_packet_holds_for_the_closed_record(
    late_judge: Path, tmp_path: Path
) -> None:
    pkts: list[Any] = []
    t = 1_700_000_000.0
    for port in (81, 82):  # 81: dropped at its first late packet; 82: never
        k = Conn(cport=40000 + port)
        k.pkts, k.t = pkts, t
        k.handshake()
        k.c2s("PA", b"hello")
        k.s2c("A")
        k.fin_close()  # closed by its last ACK: lingers
        k.c2s("A", dt=0.1, adv=False)  # late: judged by the handler
        k.s2c("A", dt=0.1, adv=False)  # late: its record's verdict (81) holds
        k.c += 100_000  # a new connection on the same ports (TIME-WAIT rule)
        k.s += 100_000
        k.handshake()
        k.c2s("PA", b"again")
        t = k.t + 1
    for p in pkts:  # the handler keys on the server port: 81 and 82 instead of SP
        tcp = p[scapy.TCP]
        if tcp.dport == SP:
            tcp.dport = tcp.sport - 40000
        else:
            tcp.sport = tcp.dport - 40000
    kept, err = inline(late_judge, tmp_path, pkts)
    # 81: its two late packets dropped, the new connection forwarded; 82: all forwarded
    assert kept == [True] * 8 + [False] * 2 + [True] * 4 + [True] * 14, kept
    # the handler saw each client's late ACK and 82's server ACK; 81's stopped at the verdict
    assert err.count("late 81\n") == 1 and err.count("late 82\n") == 1, err
    assert err.count("late 40082\n") == 1 and err.count("late ") == 3, err
