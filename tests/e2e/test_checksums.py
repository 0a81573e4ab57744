"""`--checksums`: the checksums the stock specs declare, verified on input, against tshark.

For every real capture a stock stack parses and a few crafted with scapy, the binary's
per-layer `checksum_bad` counts (summed per protocol: ip, tcp, udp, sctp) must equal the number
of headers tshark calls bad with its checks on (`ip.check_checksum`, `tcp.check_checksum`,
`udp.check_checksum`, `sctp.checksum:CRC-32C`): status 0 of `PROTO.checksum.status`, counted per
occurrence so that tunnels count each layer. Without `--checksums` nothing is counted.
"""

from __future__ import annotations

import json
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.captures import REPO, rubikgen_command
from support.oracle import TRACES, tshark_available

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")

PROTOS = ("ip", "tcp", "udp", "sctp")
TSHARK_CHECKS = [
    *("-o", "tcp.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"),
    *("-o", "ip.check_checksum:TRUE", "-o", "sctp.checksum:CRC-32C"),
]

# capture -> the stack that parses it (the others: tcp_ip)
STACK_OF = {
    "6in4-tcp-tls.pcap": "tcp_ip_tunnels",
    "4in6-tcp-tls.pcap": "tcp_ip_tunnels",
    "mpls-in-vlan-http.pcap": "tcp_ip_tunnels",
    "mpls-over-udp.pcap": "tcp_ip_tunnels",
    "qinq-pppoe-tls.pcap": "tcp_ip_tunnels",
    "vxlan-http.pcap": "tcp_ip_tunnels",
    "vxlan-ssh-aws-mirror.pcap": "tcp_ip_tunnels",
    "gre-ppp-ipfrag-crafted.pcap": "tcp_ip_tunnels",
    "gtp-u-http-outer-frag.pcap": "gtp",
    "gtp-u-qinq-rtmp.pcap": "gtp",
    "gtp-u-tls-anon.pcap": "gtp",
    "gtp-u-tls.pcap": "gtp",
    "sctp-http.pcap": "sctp",
    "sctp-m3ua.pcap": "sctp",
}

# (capture, protocol) -> (what tshark counts more, why)
EXCEPTIONS: dict[tuple[str, str], tuple[int, str]] = {
    ("6in4-tcp-tls.pcap", "tcp"): (
        1,
        "frame 45: a TCP header quoted inside an ICMPv6 Packet Too Big error, which tshark "
        "dissects and the stack (no ICMPv6 layer) does not parse",
    ),
    ("qinq-pppoe-tls.pcap", "tcp"): (
        6,
        "IPv4 total_len (46) exceeds the 40 bytes the PPPoE frame holds: the stack cannot tell "
        "this from a capture cut by its snap length (it sees no wire length) and leaves the "
        "segment unverified, as tshark does for cut frames; tshark verifies what is there",
    ),
}


@pytest.fixture(scope="session")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, str]]]:
    """stack -> (binary, layer -> protocol name): one Compilation per stack gives both (the
    optimised program is what the binary was generated from; generating it twice took longer
    than the compile)."""
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import build_compilation

    out: dict[str, tuple[Path, dict[str, str]]] = {}
    for stack in ("tcp_ip", "tcp_ip_tunnels", "gtp", "sctp"):
        comp = Compilation(str(REPO / "specs" / "stacks" / f"{stack}.yaml"))
        binary = build_compilation(comp, tmp_path_factory.mktemp(f"csum-{stack}"), quiet=True)
        protos = {n: lir.desc.protocol for n, lir in comp.program.layers.items() if lir.desc}
        out[stack] = (binary.binary, protos)
    return out


def ours(binary: Path, protos: dict[str, str], pcap: Path, *flags: str) -> Counter[str]:
    argv = [str(binary), str(pcap), "--nf", "count", "--summary", "json", *flags]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    summary = json.loads(proc.stdout)
    got: Counter[str] = Counter()
    for layer, n in summary.get("checksum_bad", {}).items():
        got[protos[layer]] += n
    return got


def tshark_bad(pcap: Path) -> Counter[str]:
    fields = [x for p in PROTOS for x in ("-e", f"{p}.checksum.status")]
    argv = ["tshark", "-n", "-r", str(pcap), *TSHARK_CHECKS, "-T", "fields", *fields]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    bad: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        for p, col in zip(PROTOS, line.split("\t"), strict=False):
            bad[p] += col.split(",").count("0")
    return bad


REAL = sorted(p.name for p in TRACES.glob("*.pcap")) if TRACES.is_dir() else []


