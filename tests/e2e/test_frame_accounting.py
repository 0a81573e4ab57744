"""Every frame tshark assigns to a TCP or UDP stream is counted on exactly one flow record, on
every capture in ../shared/traces and on the crafted tunnel captures, through the stock stack
that decodes it, at -O0 and at -O2; and every TCP connection ends the way RFC 9293 and Zeek's
conn_state documentation say.

Which stack. A capture the tcp_ip stack sees whole (`oracle.ELIGIBLE`) runs through tcp_ip;
the others through the stack of their tunnel (`TUNNELLED`: tcp_ip_tunnels for VXLAN, MPLS,
PPPoE, IP in IP and GRE/PPP, gtp for GTP-U, pptp for PPTP's enhanced GRE; some captures through
two, each for the streams it decodes). The crafted captures (tests/support/tunnel_captures.py) add what
no real capture carries: Teredo and AYIYA (tcp_ip_tunnels) and inner UDP in GTP-U (gtp).
`DECODES` says, per stack, which header paths (tshark's `frame.protocols` up to a TCP/UDP
header) it parses; `test_every_stream_has_a_stack` checks each stream of each capture has one.

The two build modes are the optimisation levels: -O0 (the plain per-layer pipeline) and -O2
(every middle-end pass), the pair tests/opt/test_differential.py holds equal. The default run takes
every case at -O2 and `O0_SAMPLE` (one capture per stack and per kind of tunnel) at -O0; the
whole matrix, every case at both levels plus tcp_ip_tunnels on every tcp_ip capture (it extends
tcp_ip, so it must count the same), is marked `full_matrix`:

    python3 -m pytest tests/e2e/test_frame_accounting.py -m full_matrix      # the rest of it
    python3 -m pytest tests/e2e/test_frame_accounting.py -m "full_matrix or not full_matrix"  # all

(tests/conftest.py leaves `full_matrix` tests out unless the `-m` expression names it.)

Frame accounting. tshark (the reference) gives per frame every TCP and UDP header it
dissected outside an ICMP error (a header quoted by an error is not a packet of the flow),
with its `tcp.stream` / `udp.stream`, the addresses of the IP header carrying it, flags and
lengths; in a tunnel a frame has several (the outer UDP flow of VXLAN or GTP-U and the inner
TCP/UDP one), and each stream is accounted for on its own: the innermost one and the outer
ones alike. Our records are matched to tshark's streams by protocol and endpoints; where
tshark has several streams for one pair of endpoints (a reused 4-tuple), a record belongs to
the stream whose frames' time span holds its first packet. Per stream and direction, the
packets of its records must add up to tshark's frames of it: a frame counted on no record
(a late ACK lost, a payload-less mid-stream flow missing) or on two makes them differ. A record
whose endpoints tshark has no stream for is a difference too. Bytes: each packet's TCP/UDP
header and payload, tshark's `tcp.hdr_len + tcp.len` / the IP payload of UDP (`ip.len -
ip.hdr_len`, the reassembled length of a fragmented datagram, `ipv6.plen`: `udp.length` may
claim more than was sent), where no frame of the stream was cut by the snap length or is
shorter than its IP header says (ours then counts what was captured) and no UDP datagram came
behind IPv6 extension headers. Where every frame has one TCP/UDP header, the same sums must
equal the `-z conv` tables' frames per direction (in a tunnel the tables name the outer flow
by the innermost addresses, so they are not used there).

SCTP. The SCTP captures (no TCP/UDP stream) run through the sctp stack as well: each SCTP
packet tshark assigns to an association (`sctp.assoc_index`) is counted once on that
association's chunk-layer record, packets and chunk bytes per direction; a packet tshark
assigns to none is named, by frame, in `SCTP_UNASSOCIATED` with the reason.

Inner UDP bytes. In GTP-U, Teredo and AYIYA the inner UDP conversations must deliver exactly
tshark's innermost `udp.payload` bytes per direction (`test_e2e_tunnels.udp_reference`; tshark's
`follow` doubles UDP inside UDP).

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
from typing import Any

import pytest
from support import REPO_ROOT, captures, tunnel_captures
from support.oracle import ELIGIBLE, TRACES, tshark_available
from support.oracle.tshark import TCP_IP_PATH, _tshark, l4_headers
from support.tunnels import _inner_udp_refs, compare_udp, udp_reference

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
STACKS = ROOT / "specs" / "stacks"
MODES = (0, 2)

_LINK = r"(?:eth:ethertype(?::vlan:ethertype)*|sll:ethertype(?::vlan:ethertype)?|null|raw)"
_IP6 = r"ipv6(?::ipv6\.(?:hopopts|routing|dstopts|fraghdr))*"
_NET = rf"(?:ip|{_IP6})"

#: stack -> the paths (tshark's frame.protocols up to a TCP/UDP header) of the headers it
#: parses; None: every one on the captures it runs on (tcp_ip_tunnels: tcp_ip plus its tunnels)
DECODES: dict[str, re.Pattern[str] | None] = {
    "tcp_ip": TCP_IP_PATH,
    "tcp_ip_tunnels": None,
    # outer UDP; TCP and UDP inside GTP-U (no plain TCP: ip1 has no edge to tcp)
    "gtp": re.compile(rf"{_LINK}:{_NET}:udp(?::gtp:{_NET}:(?:tcp|udp))?"),
    # the control connection; TCP and UDP in enhanced GRE/PPP; the outer IPv4 may be in IPv6
    "pptp": re.compile(rf"{_LINK}:(?:{_IP6}:)?ip:(?:tcp|gre:ppp:ip:(?:tcp|udp))"),
}

#: The captures not in oracle.ELIGIBLE, and the stacks they run through (MANIFEST.tsv's
#: stacks_covered); ELIGIBLE captures that carry a tunnel as well run through its stack too.
TUNNELLED: dict[str, tuple[str, ...]] = {
    "4in6-tcp-tls.pcap": ("tcp_ip_tunnels",),
    "6in4-tcp-tls.pcap": ("tcp_ip_tunnels",),
    "gre-ppp-ipfrag-crafted.pcap": ("tcp_ip_tunnels",),  # GRE version 0 PPP, not PPTP's
    "gtp-u-http-outer-frag.pcap": ("gtp",),
    "gtp-u-qinq-rtmp.pcap": ("gtp", "tcp_ip"),  # TCP stream 0 is plain Ethernet/IPv4
    "gtp-u-tls-anon.pcap": ("gtp",),
    "gtp-u-tls.pcap": ("gtp",),
    "mpls-in-vlan-http.pcap": ("tcp_ip_tunnels",),
    "mpls-over-udp.pcap": ("tcp_ip", "tcp_ip_tunnels"),  # MPLS in UDP 6635 carrying ICMP
    "pptp-control-tcp1723.pcap": ("tcp_ip", "pptp"),
    "pptp-gre-ppp-udp-dns.pcap": ("pptp",),
    "qinq-pppoe-tls.pcap": ("tcp_ip_tunnels",),
    "vxlan-http.pcap": ("tcp_ip_tunnels",),
    "vxlan-ssh-aws-mirror.pcap": ("tcp_ip_tunnels",),
}

#: crafted capture (tests/support/tunnel_captures.py) -> its stack
CRAFTED: dict[str, str] = {
    "teredo-auth-origin": "tcp_ip_tunnels",
    "ayiya-ipv6": "tcp_ip_tunnels",
    "ayiya-ipv4-over-ipv6": "tcp_ip_tunnels",
    **{name: "gtp" for name in tunnel_captures.GTP_WRAPS},
}


def real_captures() -> list[str]:
    return sorted(p.name for p in TRACES.glob("*.pcap")) if TRACES.is_dir() else []


def stacks_of(name: str) -> tuple[str, ...]:
    if name in CRAFTED:
        return (CRAFTED[name],)
    return TUNNELLED.get(name, ("tcp_ip",))


#: (capture, stack) pairs of the default run, and those only the full matrix adds
CASES = [(n, s) for n in real_captures() for s in stacks_of(n)] + [
    (n, s) for n, s in CRAFTED.items()
]
EXTRA = [(n, "tcp_ip_tunnels") for n in real_captures() if "tcp_ip" in stacks_of(n)
         and "tcp_ip_tunnels" not in stacks_of(n)]  # fmt: skip
#: the cases also run at -O0 by default: one per stack and per kind of encapsulation
O0_SAMPLE = {
    ("mixed-android-mobile.pcap", "tcp_ip"),  # real phone traffic: RSTs, half-open, mid-stream
    ("tcp-rst-injection.pcap", "tcp_ip"),
    ("vxlan-ssh-aws-mirror.pcap", "tcp_ip_tunnels"),  # UDP inside UDP
    ("6in4-tcp-tls.pcap", "tcp_ip_tunnels"),
    ("teredo-auth-origin", "tcp_ip_tunnels"),
    ("gtp-u-qinq-rtmp.pcap", "gtp"),
    ("gtp-u-inner-v6", "gtp"),
    ("pptp-gre-ppp-udp-dns.pcap", "pptp"),
}


def _params() -> list[Any]:
    out = []
    for mode in MODES:
        for name, stack in CASES + EXTRA:
            default = (name, stack) in CASES and (mode == 2 or (name, stack) in O0_SAMPLE)
            marks = [] if default else [pytest.mark.full_matrix]
            out.append(pytest.param((name, stack, mode), id=f"{name}-{stack}-O{mode}", marks=marks))
    return out


PARAMS = _params()

#: (capture, stack, "tcp N"/"udp N") -> why that stream's frames are not all counted. None
#: today.
EXCEPTIONS: dict[tuple[str, str, str], str] = {}

FIELDS = [
    "frame.number", "frame.time_epoch", "frame.protocols", "frame.len", "frame.cap_len",
    "tcp.stream", "udp.stream", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport",
    "tcp.flags", "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.hdr_len", "udp.length",
    "ip.len", "ip.hdr_len", "ipv6.plen", "ip.reassembled.length", "ip.frag_offset", "ip.flags.mf",
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
    paths: set[str] = field(default_factory=set)  # frame.protocols up to the header
    inner: bool = False  # a frame's header after its first TCP/UDP one (inside a tunnel)
    # sender, flags, seq, ack, TCP payload length
    pkts: list[tuple[Node, int, int, int, int]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.proto} {self.index}"


def _ns(t: str) -> int:
    sec, _, frac = t.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


@dataclass
class Capture:
    """tshark's streams of one capture, and whether any frame has two TCP/UDP headers."""

    streams: dict[tuple[str, int], TStream]
    nested: bool


