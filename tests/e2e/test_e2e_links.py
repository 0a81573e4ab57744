"""End to end: every link type and capture format the driver reads, through the tcp_ip stack,
compared with tshark on the same file.

The frames of two real captures (raw-ipv4-ipv6-http.pcap: IPv4 and IPv6 TCP, UDP;
null-smtp-rset.pcap: an IPv4 TCP connection with its handshake and FIN) are stripped to their
IP packets and rewritten into each encapsulation by tests/support/linktypes.py (struct only): Ethernet,
802.1Q, QinQ (802.1ad + 802.1Q), Linux SLL and SLL2, BSD NULL in both byte orders, LOOP (network
order: what macOS/OpenBSD `tcpdump -i lo0` writes), raw IP (link types 101, 12, 14), raw IPv4
(228) and IPv6 (229), PPP (9: with and without the address/control bytes, with a 1-byte
protocol field; 50: PPP in HDLC framing); classic pcap in both byte orders with µs and ns timestamps; pcapng with
several interfaces of different link types, Simple Packet Blocks, a big-endian section after a
little-endian one, `if_tsresol` (decimal and binary) and `if_tsoffset`, and a last block cut
short.

For each file: the `streams` NF's output is compared with tshark's `follow` output on the same
file by tests/e2e/test_e2e_tshark.py's `compare` (bytes per direction, `dir`, `complete`); tshark's
streams on the rewritten file must be those it finds on the same IP packets as raw IP (so the
rewriting lost nothing and the comparison is not vacuous); and the `flowstats` NF's `first_ts`
and `last_ts` must be times tshark gives frames of that stream (the first one exactly), which
checks the timestamp units and offsets of every format.

Not compared: NULL with Linux's AF_INET6 (10), which tcp_ip accepts but tshark's null dissector
does not decode as IPv6 (it knows the BSD values 24, 28 and 30 only), so tshark has no reference.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.captures import REPO, STACK, Run, flow_key
from support.linktypes import Frame, Interface, Section, ip_packets, write_pcap, write_pcapng
from support.oracle import TRACES, Stream, reference_streams, tshark_available
from support.oracle.tshark import _tshark
from support.streams import compare

SOURCES = ("raw-ipv4-ipv6-http.pcap", "null-smtp-rset.pcap")


def source_frames() -> list[Frame]:
    """The IP packets of SOURCES, the second capture moved to 10 s after the first ends, then
    re-timed 1.000123457 s apart from a fixed start: sub-microsecond parts make the timestamp
    resolution of each format matter, and no flow idles out (UDP's timeout is 60 s)."""
    frames = [f for name in SOURCES for f in ip_packets(TRACES / name)]
    t0 = 1_700_000_000 * 10**9 + 123_456_789
    return [Frame(t0 + i * 1_000_123_457, f.ip, f.wire) for i, f in enumerate(frames)]


@dataclass(frozen=True)
class Case:
    name: str
    write: Callable[[Path, list[Frame]], Path]
    frames: str = "all"  # "all", "v4", "v6": which packets the capture holds
    truncated: bool = False  # the last block is cut short: exit 1, the frames before it count


def _pcap(link: str, **kw: bool) -> Callable[[Path, list[Frame]], Path]:
    return lambda p, fr: write_pcap(p, link, fr, **kw)


def _multi(p: Path, fr: list[Frame]) -> Path:
    itfs = [Interface("ethernet"), Interface("raw"), Interface("loop"), Interface("sll2"),
            Interface("qinq"), Interface("null_be")]  # fmt: skip
    return write_pcapng(p, [Section(itfs, [(i % len(itfs), f, "epb") for i, f in enumerate(fr)])])


def _spb(p: Path, fr: list[Frame]) -> Path:
    return write_pcapng(p, [Section([Interface("ethernet")], [(0, f, "spb") for f in fr])])


def _sections(p: Path, fr: list[Frame]) -> Path:
    half = len(fr) // 2
    le = Section([Interface("vlan", tsresol=9)], [(0, f, "epb") for f in fr[:half]])
    be = Section(
        [Interface("sll"), Interface("loop", tsresol=9)],
        [(i % 2, f, "epb") for i, f in enumerate(fr[half:])],
        big=True,
    )
    return write_pcapng(p, [le, be])


def _tsresol(p: Path, fr: list[Frame]) -> Path:
    # ns, 2^-20 s, ms; an offset of 1,600,000,000 s on two of them (and one big-endian section)
    itfs = [Interface("ethernet", tsresol=9, tsoffset=1_600_000_000),
            Interface("raw", tsresol=0x80 | 20), Interface("sll2", tsresol=3, tsoffset=1_600_000_000)]  # fmt: skip
    pk = [(i % 3, f, "epb") for i, f in enumerate(fr)]
    return write_pcapng(p, [Section(itfs, pk[:60]), Section(itfs, pk[60:], big=True)])


def _truncated(p: Path, fr: list[Frame]) -> Path:
    return write_pcapng(p, [Section([Interface("ethernet")], [(0, f, "epb") for f in fr])], cut=9)


CASES = [
    Case("ethernet", _pcap("ethernet")),
    Case("vlan", _pcap("vlan")),
    Case("qinq", _pcap("qinq")),
    Case("sll", _pcap("sll")),
    Case("sll2", _pcap("sll2")),
    Case("null-le", _pcap("null_le")),
    Case("null-be", _pcap("null_be")),
    Case("loop", _pcap("loop")),
    Case("loop-openbsd", _pcap("loop_openbsd")),
    Case("raw", _pcap("raw")),
    Case("raw12", _pcap("raw12")),
    Case("raw14", _pcap("raw14")),
    Case("ipv4", _pcap("ipv4"), frames="v4"),
    Case("ipv6", _pcap("ipv6"), frames="v6"),
    Case("ppp", _pcap("ppp")),
    Case("ppp-acfc", _pcap("ppp_acfc")),
    Case("ppp-pfc", _pcap("ppp_pfc")),
    Case("ppp-hdlc", _pcap("ppp_hdlc")),
    Case("pcap-be-ns", _pcap("ethernet", big=True, nsec=True)),
    Case("pcapng-multi-link", _multi),
    Case("pcapng-spb", _spb),
    Case("pcapng-sections", _sections),
    Case("pcapng-tsresol", _tsresol),
    Case("pcapng-truncated", _truncated, truncated=True),
]


@dataclass
class Result:
    case: Case
    path: Path
    streams: Run
    flowstats: list[dict]
    exit_flowstats: int
    reference: tuple[Stream, ...]  # tshark on the file (the truncated one: without the cut block)
    baseline: tuple[Stream, ...]  # tshark on the same IP packets as raw IP


def _frames(kind: str, frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if kind == "all" or f.version == int(kind[1])]


def _binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary


def _run(binary: Path, pcap: Path, nf: str, out: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


class Runner:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.binary = _binary()
        self.frames = source_frames()
        self.baselines: dict[str, tuple[Stream, ...]] = {}
        for kind in ("all", "v4", "v6"):
            base = write_pcap(root / f"baseline-{kind}.pcap", "raw", _frames(kind, self.frames))
            self.baselines[kind] = reference_streams(base)
        with ThreadPoolExecutor(max_workers=2) as pool:
            self.results = dict(
                zip([c.name for c in CASES], pool.map(self._case, CASES), strict=True)
            )

    def _case(self, case: Case) -> Result:
        frames = _frames(case.frames, self.frames)
        suffix = ".pcapng" if case.name.startswith("pcapng") else ".pcap"
        path = case.write(self.root / f"{case.name}{suffix}", frames)
        ref_path = path
        if case.truncated:  # the reference: the same file without its last (cut) block
            ref_path = _truncated_reference(self.root / f"{case.name}-ref.pcapng", frames)
        out = self.root / case.name
        p = _run(self.binary, path, "streams", out)
        run = Run(path, out, [str(self.binary), str(path)], p.returncode, p.stdout, p.stderr, 0.0)
        fs = _run(self.binary, path, "flowstats", out / "fs")
        records = [json.loads(x) for x in (out / "fs" / "flowstats.jsonl").read_text().splitlines()]
        reference = reference_streams(ref_path)
        return Result(
            case, path, run, records, fs.returncode, reference, self.baselines[case.frames]
        )


def _truncated_reference(path: Path, frames: list[Frame]) -> Path:
    return write_pcapng(
        path, [Section([Interface("ethernet")], [(0, f, "epb") for f in frames[:-1]])]
    )


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    missing = [n for n in SOURCES if not (TRACES / n).is_file()]
    if missing:
        pytest.skip(f"{missing} not in {TRACES}")
    yield Runner(tmp_path_factory.mktemp("e2e-links"))


def _digest(streams: tuple[Stream, ...]) -> list[tuple[str, str, str, int]]:
    return sorted((s.proto, s.c2s.flow.sha256, s.s2c.flow.sha256, s.c2s.packets + s.s2c.packets)
                  for s in streams)  # fmt: skip


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_link_type_through_tcp_ip(name: str, runner: Runner) -> None:
    r = runner.results[name]
    run = r.streams
    summary = run.summary()
    if r.case.truncated:
        # the frames before the cut block are processed and reported, and the run fails
        assert run.returncode == 1 and "cut short" in run.stderr, run.describe()
        assert summary["packets"] == len(_frames(r.case.frames, runner.frames)) - 1
        tshark_frames = _tshark_frames(r.path)
        assert len(tshark_frames) == summary["packets"], "tshark reads as many frames"
    else:
        assert run.returncode == 0, run.describe()
        assert summary["packets"] == len(_frames(r.case.frames, runner.frames))
        # the rewriting kept every stream tshark sees in the same packets as raw IP
        assert _digest(r.reference) == _digest(r.baseline)
    assert summary["skipped"] == 0 and summary["errors"] == 0, summary
    problems, totals = compare(r.path.name, run, r.reference)
    assert not problems, "\n".join(problems)
    # not vacuous: TCP with a handshake and UDP compared, and data in both directions
    assert totals.streams >= (2 if r.case.frames == "v6" else 3) and totals.bytes > 1000, totals


def _epoch_ns(text: str) -> int:
    if not text:
        return 0  # no time (a pcapng Simple Packet Block)
    sec, _, frac = text.partition(".")
    return int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])


