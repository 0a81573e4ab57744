"""Every frame tshark assigns to a TCP or UDP stream is counted on exactly one flow record, and
every TCP connection ends the way RFC 9293 and Zeek's conn_state documentation say.

For each capture the stock tcp_ip stack is compared on (`oracle.eligible_captures()`, as
tests/e2e/test_e2e_tshark.py), the stack is built at -O0 and at -O2 and run with the `flowstats`
NF; tshark (the reference) gives, per frame, its `tcp.stream` / `udp.stream`, endpoints, TCP
flags and lengths (`frame.protocols` must be a path tcp_ip parses: a UDP header quoted inside an
ICMP error is not a UDP packet), and its `-z conv,tcp` / `-z conv,udp` tables.

Frame accounting. Our records are matched to tshark's streams by protocol and endpoints; where
tshark has several streams for one pair of endpoints (a reused 4-tuple), a record belongs to
the stream whose frames' time span holds its first packet. Per stream and direction, the
packets of its records must add up to tshark's frames of it: a frame counted on no record
(a late ACK lost, a payload-less mid-stream flow missing) or on two makes them differ. The
same sums must equal the `-z conv` tables' frames per direction, and the records' bytes
(each packet's TCP/UDP header and payload) tshark's `tcp.hdr_len + tcp.len` / the IP payload
of UDP (`ip.len - ip.hdr_len`, `ipv6.plen`: `udp.length` may claim more than was sent) where no
frame of the stream was cut by the snap length or is shorter than its IP header says (ours
then counts what was captured) and no
UDP datagram came behind IPv6 extension headers.

Close reasons. For every TCP stream, the flags tshark reports per direction decide the
expected `reason` of the stream's last record: written here from RFC 9293 (3.10.7.3: a RST
acknowledging a SYN before any SYN-ACK, or a responder's RST before the handshake completed,
refuses the connection; a RST otherwise aborts it, originator's or responder's; a FIN each way,
each acknowledged, closes it; anything else is still open when the capture ends: flushed).

Connection state and history. For every TCP stream whose record we have, the expected Zeek
`history` and `conn_state` are derived here from tshark's flags, following Zeek's documentation
(the `conn.log` fields: history letters S a SYN without ACK, H a SYN-ACK, A a pure ACK, D
data, F a FIN, R a RST, upper case for the originator, each recorded once per side in order;
both from the packets up to the one that closed the connection (see close reasons: later
ones are late packets, counted but not processed); conn_state from each endpoint's state, as Zeek's `conn_state()` reads them: what the endpoint
sent decides it here — RESET after a RST, else CLOSED after a FIN, else ESTABLISHED once its
handshake packet was acknowledged, else SYN_SENT / SYN_ACK_SENT, else PARTIAL if it sent
anything, else INACTIVE), written independently of tcp.yaml's per-packet rules.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle import eligible_captures, tshark_available
from support.oracle.tshark import TCP_IP_PATH, _tshark

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
STACK = ROOT / "specs" / "stacks" / "tcp_ip.yaml"
CAPTURES = eligible_captures()
MODES = (0, 2)

#: (capture, "tcp N"/"udp N") -> why that stream's frames are not all counted. None today.
EXCEPTIONS: dict[tuple[str, str], str] = {}

FIELDS = [
    "frame.number", "frame.time_epoch", "frame.protocols", "frame.len", "frame.cap_len",
    "tcp.stream", "udp.stream", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport",
    "tcp.flags", "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.hdr_len", "udp.length",
    "ip.len", "ip.hdr_len", "ipv6.plen",
]  # fmt: skip

Node = tuple[str, int]


@dataclass
class TStream:
    """tshark's view of one stream: its frames per sender, flags, lengths, times."""

    proto: str
    index: int
    nodes: tuple[Node, Node] = (("", 0), ("", 0))  # first frame's sender, receiver
    frames: dict[Node, int] = field(default_factory=lambda: defaultdict(int))
    bytes: dict[Node, int] = field(default_factory=lambda: defaultdict(int))
    truncated: bool = False
    first_ns: int = 0
    last_ns: int = 0
    # sender, flags, seq, ack, TCP payload length
    pkts: list[tuple[Node, int, int, int, int]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.proto} {self.index}"