@functools.cache
def tshark_streams(cap: Path) -> Capture:
    args = ["-r", str(cap), "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a"]
    args += ["-E", "aggregator=,", "-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE"]
    for f in FIELDS:
        args += ["-e", f]
    out: dict[tuple[str, int], TStream] = {}
    nested = False
    for line in _tshark(args).splitlines():
        row = dict(zip(FIELDS, line.split("\t"), strict=False))
        v = {k: (x.split(",") if x else []) for k, x in row.items()}
        tokens = row["frame.protocols"].split(":")
        t = _ns(row["frame.time_epoch"])
        l4 = 0
        for pos, tok, k, net, in_error in l4_headers(tokens):
            if in_error:
                break  # what follows is a packet quoted in an error message
            if net is None or k >= len(v[f"{tok}.stream"]):
                continue  # a header tshark gave no stream to
            l4 += 1
            a = (v[f"{net[0]}.src"][net[1]], int(v[f"{tok}.srcport"][k]))
            b = (v[f"{net[0]}.dst"][net[1]], int(v[f"{tok}.dstport"][k]))
            idx = int(v[f"{tok}.stream"][k])
            s = out.get((tok, idx))
            if s is None:
                s = out[(tok, idx)] = TStream(tok, idx, (a, b), first_ns=t)
            s.last_ns = t
            s.inner = s.inner or l4 > 1
            s.paths.add(":".join(tokens[: pos + 1]))
            s.frames[a] += 1
            _count_bytes(s, a, v, tok, k, net, "ipv6." in ":".join(tokens[:pos]))
            if row["frame.len"] != row["frame.cap_len"]:
                s.truncated = True
        nested = nested or l4 > 1
    return Capture(out, nested)


