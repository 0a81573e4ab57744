"""tshark as the reference for what a stack delivers per TCP/UDP flow direction.

For each capture, one tshark run (cached per process) prints

1. a field dump of every frame (`-T fields`): stream index, addresses, ports, flags, sequence
   numbers, lengths and the protocol path (`frame.protocols`). It enumerates the streams, fixes
   which direction is "c2s" (the direction of a flow's first packet), gives `handshake` and
   `complete` from the TCP flags, and shows how each stream is encapsulated;
2. tshark's conversation tables (`-z conv,tcp -z conv,udp`), a cross-check of the enumeration;
3. `-z follow,tcp,raw,N` and `-z follow,udp,raw,N` for N below 64 (a second run follows any
   further streams): the delivered bytes. Nothing here reassembles anything itself.

`reference_flows(pcap)` returns one `FlowDir` per flow direction with exactly the fields the
`streams` NF writes to flows.jsonl (minus `file`); `reference_streams(pcap)` returns the same
flows grouped per tshark stream with the data and what a comparison has to know about them
(gaps tshark filled with a marker, truncated frames, malformed frames, tshark's node names).

What tshark's `follow` does, and a comparison must allow for (Wireshark 4.0,
epan/dissectors/packet-tcp.c `follow_tcp_tap_listener` / `check_follow_fragments`):

- a capture gap that the peer acknowledged is replaced by the text
  "[N bytes missing in capture file]" plus a NUL, as if it were payload. `reference_*` strip
  these markers: `bytes`/`sha256` cover real payload only, and each marker becomes a `Gap`
  (position in the delivered bytes, N) in `Direction.gaps`;
- out-of-order data after a hole that no captured ACK covers is never printed at all
  (it stays in tshark's fragment list when the capture ends): in http-ooo-lost-rst-tlpw1.pcap
  about 2.5 KB of captured server data is in no output;
- overlapping and retransmitted data: the first copy seen wins, later copies only add bytes
  past the end already delivered;
- a snaplen-truncated segment contributes only its captured bytes, with no marker, while the
  next expected sequence number still advances by the full length (`Direction.truncated_frames`;
  a truncated segment that arrives out of order advances it by the captured length only);
- IPv4 fragments (reassembled before TCP/UDP see them): where fragments overlap, each byte
  comes from the covering fragment with the lowest offset (ties: the first to arrive), and
  fragments after the datagram completed are ignored (tests/support/captures.py ipv4_frag_overlap);
- UDP: every datagram's captured payload is appended, even when the UDP or IP length field
  says more (or less) was sent (see udp-bad-length-truncated.pcap);
- the first sequence number of a direction is taken from the first packet of that direction
  (SYN + 1 for a SYN): data captured before it (reordering at the start of a mid-stream flow)
  is dropped as "old";
- a stream is what tshark calls one (`tcp.stream` / `udp.stream`): a reused 4-tuple after a
  close becomes a new stream; VLAN tags are not part of the key;
- tshark's "Node 0" is the source of the stream's first packet, so it is the c2s side. Its
  address is `pinfo->src` after the whole frame was dissected: in a tunnel, the innermost IP
  address even for the outer UDP flow (mpls-over-udp.pcap). Addresses here come from the IP
  header that carries the TCP/UDP header instead.

tshark runs with `-n` and an empty personal configuration directory, so no user preference
changes what it reassembles.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from support import REPO_ROOT

REPO = REPO_ROOT
#: The shared captures, beside the repository (CI checks them out there too).
TRACES = REPO.parent / "shared" / "traces"

# ---------------------------------------------------------------------------------------------
# Which captures the tcp_ip stack (specs/stacks/tcp_ip.yaml) can be compared on
# ---------------------------------------------------------------------------------------------

#: Captures every TCP/UDP stream of which tshark sees directly on a path tcp_ip parses:
#: Ethernet (+ any 802.1Q/802.1ad tags), Linux SLL, BSD NULL or raw IP; IPv4 (fragments
#: reassembled) or IPv6 (hop-by-hop, routing, destination-options and fragment headers); then
#: TCP or UDP. The value says what the capture exercises and what a comparison must know.
#: `test_oracle.py` checks this against tshark's protocol paths.
ELIGIBLE: dict[str, str] = {
    "arp-cloudshark.pcap": "ARP and ICMP only: no TCP/UDP flow (the stack must report none)",
    "arp-icmp-vlan.pcap": "802.1Q ARP and ICMP only: no TCP/UDP flow (the stack must report none)",
    "http-ooo-lost-rst-tlpw1.pcap": (
        "out-of-order segments, capture gaps tshark marks with '[N bytes missing in capture"
        " file]' (see Direction.gaps), snaplen-truncated frames, final RST"
    ),
    "http-post-upload.pcap": "one HTTP POST; retransmissions and one out-of-order segment",
    "ipv4-frag-socks5-http.pcap": "TCP segments in IPv4 fragments (62 fragment frames)",
    "ipv4-frag-tcp-overlap-ooo-crafted.pcap": (
        "crafted overlapping, out-of-order IPv4 fragments carrying TCP: the bytes depend on the"
        " fragment overlap policy (tshark: the lowest offset wins). Neither stream has a"
        " handshake (one is a lone SYN, the data one starts mid-stream)"
    ),
    "ipv6-http-atomic-frag.pcap": (
        "IPv6 TCP behind hop-by-hop, routing, destination-options and atomic fragment headers;"
        " stream 0's first packet is the SYN-ACK, so its c2s side is the server"
    ),
    "ipv6-http-curl-localhost.pcap": "NULL link type, IPv6 loopback HTTP",
    "ipv6-http-gquic.pcap": "IPv6 TCP (mid-stream flows) and gQUIC over UDP",
    "mixed-android-mobile.pcap": (
        "real phone traffic: TCP/TLS (retransmissions, RSTs, half-open and mid-stream flows),"
        " DNS/DHCP/NTP and broadcast UDP (one-way: s2c delivers nothing), IPv6 UDP"
    ),
    "mpls-over-udp.pcap": (
        "MPLS-in-UDP (port 6635) carrying ICMP: tcp_ip does not decapsulate it, but there is"
        " no TCP/UDP inside, so the outer UDP flows (whose payload is the MPLS packet) are"
        " comparable; tshark's follow names the inner IP addresses as its nodes"
    ),
    "null-ipv6-http-connect-tls.pcap": "NULL link type, IPv6 HTTP CONNECT then TLS",
    "null-smtp-rset.pcap": "NULL link type, IPv4 SMTP",
    "pptp-control-tcp1723.pcap": "PPTP control connection: plain TCP (FIN retransmissions, RST)",
    "quic-handshake-null-ipv6.pcap": "NULL link type, QUIC over IPv6 UDP",
    "quic-handshake-truncated-null.pcap": (
        "NULL link type, QUIC over UDP with snaplen-truncated datagrams: tshark delivers the"
        " captured part of each"
    ),
    "quic-v1-chromium.pcap": "QUIC v1 over IPv4 UDP",
    "quic-v2-http3.pcap": "QUIC v2 over IPv4 UDP",
    "raw-ipv4-ipv6-http.pcap": "raw IP link type, IPv4 and IPv6 TCP (half-open, mid-stream), UDP",
    "sctp-http.pcap": "SCTP only: no TCP/UDP flow (tcp_ip stops at IP; the stack must report none)",
    "sctp-m3ua.pcap": "SCTP only: no TCP/UDP flow (tcp_ip stops at IP; the stack must report none)",
    "sll-dns2tcp-tls.pcap": "Linux SLL link type, TCP/TLS",
    "snaplen96-http.pcap": (
        "snaplen 96: tshark delivers the captured 30 bytes of each truncated segment and nothing"
        " for the rest, with no marker (Direction.truncated_frames)"
    ),
    "ssh-duplicate-segments.pcap": "SSH with 166 duplicated/retransmitted segments",
    "tcp-fast-open.pcap": "data on the SYN (TCP Fast Open): tshark delivers it",
    "tcp-handshake-reorder.pcap": (
        "the SYN-ACK is captured before the SYN: the first packet is the server's, so c2s is"
        " the server-to-client direction"
    ),
    "tcp-midstream-missing-syn.pcap": (
        "no client SYN: the flow starts at the SYN-ACK, so c2s is the server's direction and"
        " `handshake` is false"
    ),
    "tcp-options-sack-ts-ws.pcap": "handshake only (SYN/SYN-ACK with options): no payload",
    "tcp-overlap-partial-crafted.pcap": (
        "crafted partial overlap with different content inside 802.1Q: tshark keeps the first"
        " copy (overwrite: first)"
    ),
    "tcp-retransmissions.pcap": "many (spurious) retransmissions and overlapping segments",
    "tcp-rst-injection.pcap": "a RST/ACK injected before the SYN-ACK, then the connection goes on",
    "tcp-rst-with-data-crafted.pcap": "a RST carrying payload inside 802.1Q: tshark delivers it",
    "udp-bad-length-truncated.pcap": (
        "one datagram whose IPv4 total length (65028) and UDP length (65008) exceed the 1516"
        " bytes present: tshark delivers the 1488 bytes it has; a stack that checks the lengths"
        " drops the datagram"
    ),
    "vlan-http-syn-retransmit.pcap": (
        "one HTTP flow whose frames are partly 802.1Q-tagged, partly untagged (tshark keys"
        " streams without the VLAN); SYN retransmission"
    ),
}

#: Captures the tcp_ip stack cannot be compared on, and why. tcp_ip has no edge into any
#: tunnel: a flow inside one is invisible to it, while tshark decapsulates and reports it.
EXCLUDED: dict[str, str] = {
    "4in6-tcp-tls.pcap": (
        "IPv4-in-IPv6 (next header 4): tcp_ip has no ipv6->ip edge. Affected: TCP stream 0"
        " (TLS, 192.168.0.1:64455 -> 10.10.10.1:443, 1596 bytes), the only flow"
    ),
    "6in4-tcp-tls.pcap": (
        "IPv6-in-IPv4 (protocol 41): tcp_ip has no ip->ipv6 edge. Affected: every flow, all"
        " inside the tunnel: TCP streams 0-5 (IMAPS/HTTP/HTTPS; stream 0 exists only quoted in"
        " an ICMPv6 error) and UDP streams 0-1 (DNS)"
    ),
    "gre-ppp-ipfrag-crafted.pcap": (
        "GRE/PPP (IP protocol 47) carrying IPv4 fragments: tcp_ip stops at GRE. Affected: UDP"
        " stream 0 (1.1.1.1:11111 -> 2.2.2.2:9999, one 65507-byte datagram), the only flow"
    ),
    "gtp-u-http-outer-frag.pcap": (
        "GTP-U (UDP 2152) carrying IPv4/TCP: tcp_ip reports the outer UDP 2152 flow (GTP"
        " bytes, tshark's UDP stream 0) but cannot see TCP stream 0 (HTTP"
        " 10.131.47.185:1923 -> 79.101.110.141:80) inside it"
    ),
    "gtp-u-qinq-rtmp.pcap": (
        "QinQ + GTP-U carrying TCP/RTMP: TCP streams 1 and 2 are inside GTP, invisible to"
        " tcp_ip (it reports the outer UDP 2152 flows, UDP streams 0-1, instead); TCP stream 0"
        " (plain Ethernet/IPv4, port 1177 -> 1935) would be comparable on its own"
    ),
    "gtp-u-tls-anon.pcap": (
        "GTP-U carrying TCP/TLS: TCP stream 0 (192.168.147.177:58496 -> 151.121.193.160:443) is"
        " inside GTP, invisible to tcp_ip (outer UDP 2152 flow only)"
    ),
    "gtp-u-tls.pcap": (
        "GTP-U carrying TCP/TLS: TCP stream 0 (10.222.10.10:44960 -> 173.194.69.188:5228) is"
        " inside GTP, invisible to tcp_ip (outer UDP 2152 flow only)"
    ),
    "mpls-in-vlan-http.pcap": (
        "802.1Q + MPLS (ethertype 0x8847): tcp_ip has no vlan->mpls edge. Affected: TCP streams"
        " 1 and 2 (every frame MPLS-labelled); TCP stream 0 (plain 802.1Q, port 19244 -> 80)"
        " would be comparable on its own"
    ),
    "pptp-gre-ppp-udp-dns.pcap": (
        "802.1Q, IPv4-in-IPv6, GRE and PPP carrying UDP/DNS: tcp_ip has no ipv6->ip edge."
        " Affected: UDP stream 0 (DNS, 172.16.44.3:40768 -> 8.8.8.8:53), the only flow"
    ),
    "qinq-pppoe-tls.pcap": (
        "QinQ + PPPoE session (ethertype 0x8864) + PPP: tcp_ip has no PPPoE layer. Affected:"
        " TCP stream 0 (TLS, 1.1.1.1:20394 -> 2.2.2.2:443), the only flow"
    ),
    "vxlan-http.pcap": (
        "VXLAN (UDP 4789) carrying Ethernet/IPv4/TCP: tcp_ip reports the outer UDP 4789 flow"
        " (VXLAN bytes, UDP stream 0) but not TCP stream 0 (HTTP"
        " 172.16.11.201:40354 -> 54.86.237.188:80) inside it"
    ),
    "vxlan-ssh-aws-mirror.pcap": (
        "VXLAN from AWS traffic mirroring: TCP streams 0-3 (SSH to 172.31.0.238:22) and UDP"
        " streams 1, 4, 7, 10, 12, 15, 17, 20, 21 (NTP, DNS) are inside VXLAN, invisible to"
        " tcp_ip; it reports only the 13 outer UDP 4789 flows"
    ),
}

#: A TCP/UDP header on a path tcp_ip parses, as tshark writes `frame.protocols` up to it.
TCP_IP_PATH = re.compile(
    r"(?:eth:ethertype(?::vlan:ethertype)*|sll:ethertype(?::vlan:ethertype)?|null|raw)"
    r":(?:ip|ipv6(?::ipv6\.(?:hopopts|routing|dstopts|fraghdr))*)"
    r":(?:tcp|udp)"
)


def eligible_captures() -> list[Path]:
    """The captures in TRACES the tcp_ip stack is compared on (those of ELIGIBLE present)."""
    return [TRACES / name for name in sorted(ELIGIBLE) if (TRACES / name).is_file()]


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowDir:
    """One flow direction, with the fields of a `streams` NF line in flows.jsonl.

    `layer` and `proto` are both "tcp" or "udp" (in tcp_ip, the IPv6 layers are named tcp6 and
    udp6, so compare on `proto`). `src`/`dst`/`sport`/`dport` are this direction's sender and
    receiver; `dir` is "c2s" for the direction of the flow's first packet. `bytes`/`sha256` are
    the delivered payload, without tshark's gap markers. TCP only (None for UDP): `handshake`
    is a complete three-way handshake (SYN, SYN-ACK acknowledging it and any Fast Open data on
    it, ACK acknowledging the SYN-ACK, in any capture order); `complete` is SYN and SYN-ACK seen and a FIN or RST seen.
    Both directions of a flow carry the same `handshake`/`complete`.
    """

    layer: str
    proto: str
    src: str
    dst: str
    sport: int
    dport: int
    dir: str
    bytes: int
    sha256: str
    complete: bool | None = None
    handshake: bool | None = None

    @property
    def key(self) -> tuple[str, str, int, str, int]:
        """What identifies this direction in both outputs: (proto, src, sport, dst, dport)."""
        return (self.proto, self.src, self.sport, self.dst, self.dport)

    def record(self) -> dict:
        """The flows.jsonl object (without `file`); UDP records have no complete/handshake."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Gap:
    """A '[N bytes missing in capture file]' marker tshark put into a direction's output."""

    offset: int  # where in the delivered bytes (markers removed) the hole is
    missing: int  # N as tshark printed it