@pytest.mark.skipif(not REAL, reason=f"no captures in {TRACES}")
@pytest.mark.parametrize("name", REAL)
def test_real_capture_against_tshark(name: str, binaries: dict) -> None:
    binary, protos = binaries[STACK_OF.get(name, "tcp_ip")]
    pcap = TRACES / name
    got, want = ours(binary, protos, pcap, "--checksums"), tshark_bad(pcap)
    for p in PROTOS:
        extra, _why = EXCEPTIONS.get((name, p), (0, ""))
        assert got[p] + extra == want[p], f"{name} {p}: ours {got[p]}, tshark {want[p]}"


def test_off_by_default(binaries: dict) -> None:
    binary, protos = binaries["tcp_ip"]
    pcap = TRACES / "null-smtp-rset.pcap"
    if not pcap.exists():
        pytest.skip("capture missing")
    assert sum(ours(binary, protos, pcap).values()) == 0
    assert ours(binary, protos, pcap, "--checksums")["ip"] > 0  # the capture has bad ones


# ---------------------------------------------------------------------------------------------
# crafted with scapy: one bad checksum of each kind among good ones
# ---------------------------------------------------------------------------------------------


def crafted(path: Path) -> Path:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.layers.sctp import SCTP, SCTPChunkData
    from scapy.utils import wrpcap

    def eth(p):  # type: ignore[no-untyped-def]
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p

    v4 = IP(src="10.0.0.1", dst="10.0.0.2")
    v6 = IPv6(src="2001:db8::1", dst="2001:db8::2")
    frames = [
        eth(v4 / TCP(sport=1234, dport=80, flags="S", seq=1)),  # good
        eth(IP(src="10.0.0.1", dst="10.0.0.2", chksum=0x1234) / TCP(sport=1, dport=2)),  # bad ip
        eth(v4 / TCP(sport=1234, dport=80, flags="A", chksum=0xBEEF) / b"data"),  # bad tcp
        eth(v4 / UDP(sport=53, dport=5353, chksum=0) / b"no checksum"),  # none: not bad
        eth(v4 / UDP(sport=53, dport=5353, chksum=0x1111) / b"bad"),  # bad udp
        eth(v4 / UDP(sport=53, dport=5353) / b"odd length!"),  # good, odd length
        eth(v6 / TCP(sport=4321, dport=443, flags="S")),  # good
        eth(v6 / TCP(sport=4321, dport=443, flags="A", chksum=0x0001) / b"x"),  # bad tcp6
        eth(v6 / UDP(sport=9, dport=9, chksum=0x2222) / b"bad6"),  # bad udp6
        eth(v4 / SCTP(sport=2905, dport=2905, tag=7) / SCTPChunkData(data=b"m3ua")),  # good
        eth(v4 / SCTP(sport=2905, dport=2905, tag=7, chksum=5) / SCTPChunkData(data=b"x")),
    ]
    wrpcap(str(path), frames)
    return path


def test_crafted_against_tshark(binaries: dict, tmp_path: Path) -> None:
    pcap = crafted(tmp_path / "csum.pcap")
    want = tshark_bad(pcap)
    assert want == Counter({"ip": 1, "tcp": 2, "udp": 2, "sctp": 1})  # what was crafted
    got: Counter[str] = Counter()
    for stack in ("tcp_ip", "sctp"):
        binary, protos = binaries[stack]
        c = ours(binary, protos, pcap, "--checksums")
        for p in ("ip", "tcp", "udp") if stack == "tcp_ip" else ("sctp",):
            got[p] += c[p]
    assert got == want


def test_snaplen_cut_is_not_bad(binaries: dict, tmp_path: Path) -> None:
    """A segment the capture cut short is unverified (tshark: status 2), never bad."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP() / (b"p" * 200))
    pcap = tmp_path / "cut.pcap"
    cut = frame[:96]
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 1)
    rec = struct.pack("<IIII", 1, 0, len(cut), len(frame))
    pcap.write_bytes(head + rec + cut)
    assert tshark_bad(pcap)["tcp"] == 0
    binary, protos = binaries["tcp_ip"]
    assert ours(binary, protos, pcap, "--checksums") == Counter()


def test_rubikgen_run_passes_it_on(binaries: dict) -> None:
    """`rubikgen run --checksums` (the session's build reused: not stale)."""
    binary, _protos = binaries["tcp_ip"]
    pcap = TRACES / "null-smtp-rset.pcap"
    if not pcap.exists():
        pytest.skip("capture missing")
    argv = [*rubikgen_command(), "run", "specs/stacks/tcp_ip.yaml", str(pcap), "--nf", "count"]
    argv += ["--build-dir", str(binary.parent), "--summary", "json", "--checksums"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    bad = json.loads(proc.stdout)["checksum_bad"]
    assert bad["ip"] == tshark_bad(pcap)["ip"] > 0