def _count_bytes(
    s: TStream, a: Node, v: dict[str, list[str]], tok: str, k: int, net: tuple[str, int],
    ext: bool,
) -> None:  # fmt: skip
    """The header's TCP/UDP bytes (header and payload) onto stream `s`, sender `a`."""
    if tok == "tcp":
        s.bytes[a] += int(v["tcp.hdr_len"][k]) + int(v["tcp.len"][k])
        s.pkts.append((a, int(v["tcp.flags"][k], 16), int(v["tcp.seq_raw"][k]),
                       int(v["tcp.ack_raw"][k]), int(v["tcp.len"][k])))  # fmt: skip
        return
    kind, i = net
    if kind == "ip":  # the datagram as IP delimits it (udp.length may claim more)
        frag = [
            x != "0" or y in ("1", "True")
            for x, y in zip(v["ip.frag_offset"], v["ip.flags.mf"], strict=True)
        ]
        if frag[i]:  # the datagram reassembled from fragments: their payloads
            s.bytes[a] += int(v["ip.reassembled.length"][sum(frag[:i])])
        else:
            s.bytes[a] += int(v["ip.len"][i]) - int(v["ip.hdr_len"][i])
            if int(v["ip.len"][i]) > int(v["frame.cap_len"][0]):
                s.truncated = True  # the IP header claims more than the frame holds
    elif ext:  # extension headers: plen counts them; not byte-compared
        s.truncated = True
    else:
        s.bytes[a] += int(v["ipv6.plen"][i])


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