@dataclass(frozen=True)
class Direction:
    """One direction of a stream: its record, its data and what tshark did to produce it."""

    flow: FlowDir
    data: bytes = field(repr=False)
    gaps: tuple[Gap, ...] = ()
    packets: int = 0  # TCP/UDP packets sent in this direction
    wire_bytes: int = 0  # L4 payload the headers claim, summed over them (copies included)
    truncated_frames: int = 0  # frames with captured length < length on the wire
    #: TCP flags this direction sent: "syn" (without ACK), "synack", "fin", "rst", and
    #: "fin_acked" when the peer acknowledged a FIN of this direction
    sent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Stream:
    """A tshark stream (`tcp.stream` / `udp.stream` index) of one capture."""

    proto: str
    index: int
    first_frame: int
    frames: int
    c2s: Direction
    s2c: Direction
    nodes: tuple[str, str]  # tshark follow's "Node 0" / "Node 1" lines
    flags: frozenset[str]  # TCP: which of syn, synack, fin, rst were seen
    malformed_frames: int  # frames tshark flags as malformed (expert group Malformed)
    paths: frozenset[str]  # frame.protocols up to this stream's header, over its frames
    #: TCP: the first packet carries SYN or payload (tcp.yaml's create_if would create on it)
    first_creates: bool = True
    last_ts: int = 0  # time of the stream's last frame (ns)

    @property
    def directions(self) -> tuple[Direction, Direction]:
        return (self.c2s, self.s2c)

    @property
    def node_ports_match(self) -> bool:
        """tshark's Node 0/1 have the c2s sender's/receiver's ports. Node 0 is the first
        packet's source by construction, but tshark names it with the ports (and address) of
        the innermost layer of that frame: in a tunnel, the inner flow's."""
        ports = tuple(_node(n)[1] for n in self.nodes)
        return ports == (self.c2s.flow.sport, self.c2s.flow.dport)

    @property
    def node_addresses_match(self) -> bool:
        addrs = tuple(_node(n)[0] for n in self.nodes)
        return addrs == (self.c2s.flow.src, self.c2s.flow.dst)