def _tshark_frames(pcap: Path) -> list[tuple[int, str, str]]:
    """(time in ns, tcp.stream, udp.stream) per frame, as tshark reads the file (a cut-short
    file makes tshark exit 2 after the frames it read: those are taken)."""
    args = ["-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch", "-e", "tcp.stream",
            "-e", "udp.stream"]  # fmt: skip
    try:
        text = _tshark(args)
    except Exception as e:  # noqa: BLE001 - tshark's exit 2 on a cut-short file
        if "cut short" not in str(e):
            raise
        proc = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=False)
        text = proc.stdout
    out = []
    for line in text.splitlines():
        t, tcp, udp = (line.split("\t") + ["", ""])[:3]
        out.append((_epoch_ns(t), tcp, udp))
    return out


@pytest.mark.parametrize("name", ["pcapng-tsresol", "pcapng-sections", "pcap-be-ns", "ethernet",
                                  "pcapng-multi-link"])  # fmt: skip
def test_flowstats_times_are_tshark_frame_times(name: str, runner: Runner) -> None:
    """first_ts/last_ts of every TCP/UDP instance are times of frames of its tshark stream, and
    the earliest first_ts of a stream that starts with a SYN, or of a UDP stream, is the
    stream's first frame time: wrong units, offsets or byte orders give other numbers."""
    r = runner.results[name]
    assert r.exit_flowstats == 0
    times: dict[tuple[str, int], list[int]] = defaultdict(list)
    for t, tcp, udp in _tshark_frames(r.path):
        for proto, idx in (("tcp", tcp), ("udp", udp)):
            if idx:
                times[(proto, int(idx.split(",")[0]))].append(t)
    ends: dict[tuple[str, frozenset], Stream] = {}
    for s in r.reference:
        f = s.c2s.flow
        _, a, pa, b, pb = flow_key(f.proto, f.src, f.sport, f.dst, f.dport)
        ends[(s.proto, frozenset([(a, pa), (b, pb)]))] = s
    checked = 0
    firsts: dict[int, list[int]] = defaultdict(list)
    for rec in r.flowstats:
        if rec["proto"] not in ("tcp", "udp"):
            continue
        _, a, pa, b, pb = flow_key(rec["proto"], rec["src"], rec["sport"], rec["dst"], rec["dport"])
        s = ends[(rec["proto"], frozenset([(a, pa), (b, pb)]))]
        ts = times[(s.proto, s.index)]
        assert rec["first_ts"] in ts and rec["last_ts"] in ts, (rec, s.index, ts[:3])
        firsts[id(s)].append(rec["first_ts"])
        checked += 1
        starts = s.proto == "udp" or "syn" in s.flags and s.c2s.flow.handshake
        if starts:
            assert min(firsts[id(s)]) >= min(ts)
    for s in r.reference:
        if id(s) in firsts and (s.proto == "udp" or s.c2s.flow.handshake):
            assert min(firsts[id(s)]) == min(times[(s.proto, s.index)]), s.index
    assert checked >= 5