@pytest.fixture(scope="session")
def tools() -> None:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")


@pytest.fixture(scope="session")
def binaries() -> dict[tuple[str, int], Path]:
    """(stack, level) -> the stack's binary, built on first use (in build/, where the stamp
    skips the compile while the specs and the runtime are unchanged)."""

    class Lazy(dict[tuple[str, int], Path]):
        def __missing__(self, key: tuple[str, int]) -> Path:
            stack, level = key
            out = ROOT / "build" / f"frames-{stack}-O{level}"
            self[key] = build(STACKS / f"{stack}.yaml", out, opt_level=level, quiet=True).binary
            return self[key]

    return Lazy()


@pytest.fixture(scope="session")
def capture_file(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> the capture: a real one in ../shared/traces or a crafted one, written once."""
    crafted_dir = tmp_path_factory.mktemp("frames-crafted")

    @functools.cache
    def get(name: str) -> Path:
        if name in CRAFTED:
            return tunnel_captures.write(name, crafted_dir)
        return TRACES / name

    return get


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


def decoded(stack: str, s: TStream) -> bool:
    """Does `stack` parse the headers of stream `s` (all of its paths)?"""
    pat = DECODES[stack]
    return pat is None or all(pat.fullmatch(p) for p in s.paths)


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


@dataclass
class Run:
    """One case: tshark's streams (those the stack decodes), our records, ours by stream."""

    name: str
    stack: str
    mode: int
    tmp: Path
    cap: Capture
    streams: dict[tuple[str, int], TStream]
    recs: list[dict]
    got: dict[str, list[dict]]


_RUNS: dict[tuple[str, str, int], Run] = {}


@pytest.fixture
def case(
    request: pytest.FixtureRequest,
    tools: None,
    binaries: Any,
    capture_file: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Run:
    """The case's run, once per session (the three tests below read the same records)."""
    key = request.param
    if key not in _RUNS:
        name, stack, mode = key
        path = capture_file(name)
        if not path.is_file():
            pytest.skip(f"{name} is not in {TRACES}")
        cap = tshark_streams(path)
        tmp = tmp_path_factory.mktemp("frames-run")
        recs = records(binaries[(stack, mode)], path, tmp)
        # tcp_ip_tunnels on a tcp_ip capture (EXTRA): accounted on what tcp_ip decodes
        as_ = stack if (name, stack) in CASES else "tcp_ip"
        streams = {k: s for k, s in cap.streams.items() if decoded(as_, s)}
        _RUNS[key] = Run(name, stack, mode, tmp, cap, streams, recs, assign(recs, cap.streams))
    return _RUNS[key]


#: running totals per stack, printed at the end (`-s` shows them): cases, records, frames, bytes
FIGURES: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])


def test_every_capture_is_classified() -> None:
    """A capture added to ../shared/traces must say which stack decodes it."""
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not there")
    missing = [n for n in real_captures() if n not in ELIGIBLE and n not in TUNNELLED]
    assert not missing, f"add these to ELIGIBLE or TUNNELLED: {missing}"


@pytest.mark.parametrize("name", real_captures() + sorted(CRAFTED))
def test_every_stream_has_a_stack(name: str, tools: None, capture_file: Any) -> None:
    """Each TCP/UDP stream of a capture is decoded by one of the stacks it runs through, so
    the accounting below leaves none out."""
    cap = tshark_streams(capture_file(name))
    left = [s.label for s in cap.streams.values()
            if not any(decoded(st, s) for st in stacks_of(name))]  # fmt: skip
    assert not left, f"{name}: no stack of {stacks_of(name)} decodes {left}"