class OracleError(RuntimeError):
    """tshark failed, or printed something this module does not understand."""


# ---------------------------------------------------------------------------------------------
# Running tshark
# ---------------------------------------------------------------------------------------------


def tshark_available() -> bool:
    return shutil.which("tshark") is not None


@functools.cache
def _config_dir() -> str:
    # An empty personal configuration: no user preference may change what tshark reassembles.
    path = tempfile.mkdtemp(prefix="rubikgen-tshark-")
    atexit.register(shutil.rmtree, path, True)
    return path


def _disk_key(exe: str, args: list[str]) -> str:
    """The content address of a tshark run: the executable (path, size, time) and the
    arguments, with the bytes of every file an argument names (`-r PATH`, `pref:PATH`)."""
    st = os.stat(exe)
    h = hashlib.sha256(f"{exe}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    for a in args:
        h.update(b"\0" + a.encode())
        for part in {a, *re.split(r"[:=]", a)}:
            if part.startswith("/") or os.sep in part or part.endswith((".pcap", ".pcapng")):
                f = Path(part)
                if f.is_file():
                    h.update(b"\0" + f.read_bytes())
    return h.hexdigest()


def _tshark(args: list[str]) -> str:
    """tshark's output for args; kept on disk under $RG_TSHARK_CACHE (set by tests/conftest.py)
    by content address, so the test processes (xdist workers, the serial run, later runs) ask
    tshark once per capture and question."""
    exe = shutil.which("tshark")
    if exe is None:
        raise OracleError("tshark is not installed (bash ci/setup.sh installs it)")
    cache = os.environ.get("RG_TSHARK_CACHE")
    entry = Path(cache) / _disk_key(exe, args) if cache else None
    if entry is not None and entry.is_file():
        return entry.read_text(encoding="utf-8")
    env = dict(os.environ, WIRESHARK_CONFIG_DIR=_config_dir(), LC_ALL="C")
    proc = subprocess.run([exe, "-n", *args], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise OracleError(f"tshark {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    if entry is not None:
        entry.parent.mkdir(parents=True, exist_ok=True)
        part = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
        part.write_text(proc.stdout, encoding="utf-8")
        os.replace(part, entry)  # whole or absent, for processes side by side
    return proc.stdout


@functools.cache
def tshark_version() -> str:
    return _tshark(["--version"]).splitlines()[0].strip()


# Pinned, although they are the defaults: reassembled IP datagrams carry the TCP/UDP headers.
_PREFS = ["-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE"]

_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "frame.protocols",
    "frame.len",
    "frame.cap_len",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "tcp.stream",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "udp.stream",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "_ws.expert.group",
)
_MALFORMED_GROUP = 0x07000000  # PI_MALFORMED


@dataclass
class _Hdr:
    """One TCP or UDP header of one frame, as the field dump shows it."""

    frame: int
    ts: int  # frame time, ns since the epoch
    proto: str
    index: int
    src: str
    dst: str
    sport: int
    dport: int
    path: str
    in_error: bool  # inside an ICMP error message: not a packet of the flow
    truncated: bool
    malformed: bool
    payload: int = 0
    flags: int = 0
    seq: int = 0
    ack: int = 0


def _split(value: str) -> list[str]:
    return value.split(",") if value else []


def _at(values: list[str], k: int, default: str) -> str:
    return values[k] if k < len(values) else default


def _epoch_ns(text: str) -> int:
    if not text:
        return 0  # no time (a pcapng Simple Packet Block)
    sec, _, frac = text.partition(".")
    return int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])