def test_pcapng_interface_without_entry_is_skipped(runner: Runner, tmp_path: Path) -> None:
    """Frames of an interface whose link type the stack has no entry for are counted as skipped
    (with a warning), and the other interfaces' frames are processed as usual."""
    frames = runner.frames
    itfs = [Interface("ethernet"), Interface("user0")]
    pk = [(1 if i % 5 == 0 else 0, f, "epb") for i, f in enumerate(frames)]
    path = write_pcapng(tmp_path / "user0.pcapng", [Section(itfs, pk)])
    p = _run(runner.binary, path, "streams", tmp_path / "out")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    skipped = sum(1 for i, _, _ in pk if i == 1)
    assert summary["packets"] == len(frames) and summary["skipped"] == skipped, summary
    assert "147" in p.stderr and "skipped" in p.stderr


def test_pcapng_cases_under_sanitizers(runner: Runner, tmp_path: Path) -> None:
    """The pcapng reader and the per-interface entry layers under ASan/UBSan: no report, and
    the same flows as the plain build."""
    from support.captures import SANITIZER_REPORT

    from rubikgen.toolchain.build import build

    asan = build(STACK, REPO / "build" / "tcp_ip", sanitize=True, quiet=True).binary
    for name, r in runner.results.items():
        if not name.startswith("pcapng"):
            continue
        p = _run(asan, r.path, "streams", tmp_path / name)
        assert p.returncode == (1 if r.case.truncated else 0), p.stderr[-2000:]
        assert not any(s in p.stderr for s in SANITIZER_REPORT), p.stderr[-3000:]
        got = (tmp_path / name / "flows.jsonl").read_text()
        assert got == (r.streams.out / "flows.jsonl").read_text(), name