@pytest.mark.parametrize("case", PARAMS, indirect=True)
def test_every_stream_frame_counted_once(case: Run) -> None:
    bad = []
    for label, rs in case.got.items():
        if label.startswith("?"):
            bad.append(f"{label}: records of ours tshark has no stream for: {rs}")
        elif not any(s.label == label for s in case.streams.values()):
            bad.append(f"{label}: tshark's stream, which {case.stack} should not decode")
    figures = FIGURES[case.stack]
    for s in case.streams.values():
        if (case.name, case.stack, s.label) in EXCEPTIONS:
            continue
        rs = case.got.get(s.label, [])
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
            else:
                figures[2] += frames[n]
                figures[3] += 0 if s.truncated else nbytes[n]
        figures[1] += len(rs)
    figures[0] += 1
    assert not bad, "\n".join(bad)
    if case.cap.nested or len(case.streams) != len(case.cap.streams):
        return  # the conversation tables name tunnelled flows by the innermost addresses
    for proto, rows in conv_tables(capture_path(case)).items():
        for a, b, to_a, to_b in rows:
            ours = [r for r in case.recs if r["proto"] == proto and set(_nodes_of(r)) == {a, b}]
            fa = sum(r["packets"][0] if _nodes_of(r)[0] == a else r["packets"][1] for r in ours)
            fb = sum(r["packets"][1] if _nodes_of(r)[0] == a else r["packets"][0] for r in ours)
            assert (fa, fb) == (to_b, to_a), (proto, a, b)


def capture_path(case: Run) -> Path:
    return TRACES / case.name  # crafted captures always have a tunnel (nested)


INNER_UDP = [p for p in PARAMS if p.values[0][0] in CRAFTED or p.values[0][1] == "gtp"]