def _field_args() -> list[str]:
    args = ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for name in _FIELDS:
        args += ["-e", name]
    return args


def l4_headers(tokens: list[str]) -> Iterator[tuple[int, str, int, tuple[str, int] | None, bool]]:
    """The TCP/UDP headers of a `frame.protocols` path: (position in it, "tcp"/"udp", the
    header's occurrence among that protocol's fields, the IP header carrying it as ("ip" or
    "ipv6", its occurrence) or None, whether it is inside an ICMP error)."""
    seen = {"ip": 0, "ipv6": 0, "tcp": 0, "udp": 0}
    net: tuple[str, int] | None = None
    in_error = False
    for pos, tok in enumerate(tokens):
        if tok in ("icmp", "icmpv6"):
            in_error = True  # what follows an ICMP header is a quoted packet, if anything
        if tok in ("ip", "ipv6"):
            net = (tok, seen[tok])
            seen[tok] += 1
        if tok in ("tcp", "udp"):
            seen[tok] += 1
            yield pos, tok, seen[tok] - 1, net, in_error


def _headers(pcap: Path, lines: list[str]) -> list[_Hdr]:
    """The TCP/UDP headers in a field dump (one line per frame, all frames)."""
    out: list[_Hdr] = []
    for line in lines:
        if not line:
            continue
        cols = line.split("\t")
        if len(cols) != len(_FIELDS):
            raise OracleError(f"{pcap.name}: unexpected field line {line!r}")
        row = dict(zip(_FIELDS, cols, strict=True))
        frame = int(row["frame.number"])
        tokens = row["frame.protocols"].split(":")
        truncated = int(row["frame.cap_len"]) < int(row["frame.len"])
        malformed = any(int(g) == _MALFORMED_GROUP for g in _split(row["_ws.expert.group"]))
        addrs = {
            "ip": (_split(row["ip.src"]), _split(row["ip.dst"])),
            "ipv6": (_split(row["ipv6.src"]), _split(row["ipv6.dst"])),
        }
        values = {
            p: {k: _split(v) for k, v in row.items() if k.startswith(p + ".")}
            for p in ("tcp", "udp")
        }
        for pos, tok, k, net, in_error in l4_headers(tokens):
            v = values[tok]
            if k >= len(v[tok + ".stream"]) or net is None:
                continue  # a header tshark gave no stream (or no IP header) to
            srcs, dsts = addrs[net[0]]
            hdr = _Hdr(
                frame=frame,
                ts=_epoch_ns(row["frame.time_epoch"]),
                proto=tok,
                index=int(v[tok + ".stream"][k]),
                src=srcs[net[1]],
                dst=dsts[net[1]],
                sport=int(v[tok + ".srcport"][k]),
                dport=int(v[tok + ".dstport"][k]),
                path=":".join(tokens[: pos + 1]),
                in_error=in_error,
                truncated=truncated,
                malformed=malformed,
            )
            # A header quoted in an ICMP error may lack fields; those come after the real ones.
            if tok == "tcp":
                hdr.flags = int(_at(v["tcp.flags"], k, "0"), 16)
                hdr.seq = int(_at(v["tcp.seq_raw"], k, "0"))
                hdr.ack = int(_at(v["tcp.ack_raw"], k, "0"))
                hdr.payload = int(_at(v["tcp.len"], k, "0"))
            else:
                hdr.payload = max(int(_at(v["udp.length"], k, "8")) - 8, 0)
            out.append(hdr)
    return out