def _ns(t: str) -> int:
    sec, _, frac = t.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def _first(v: str) -> str:
    return v.split(",")[0] if v else ""


@functools.cache
def tshark_streams(cap: Path) -> dict[tuple[str, int], TStream]:
    args = ["-r", str(cap), "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    out: dict[tuple[str, int], TStream] = {}
    for line in _tshark(args).splitlines():
        v = dict(zip(FIELDS, line.split("\t"), strict=False))
        if not TCP_IP_PATH.match(v.get("frame.protocols", "")):
            continue  # e.g. a UDP header quoted by an ICMP error
        proto = "tcp" if v.get("tcp.stream") else "udp" if v.get("udp.stream") else None
        if proto is None:
            continue
        idx = int(_first(v[f"{proto}.stream"]))
        src = _first(v.get("ip.src") or v.get("ipv6.src", ""))
        dst = _first(v.get("ip.dst") or v.get("ipv6.dst", ""))
        a = (src, int(_first(v[f"{proto}.srcport"])))
        b = (dst, int(_first(v[f"{proto}.dstport"])))
        s = out.get((proto, idx))
        t = _ns(v["frame.time_epoch"])
        if s is None:
            s = out[(proto, idx)] = TStream(proto, idx, (a, b), first_ns=t)
        s.last_ns = t
        s.frames[a] += 1
        if proto == "tcp":
            s.bytes[a] += int(_first(v["tcp.hdr_len"]) or 0) + int(_first(v["tcp.len"]) or 0)
            flags = int(_first(v["tcp.flags"]), 16)
            s.pkts.append((a, flags, int(_first(v["tcp.seq_raw"]) or 0),
                           int(_first(v["tcp.ack_raw"]) or 0), int(_first(v["tcp.len"]) or 0)))  # fmt: skip
        elif v.get("ip.len"):  # the datagram as IP delimits it (udp.length may claim more)
            s.bytes[a] += int(_first(v["ip.len"])) - int(_first(v["ip.hdr_len"]))
        elif "ipv6." in v["frame.protocols"]:  # extension headers: not byte-compared
            s.truncated = True
        else:
            s.bytes[a] += int(_first(v["ipv6.plen"]) or 0)
        if v["frame.len"] != v["frame.cap_len"]:
            s.truncated = True
        if v.get("ip.len") and int(_first(v["ip.len"])) > int(v["frame.cap_len"]):
            s.truncated = True  # the IP header claims more than the frame holds
    return out


_ROW = re.compile(r"(\S+)\s+<->\s+(\S+)\s+(\d+)\s+(\S+ \S+)\s+(\d+)\s+(\S+ \S+)\s+(\d+)")


def _node(text: str) -> Node:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


@functools.cache
def conv_tables(cap: Path) -> dict[str, list[tuple[Node, Node, int, int]]]:
    """`-z conv,tcp|udp` rows: A, B, frames B->A ("<-"), frames A->B ("->")."""
    text = _tshark(["-r", str(cap), "-q", "-z", "conv,tcp", "-z", "conv,udp"])
    out: dict[str, list[tuple[Node, Node, int, int]]] = {"tcp": [], "udp": []}
    proto = None
    for line in text.splitlines():
        if line.startswith(("TCP Conversations", "UDP Conversations")):
            proto = line[:3].lower()
        m = _ROW.match(line.strip())
        if proto and m:
            out[proto].append((_node(m[1]), _node(m[2]), int(m[3]), int(m[5])))
    return out


@pytest.fixture(scope="module", params=MODES, ids=[f"O{m}" for m in MODES])
def binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    if not CAPTURES:
        pytest.skip("no captures in ../shared/traces")
    out = tmp_path_factory.mktemp(f"frames-O{request.param}")
    return build(STACK, out, opt_level=request.param, quiet=True).binary


def records(binary: Path, cap: Path, out: Path) -> list[dict]:
    proc = subprocess.run(
        [binary, cap, "--nf", "flowstats", "--flowstats-all", "--out", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    return [r for r in rows if r["proto"] in ("tcp", "udp")]


def _nodes_of(r: dict) -> tuple[Node, Node]:
    return (r["src"], r["sport"]), (r["dst"], r["dport"])


def assign(recs: list[dict], streams: dict[tuple[str, int], TStream]) -> dict[str, list[dict]]:
    """Our records by tshark stream label ("tcp N"); "? PROTO A B" for endpoints tshark has no
    stream of."""
    by_pair: dict[tuple[str, frozenset[Node]], list[TStream]] = defaultdict(list)
    for s in streams.values():
        by_pair[(s.proto, frozenset(s.nodes))].append(s)
    got: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: r["uid"]):
        a, b = _nodes_of(r)
        cands = by_pair.get((r["proto"], frozenset((a, b))), [])
        if not cands:
            got[f"? {r['proto']} {a} {b}"].append(r)
            continue
        pick = cands[0]
        for s in cands:  # a reused 4-tuple: the stream whose time span holds the record's start
            if s.first_ns <= r["first_ts"] <= s.last_ns:
                pick = s
                break
        got[pick.label].append(r)
    return got


def expected_reason(s: TStream) -> str:
    """How the stream's last connection ended, from its packets (RFC 9293), as records name
    it: after a reset, a segment with data (no SYN, no RST) starts a new mid-stream connection
    (the RST may have been injected and never reached the receiver); the packets between are
    late packets of the reset one."""
    while True:
        reason, k = ended(s)
        if reason not in ("rst_orig", "rst_resp", "rejected"):
            return reason
        nxt = [j for j in range(k + 1, len(s.pkts))
               if s.pkts[j][4] > 0 and not s.pkts[j][1] & (0x02 | 0x04)]  # fmt: skip
        if not nxt:
            return reason
        s = TStream(s.proto, s.index, s.nodes, pkts=s.pkts[nxt[0] :])


def ended(s: TStream) -> tuple[str, int]:
    """expected_reason and the index of the packet that ended the connection (the last one
    when it did not end): later ones are late packets, counted but not processed."""
    SYN, ACK, RST, FIN = 0x02, 0x10, 0x04, 0x01
    orig = None
    for sender, fl, _seq, _ack, _n in s.pkts:  # the SYN sender; a SYN-ACK's receiver
        if fl & SYN:
            orig = sender if not fl & ACK else next(n for n in s.nodes if n != sender)
            break
    if orig is None:  # mid-stream: the higher port
        a, b = s.nodes
        orig = a if a[1] >= b[1] else b
    fin_seq: dict[Node, int] = {}
    fin_acked: set[Node] = set()
    seen_synack = seen_ack_of_synack = False
    syn_seq = None
    for k, (sender, fl, seq, ack, n) in enumerate(s.pkts):
        other = next(n for n in s.nodes if n != sender)
        if fl & SYN and not fl & ACK and sender == orig:
            syn_seq = seq
        if fl & SYN and fl & ACK:
            seen_synack = True
        elif seen_synack and sender == orig and fl & ACK and not fl & RST:
            seen_ack_of_synack = True
        if fl & RST:
            before_handshake = syn_seq is not None and not seen_ack_of_synack
            if before_handshake and not seen_synack:
                # RFC 9293 3.10.7.3: in SYN-SENT a RST is acceptable only if it ACKs the SYN
                if not (fl & ACK and ack == (syn_seq + 1) % 2**32):
                    continue
            if sender != orig and before_handshake:
                return "rejected", k
            return ("rst_orig" if sender == orig else "rst_resp"), k
        if fl & ACK and other in fin_seq and ack == fin_seq[other]:
            fin_acked.add(other)
        if fl & FIN:
            # the FIN's number: seq + SYN + data; what acknowledges it is one past
            fin_seq[sender] = (seq + (1 if fl & SYN else 0) + n + 1) % 2**32
        if len(fin_acked) == 2:
            return "fin", k
    return "flushed", len(s.pkts) - 1


def _run(binary: Path, cap: Path, tmp: Path) -> tuple[dict, list[dict], dict[str, list[dict]]]:
    """tshark's streams, our records, and our records by tshark stream."""
    streams = tshark_streams(cap)
    recs = records(binary, cap, tmp)
    return streams, recs, assign(recs, streams)


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_every_stream_frame_counted_once(binary: Path, cap: Path, tmp_path: Path) -> None:
    streams, recs, got = _run(binary, cap, tmp_path)
    bad = []
    for label, rs in got.items():
        if label.startswith("?"):
            bad.append(f"{label}: records of ours tshark has no stream for: {rs}")
    for s in streams.values():
        if (cap.name, s.label) in EXCEPTIONS:
            continue
        rs = got.get(s.label, [])
        frames: dict[Node, int] = defaultdict(int)
        nbytes: dict[Node, int] = defaultdict(int)
        for r in rs:
            a, b = _nodes_of(r)
            frames[a] += r["packets"][0]
            frames[b] += r["packets"][1]
            nbytes[a] += r["bytes"][0]
            nbytes[b] += r["bytes"][1]
        for n in s.nodes:
            if frames[n] != s.frames[n]:
                bad.append(f"{s.label} from {n}: {frames[n]} packets counted, tshark {s.frames[n]}")
            elif not s.truncated and nbytes[n] != s.bytes[n]:
                bad.append(f"{s.label} from {n}: {nbytes[n]} bytes, tshark {s.bytes[n]}")
    assert not bad, "\n".join(bad)
    # tshark's conversation tables: the same frames per direction
    for proto, rows in conv_tables(cap).items():
        for a, b, to_a, to_b in rows:
            ours = [r for r in recs if r["proto"] == proto and set(_nodes_of(r)) == {a, b}]
            fa = sum(r["packets"][0] if _nodes_of(r)[0] == a else r["packets"][1] for r in ours)
            fb = sum(r["packets"][1] if _nodes_of(r)[0] == a else r["packets"][0] for r in ours)
            assert (fa, fb) == (to_b, to_a), (proto, a, b)


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_close_reason_of_every_tcp_connection(binary: Path, cap: Path, tmp_path: Path) -> None:
    streams, _recs, got = _run(binary, cap, tmp_path)
    bad = []
    for s in streams.values():
        if s.proto != "tcp" or not got.get(s.label):
            continue
        want = expected_reason(s)
        have = got[s.label][-1]["reason"]
        if have != want and not (want == "flushed" and have == "timeout"):
            bad.append(f"{s.label}: reason {have}, expected {want}")
    assert not bad, "\n".join(bad)


SYN, ACK, RST, FIN = 0x02, 0x10, 0x04, 0x01


def originator(s: TStream) -> Node:
    for sender, fl, _seq, _ack, _n in s.pkts:  # the SYN sender; a SYN-ACK's receiver
        if fl & SYN:
            return sender if not fl & ACK else next(n for n in s.nodes if n != sender)
    a, b = s.nodes  # mid-stream: the higher (ephemeral) port
    return a if a[1] >= b[1] else b


def zeek_history(s: TStream, orig: Node) -> str:
    out, seen = "", set()
    for sender, fl, _seq, _ack, n in s.pkts:
        letters = []
        if fl & SYN:
            letters.append("H" if fl & ACK else "S")
        if fl & ACK and not fl & (SYN | FIN | RST) and n == 0:
            letters.append("A")
        if n > 0:
            letters.append("D")
        if fl & FIN:
            letters.append("F")
        if fl & RST:
            letters.append("R")
        for c in letters:
            c = c if sender == orig else c.lower()
            if c not in seen:
                seen.add(c)
                out += c
    return out


def endpoint_state(s: TStream, who: Node, orig: Node) -> str:
    """Zeek's endpoint state from what `who` sent (and whether its handshake was answered)."""
    mine = [(fl, n) for sender, fl, _s, _a, n in s.pkts if sender == who]
    if not mine:
        return "INACTIVE"
    if any(fl & RST for fl, _ in mine):
        return "RESET"
    if any(fl & FIN for fl, _ in mine):
        return "CLOSED"
    opened = None
    for k, (sender, fl, _s, _a, _n) in enumerate(s.pkts):
        if sender == who and fl & SYN:
            opened = k
            break
    if opened is None:
        return "PARTIAL"  # sent, but never a SYN
    kind = "SYN_ACK_SENT" if s.pkts[opened][1] & ACK else "SYN_SENT"
    # established: the originator ACKed after the SYN-ACK; the responder with it, or by
    # sending an ACK of its own after its SYN-ACK
    later = s.pkts[opened + 1 :]
    synack_at = next((k for k, p in enumerate(s.pkts) if p[1] & SYN and p[1] & ACK), None)
    for k, (sender, fl, _s, _a, _n) in enumerate(later, opened + 1):
        plain_ack = fl & ACK and not fl & SYN
        if sender == who and plain_ack and (who != orig or synack_at is not None and k > synack_at):
            return "ESTABLISHED"
        if who != orig and sender == orig and plain_ack and kind == "SYN_ACK_SENT":
            return "ESTABLISHED"
    return kind


def zeek_conn_state(s: TStream, hist: str) -> str:
    orig = originator(s)
    resp = next(n for n in s.nodes if n != orig)
    os_, rs = endpoint_state(s, orig, orig), endpoint_state(s, resp, orig)
    o_inactive = os_ in ("INACTIVE", "PARTIAL")
    r_inactive = rs in ("INACTIVE", "PARTIAL")
    no_data = "D" not in hist and "d" not in hist
    if rs == "RESET":  # the responder sent a RST
        if os_ in ("SYN_SENT", "SYN_ACK_SENT") or (os_ == "RESET" and no_data):
            return "REJ"  # connection attempt rejected
        return "RSTRH" if o_inactive else "RSTR"
    if os_ == "RESET":  # the originator aborted
        if r_inactive:
            # originator sent a SYN followed by a RST, no SYN-ACK from the responder
            return "RSTOS0" if re.match(r"\^?S[^HAFGIQ]*R", hist) else "OTH"
        return "RSTO"
    if os_ == "CLOSED" and rs == "CLOSED":
        return "SF"  # normal establishment and termination
    if os_ == "CLOSED":  # close attempt by the originator
        return "SH" if r_inactive else "S2"
    if rs == "CLOSED":  # close attempt by the responder
        return "SHR" if o_inactive else "S3"
    if os_ == "SYN_SENT" and rs == "INACTIVE":
        return "S0"  # connection attempt seen, no reply
    if os_ == "ESTABLISHED" and rs == "ESTABLISHED":
        return "S1"  # established, not terminated
    return "OTH"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_conn_state_and_history_of_every_tcp_connection(
    binary: Path, cap: Path, tmp_path: Path
) -> None:
    streams, _recs, got = _run(binary, cap, tmp_path)
    bad = []
    for s in streams.values():
        rs = got.get(s.label)
        if s.proto != "tcp" or not rs or len(rs) != 1:
            continue  # a stream split into several records: each is its own connection
        r = rs[0]
        orig = originator(s)
        # the connection's packets up to its close (late packets change no state)
        s = TStream(s.proto, s.index, s.nodes, pkts=s.pkts[: ended(s)[1] + 1])
        if (
            (r["src"], r["sport"]) != orig
            and r["originator"] == "a"
            or ((r["dst"], r["dport"]) != orig and r["originator"] == "p")
        ):
            bad.append(f"{s.label}: originator {r['originator']}, expected {orig}")
        hist = zeek_history(s, orig)
        if r["history"] != hist:
            bad.append(f"{s.label}: history {r['history']}, expected {hist}")
        want = zeek_conn_state(s, hist)
        if r["conn_state"] != want:
            bad.append(f"{s.label}: conn_state {r['conn_state']}, expected {want}")
    assert not bad, "\n".join(bad)