@pytest.mark.parametrize("case", INNER_UDP, indirect=True)
def test_inner_udp_bytes_equal_tshark(case: Run, binaries: Any, capture_file: Any) -> None:
    """GTP-U, Teredo and AYIYA inner UDP, through the `streams` NF: each direction delivers
    exactly tshark's `udp.payload` bytes of that header (the innermost one of the frame), and
    the flow records above counted the same datagrams."""
    pcap = capture_file(case.name)
    out = case.tmp / "streams"
    argv = [str(binaries[(case.stack, case.mode)]), str(pcap), "--nf", "streams", "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    refs = _inner_udp_refs(pcap) if case.stack == "gtp" else udp_reference(pcap)
    inner = {s.index for s in case.streams.values() if s.proto == "udp" and s.inner}
    run = captures.Run(pcap, out, argv, proc.returncode, proc.stdout, proc.stderr, 0.0)
    problems, n_dirs, n_bytes = compare_udp(case.name, run, refs)
    print(f"\n[frames] {case.name} {case.stack}: inner UDP streams {sorted(inner)};"
          f" UDP {n_dirs} directions, {n_bytes} bytes equal tshark's")  # fmt: skip
    assert not problems, problems
    if case.name in CRAFTED:  # each carries one UDP exchange inside the tunnel
        assert len(inner) == 1 and inner <= set(refs), (inner, sorted(refs))
        FIGURES["inner udp " + case.stack][0] += 1
        FIGURES["inner udp " + case.stack][3] += sum(len(d) for d in refs[min(inner)].data.values())


#: SCTP captures (no TCP/UDP stream: tcp_ip reports none) through the sctp stack, whose chunk
#: layer keeps one record per association: its packets (SCTP packets, not chunks) and bytes
#: (the chunks: the SCTP packet without its 12-byte common header) per direction
SCTP = ("sctp-http.pcap", "sctp-m3ua.pcap")
#: (capture, frame) -> (the association tshark would put it in, why it puts it in none)
SCTP_UNASSOCIATED = {
    ("sctp-http.pcap", 65): (
        1,
        "tshark's SCTP dissector throws on this DATA packet (Malformed Packet, exception) before"
        " it assigns an association; its ports and verification tag are association 1's, and"
        " the stack counts it there",
    ),
}
SCTP_FIELDS = ["frame.number", "sctp.assoc_index", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
               "sctp.srcport", "sctp.dstport", "ip.len", "ip.hdr_len", "ipv6.plen"]  # fmt: skip


def sctp_associations(cap: Path) -> dict[int, TStream]:
    """tshark's SCTP associations (`sctp.assoc_index`): frames and chunk bytes per sender."""
    args = ["-r", str(cap), "-o", "sctp.association_index:TRUE", "-T", "fields"]
    args += ["-E", "separator=\t", "-E", "occurrence=f"]
    for f in SCTP_FIELDS:
        args += ["-e", f]
    out: dict[int, TStream] = {}
    for line in _tshark(args).splitlines():
        v = dict(zip(SCTP_FIELDS, line.split("\t"), strict=True))
        if not v["sctp.srcport"]:
            continue
        frame = int(v["frame.number"])
        if not v["sctp.assoc_index"]:
            assoc, _why = SCTP_UNASSOCIATED[(cap.name, frame)]  # a KeyError: a new one to explain
        else:
            assoc = int(v["sctp.assoc_index"])
            assert (cap.name, frame) not in SCTP_UNASSOCIATED, f"{cap.name} {frame}: now in {assoc}"
        a = (v["ip.src"] or v["ipv6.src"], int(v["sctp.srcport"]))
        b = (v["ip.dst"] or v["ipv6.dst"], int(v["sctp.dstport"]))
        s = out.setdefault(assoc, TStream("sctp", assoc, (a, b)))
        s.frames[a] += 1
        plen = int(v["ip.len"]) - int(v["ip.hdr_len"]) if v["ip.len"] else int(v["ipv6.plen"])
        s.bytes[a] += plen - 12
    return out


@pytest.mark.parametrize(
    ("name", "mode"),
    [pytest.param(n, m, id=f"{n}-O{m}", marks=[] if m == 2 or n == SCTP[0] else
                  [pytest.mark.full_matrix]) for m in MODES for n in SCTP],
)  # fmt: skip
def test_every_sctp_frame_counted_once(name: str, mode: int, tools: None, binaries: Any,
                                       tmp_path: Path) -> None:  # fmt: skip
    """Every SCTP packet tshark assigns to an association is counted on that association's
    record, packets and bytes per direction."""
    cap = TRACES / name
    if not cap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    assocs = sctp_associations(cap)
    proc = subprocess.run([binaries[("sctp", mode)], cap, "--nf", "flowstats", "--flowstats-all",
                           "--out", tmp_path], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "flowstats.jsonl").read_text().splitlines()]
    recs = [r for r in rows if r["proto"] == "sctp_chunk"]
    got: dict[int, list[dict]] = defaultdict(list)
    for r in recs:
        match = [s for s in assocs.values() if frozenset(s.nodes) == frozenset(_nodes_of(r))]
        assert len(match) == 1, f"record {r}: tshark associations {match}"
        got[match[0].index].append(r)
    bad = []
    for s in assocs.values():
        for n in s.nodes:
            frames = sum(r["packets"][_nodes_of(r).index(n)] for r in got[s.index])
            nbytes = sum(r["bytes"][_nodes_of(r).index(n)] for r in got[s.index])
            if (frames, nbytes) != (s.frames[n], s.bytes[n]):
                bad.append(f"assoc {s.index} from {n}: {frames} packets, {nbytes} bytes;"
                           f" tshark {s.frames[n]}, {s.bytes[n]}")  # fmt: skip
        FIGURES["sctp"][2] += sum(s.frames.values())
        FIGURES["sctp"][3] += sum(s.bytes.values())
    FIGURES["sctp"][0] += 1
    FIGURES["sctp"][1] += len(recs)
    assert not bad, "\n".join(bad)


def test_print_figures() -> None:
    """Not a check: the totals of the cases that ran before it (`-s` to see them)."""
    for stack, (n, recs, frames, nbytes) in sorted(FIGURES.items()):
        print(f"\n[frames] {stack}: {n} cases, {recs} records, {frames} frames, {nbytes} bytes")


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


@pytest.mark.parametrize("case", PARAMS, indirect=True)
def test_close_reason_of_every_tcp_connection(case: Run) -> None:
    bad = []
    for s in case.streams.values():
        if s.proto != "tcp" or not case.got.get(s.label):
            continue
        want = expected_reason(s)
        have = case.got[s.label][-1]["reason"]
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


@pytest.mark.parametrize("case", PARAMS, indirect=True)
def test_conn_state_and_history_of_every_tcp_connection(case: Run) -> None:
    bad = []
    for s in case.streams.values():
        rs = case.got.get(s.label)
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