_FILTER = re.compile(r"Filter: (tcp|udp)\.stream eq (\d+)")
_MARKER = re.compile(rb"\[(-?\d+) bytes missing in capture file\]\x00")
_BATCH = 256  # follow specs per tshark run
_GUESS = 64  # streams per protocol followed in the same run as the field dump


@dataclass
class _Followed:
    nodes: tuple[str, str]
    data: tuple[bytearray, bytearray] = field(default_factory=lambda: (bytearray(), bytearray()))
    gaps: tuple[list[Gap], list[Gap]] = field(default_factory=lambda: ([], []))


def _follow(
    pcap: Path, specs: list[tuple[str, int]], out: dict[tuple[str, int], _Followed]
) -> None:
    for start in range(0, len(specs), _BATCH):
        args = ["-r", str(pcap), *_PREFS, "-q"]
        for proto, index in specs[start : start + _BATCH]:
            args += ["-z", f"follow,{proto},raw,{index}"]
        _parse_follow(_tshark(args), out)


def _parse_follow(text: str, out: dict[tuple[str, int], _Followed]) -> None:
    """Parse `-z follow,P,raw,N` blocks: a `Filter:` line naming the stream, `Node 0:` and
    `Node 1:` lines, then one hex line per record, node 1's indented by a tab, then `====`."""
    lines = iter(text.splitlines())
    for line in lines:
        m = _FILTER.fullmatch(line)
        if not m:
            continue
        node0, node1 = next(lines, ""), next(lines, "")
        if not (node0.startswith("Node 0: ") and node1.startswith("Node 1: ")):
            raise OracleError(f"follow output: no node lines after {line!r}")
        got = _Followed(nodes=(node0[8:], node1[8:]))
        for row in lines:
            if row.startswith("="):
                break
            if not row.strip():
                continue
            node = 1 if row.startswith("\t") else 0
            chunk = bytes.fromhex(row.strip())
            marker = _MARKER.fullmatch(chunk)
            if marker:  # tshark's gap marker is always a record of its own
                got.gaps[node].append(Gap(len(got.data[node]), int(marker[1])))
            else:
                got.data[node].extend(chunk)
        else:
            raise OracleError(f"follow output for {line!r} does not end")
        out[(m[1], int(m[2]))] = got


def _node(node: str) -> tuple[str, int]:
    """'10.0.0.1:80' or '[::1]:80' as (address, port); ':0' is follow's "no packet seen"."""
    addr, _, port = node.rpartition(":")
    return addr.removeprefix("[").removesuffix("]"), int(port or 0)


# ---------------------------------------------------------------------------------------------
# The reference
# ---------------------------------------------------------------------------------------------

_SYN, _ACK, _FIN, _RST = 0x02, 0x10, 0x01, 0x04
_MOD = 1 << 32


def _tcp_state(hdrs: list[_Hdr], c2s: tuple[str, int]) -> tuple[frozenset[str], bool, bool]:
    """Which of syn/synack/fin/rst were seen, whether the handshake is complete, and
    `complete` (SYN and SYN-ACK seen, and a FIN or a RST)."""
    syns, synacks, acks = set(), set(), set()
    seen: set[str] = set()
    for h in hdrs:
        side = (h.src, h.sport) == c2s
        if h.flags & _SYN and not h.flags & _ACK:
            syns.add((side, h.seq, h.payload))
            seen.add("syn")
        elif h.flags & _SYN:
            synacks.add((side, h.seq, h.ack))
            seen.add("synack")
        elif h.flags & _ACK and not h.flags & _RST:
            acks.add((side, h.ack))
        if h.flags & _FIN:
            seen.add("fin")
        if h.flags & _RST:
            seen.add("rst")
    # The SYN-ACK acknowledges the SYN, and any Fast Open data on it the server accepted.
    handshake = any(
        sa_side != side
        and (sa_ack - seq - 1) % _MOD <= syn_len
        and (side, (sa_seq + 1) % _MOD) in acks
        for side, seq, syn_len in syns
        for sa_side, sa_seq, sa_ack in synacks
    )
    complete = {"syn", "synack"} <= seen and bool({"fin", "rst"} & seen)
    return frozenset(seen), handshake, complete


def _sent(hdrs: list[_Hdr], peer: list[_Hdr]) -> frozenset[str]:
    out = set()
    fin_ends = set()
    for h in hdrs:
        if h.flags & _SYN:
            out.add("synack" if h.flags & _ACK else "syn")
        if h.flags & _FIN:
            out.add("fin")
            fin_ends.add((h.seq + bool(h.flags & _SYN) + h.payload + 1) % _MOD)
        if h.flags & _RST:
            out.add("rst")
    if any(p.flags & _ACK and p.ack in fin_ends for p in peer):
        out.add("fin_acked")
    return frozenset(out)


def _stream(pcap: Path, proto: str, index: int, hdrs: list[_Hdr], got: _Followed) -> Stream:
    real = [h for h in hdrs if not h.in_error] or hdrs
    first = min(real, key=lambda h: h.frame)
    c2s, s2c = (first.src, first.sport), (first.dst, first.dport)
    flags: frozenset[str] = frozenset()
    complete = handshake = None
    if proto == "tcp":
        flags, handshake, complete = _tcp_state(real, c2s)
    dirs = []
    for node, (src, dst, name) in enumerate([(c2s, s2c, "c2s"), (s2c, c2s, "s2c")]):
        mine = [h for h in real if (h.src, h.sport) == src and (h.dst, h.dport) == dst]
        if src == dst:  # a socket talking to itself: tshark calls it all node 0's
            mine = real if node == 0 else []
        data = bytes(got.data[node])
        flow = FlowDir(
            layer=proto,
            proto=proto,
            src=src[0],
            dst=dst[0],
            sport=src[1],
            dport=dst[1],
            dir=name,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            complete=complete,
            handshake=handshake,
        )
        dirs.append(
            Direction(
                flow=flow,
                data=data,
                gaps=tuple(got.gaps[node]),
                packets=len(mine),
                wire_bytes=sum(h.payload for h in mine),
                truncated_frames=sum(h.truncated for h in mine),
                sent=_sent(mine, [h for h in real if (h.src, h.sport) == dst])
                if proto == "tcp"
                else frozenset(),
            )
        )
    return Stream(
        proto=proto,
        index=index,
        first_frame=first.frame,
        frames=len({h.frame for h in hdrs}),
        c2s=dirs[0],
        s2c=dirs[1],
        nodes=got.nodes,
        flags=flags,
        malformed_frames=len({h.frame for h in hdrs if h.malformed}),
        paths=frozenset(h.path for h in hdrs),
        first_creates=proto != "tcp" or bool(first.flags & _SYN) or first.payload > 0,
        last_ts=max(h.ts for h in real),
    )


@dataclass(frozen=True)
class _Capture:
    streams: tuple[Stream, ...]
    conversations: tuple[tuple[str, tuple[str, int], tuple[str, int]], ...]
    times: tuple[int, ...]  # every frame's time (ns), in capture order


_CONV = re.compile(r"(TCP|UDP) Conversations")


def _conversations(lines: list[str]) -> tuple[tuple[str, tuple[str, int], tuple[str, int]], ...]:
    """The rows of `-z conv,tcp` / `-z conv,udp` tables: 'A:port  <-> B:port  counts...'."""
    out = []
    proto = None
    for line in lines:
        m = _CONV.fullmatch(line.strip())
        if m:
            proto = m[1].lower()
        elif line.startswith("="):
            proto = None
        elif proto and "<->" in line:
            a, _, b = line.split()[:3]
            out.append((proto, _node(a), _node(b)))
    return tuple(out)


@functools.cache
def _capture(pcap: str) -> _Capture:
    path = Path(pcap)
    # One run prints the field dump, then tshark's conversation tables, then follows streams
    # 0.._GUESS-1 of both protocols (following a stream that does not exist costs next to
    # nothing); more streams than that need a second run. tshark takes about 0.2 s to start,
    # far longer than it takes to read one of these captures.
    args = ["-r", pcap, *_PREFS, *_field_args(), "-z", "conv,tcp", "-z", "conv,udp"]
    for proto in ("tcp", "udp"):
        for i in range(_GUESS):
            args += ["-z", f"follow,{proto},raw,{i}"]
    lines = _tshark(args).splitlines()
    cut = next((n for n, line in enumerate(lines) if line.startswith("=")), len(lines))
    followed: dict[tuple[str, int], _Followed] = {}
    _parse_follow("\n".join(lines[cut:]), followed)
    by_stream: dict[tuple[str, int], list[_Hdr]] = {}
    for h in _headers(path, lines[:cut]):
        by_stream.setdefault((h.proto, h.index), []).append(h)
    specs = sorted(by_stream)
    _follow(path, [s for s in specs if s not in followed], followed)
    missing = [s for s in specs if s not in followed]
    if missing:
        raise OracleError(f"{path.name}: no follow output for {missing}")
    streams = tuple(_stream(path, p, i, by_stream[(p, i)], followed[(p, i)]) for p, i in specs)
    times = tuple(_epoch_ns(line.split("\t")[1]) for line in lines[:cut] if line)
    return _Capture(streams, _conversations(lines[cut:]), times)


def _key(pcap: Path | str) -> str:
    return str(Path(pcap).resolve())


def reference_streams(pcap: Path | str) -> tuple[Stream, ...]:
    """Every TCP then UDP stream tshark finds in `pcap`, in stream-index order (cached)."""
    return _capture(_key(pcap)).streams


def frame_times(pcap: Path | str) -> tuple[int, ...]:
    """Every frame's time in ns, in capture order (cached with reference_streams)."""
    return _capture(_key(pcap)).times


def reference_flows(pcap: Path | str) -> list[FlowDir]:
    """One record per direction (c2s, then s2c) of every TCP and UDP stream in `pcap`.

    Every stream is listed, including half-open ones and directions that delivered nothing
    (`bytes` 0): filter by `handshake`, `bytes` or `proto` as the comparison needs. Streams
    inside a tunnel are listed too (with their innermost addresses); `eligible_captures()`
    names the captures where the tcp_ip stack sees every stream.
    """
    return [d.flow for s in reference_streams(pcap) for d in s.directions]


def conversations(pcap: Path | str) -> tuple[tuple[str, tuple[str, int], tuple[str, int]], ...]:
    """tshark's conversation tables (`-z conv,tcp`, `-z conv,udp`): (proto, (addr, port),
    (addr, port)) per row. A conversation is keyed by addresses and ports only, so a reused
    4-tuple is one conversation but several streams."""
    return _capture(_key(pcap)).conversations


def encapsulations(pcap: Path | str) -> dict[tuple[str, int], frozenset[str]]:
    """For each (proto, stream index): the protocol paths (`frame.protocols` up to and
    including its TCP/UDP header) its frames show."""
    return {(s.proto, s.index): s.paths for s in reference_streams(pcap)}


def prefetch(pcaps: Iterable[Path | str], workers: int | None = None) -> None:
    """Fill the cache for several captures at once (tshark runs in parallel)."""
    todo = [_key(p) for p in pcaps]
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(_capture, todo))
