"""Differential equivalence of the middle-end: a stack built with -O0 (the plain per-layer
pipeline), -O1 (the clean-up and header passes) and -O2 (every pass) writes byte-identical
`events` and `streams` output and the same summary on every test capture, real and hand-made,
and on random packet sequences (Hypothesis). All builds run under ASan/UBSan. The matrix is
sampled per run (tests/support/matrix.py: captures, passes, and which stacks besides tcp_ip are
compared at -O1; every stack at -O0 and -O2); `--full-matrix` runs all of it. Every run must
succeed (exit 0, outputs written): two builds failing alike prove nothing.

Each pass disabled on its own (`-O2 --disable-pass P`, plain builds) is compared with -O0 on
one set of captures (PASS_CAPTURES and the hand-made cases), so a pass that is only correct
when a later pass cleans up after it shows up."""

from __future__ import annotations

import filecmp
import random
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO_ROOT, matrix
from support.captures import CASES, CLIENT4, SERVER4, Capture, Tcp, build

from rubikgen.opt import PASSES
from rubikgen.toolchain.build import build as build_stack

REPO = REPO_ROOT
TRACES = REPO.parent / "shared" / "traces"
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")

# stack -> the real captures it is compared on
REAL = {
    "tcp_ip": sorted(p.name for p in TRACES.glob("*.pcap")) if TRACES.is_dir() else [],
    "gtp": ["gtp-u-tls.pcap", "gtp-u-http-outer-frag.pcap", "gtp-u-qinq-rtmp.pcap"],
    "pptp": ["pptp-gre-ppp-udp-dns.pcap", "pptp-control-tcp1723.pcap"],
    "quic": ["quic-v1-chromium.pcap", "quic-handshake-null-ipv6.pcap", "quic-v2-http3.pcap"],
    "tcp_tls": ["mixed-android-mobile.pcap", "ipv6-http-gquic.pcap"],
    "sctp": ["sctp-http.pcap", "sctp-m3ua.pcap"],
}


def _binary(stack: str, level: int) -> Path:
    res = build_stack(
        REPO / "specs" / "stacks" / f"{stack}.yaml",
        REPO / "build" / f"{stack}-O{level}",
        opt_level=level,
        sanitize=True,
        quiet=True,
    )
    return res.binary


LEVELS = (0, 1, 2)
#: The stacks compared at -O1 in this run. Every level is a sanitized compile of its own (the
#: suite's slowest setup), so -O1, the clean-up passes alone, runs on tcp_ip (every hand-made
#: case, the every-order capture and the bursts run there) and on a sample of the other stacks;
#: -O0 (the reference) and -O2 (every pass; the builds tests/backend/test_stacks.py shares
#: through the build cache) on all. A run thus compares every stack and every level, and
#: successive seeds every stack at -O1; --full-matrix compares them all.
O1_STACKS = {"tcp_ip", *matrix.sample(sorted(set(REAL) - {"tcp_ip"}), 2, name="differential-O1")}


def levels(stack: str) -> tuple[int, ...]:
    """The -O levels `stack` is compared at in this run (-O0 first: the reference)."""
    return LEVELS if stack in O1_STACKS else (0, 2)


class Binaries(dict[tuple[str | int, ...], Path]):
    """The sanitized binaries of the run's (stack, level) pairs, built two at a time in the
    background in test order: a test waits only for the builds it uses."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        super().__init__()
        self.futures = {(s, lv): pool.submit(_binary, s, lv) for s in REAL for lv in levels(s)}

    def __missing__(self, key: tuple[str | int, ...]) -> Path:
        self[key] = self.futures[key].result()  # KeyError: a level this run does not build
        return self[key]


@pytest.fixture(scope="module")
def binaries() -> Iterator[Binaries]:
    pool = ThreadPoolExecutor(max_workers=2)  # the compiler runs are independent
    try:
        yield Binaries(pool)
    finally:
        pool.shutdown(cancel_futures=True)  # (builds no selected test asked for)


#: What each NF must have written for a run to count.
OUTPUT = {"events": "events.jsonl", "streams": "flows.jsonl"}


def _run(binary: Path, pcap: Path, out: Path, nf: str, extra: list[str]) -> str:
    """Run and return the JSON summary line; the run must succeed and write its output."""
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--seed", "1"]
    argv += ["--summary", "json", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    assert r.returncode == 0, f"{' '.join(argv)}: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert (out / OUTPUT[nf]).is_file(), f"{' '.join(argv)} wrote no {OUTPUT[nf]}"
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith("{"), r.stdout[-500:]
    return summary


def _same_dirs(a: Path, b: Path) -> list[str]:
    diffs = []
    cmp = filecmp.dircmp(a, b)
    diffs += [f"only in the first: {x}" for x in cmp.left_only]
    diffs += [f"only in the second: {x}" for x in cmp.right_only]
    for f in cmp.common_files:
        if (a / f).read_bytes() != (b / f).read_bytes():
            diffs.append(f"differs: {f}")
    for d in cmp.common_dirs:
        diffs += [f"{d}/{x}" for x in _same_dirs(a / d, b / d)]
    return diffs


def _summary_fields(line: str) -> dict[str, object]:
    """The summary without the fields that name the binary's input rather than its result."""
    import json

    obj = json.loads(line)
    # peak accounted bytes depend on the code, not only on the result: -O2 borrows packet bytes
    # where -O0 copies them, and builds lazily created instances in a scratch record
    peaks = ("peak_reassembly_bytes", "peak_flow_bytes")
    for where in [obj.get("memcap") or {}] + [
        layer.get("memory") or {} for layer in (obj.get("layers") or {}).values()
    ]:
        for k in peaks:
            where.pop(k, None)
    # files_written names each run's own output folder; the files themselves are compared
    for f in obj.get("files_written") or []:
        f.pop("path", None)
    return {k: v for k, v in obj.items() if k not in ("capture",)}


def check_equivalent(
    bins: dict[tuple[str | int, ...], Path],
    stack: str,
    pcap: Path,
    tmp: Path,
    extra: list[str] | None = None,
    variants: tuple[str | int, ...] | None = None,
) -> dict[tuple[str, str | int], str]:
    """Every variant (an -O level, or a pass name: -O2 without it; by default the stack's
    levels in this run) writes what -O0 writes. Returns the summaries by (nf, variant)."""
    if variants is None:
        variants = levels(stack)
    jobs = list(dict.fromkeys((nf, v) for nf in ("events", "streams") for v in (0, *variants)))
    outs = {j: tmp / f"{pcap.stem}-{j[0]}-{j[1]}" for j in jobs}
    with ThreadPoolExecutor(max_workers=4) as pool:  # the runs are independent
        futs = {
            j: pool.submit(_run, bins[(stack, j[1])], pcap, outs[j], j[0], extra or [])
            for j in jobs
        }
        summaries = {j: f.result() for j, f in futs.items()}
    for nf, v in jobs:
        if v == 0:
            continue
        name = f"-O{v}" if isinstance(v, int) else f"-O2 --disable-pass {v}"
        diffs = _same_dirs(outs[(nf, 0)], outs[(nf, v)])
        assert not diffs, f"{stack} {pcap.name} --nf {nf}: -O0 and {name} differ: {diffs[:10]}"
        a, b = _summary_fields(summaries[(nf, 0)]), _summary_fields(summaries[(nf, v)])
        assert a == b, f"{stack} {pcap.name} --nf {nf}: summaries of -O0 and {name}: {a} != {b}"
    return summaries


#: tcp_ip runs on every trace: a sample per run (the other stacks' few captures always)
REAL_CELLS = [(s, c) for s, cs in REAL.items() for c in cs]


@pytest.mark.parametrize(
    "stack,capture",
    matrix.params(
        REAL_CELLS, 8, name="differential-real", always=[x for x in REAL_CELLS if x[0] != "tcp_ip"]
    ),
    ids=lambda x: str(x),
)
def test_real_captures(
    stack: str, capture: str, binaries: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    if not pcap.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    check_equivalent(binaries, stack, pcap, tmp_path)


# ---------------------------------------------------------------------------------------------
# Each pass disabled on its own

#: Real captures the per-pass builds run on: fragments (both IP versions), overlaps,
#: retransmissions, out-of-order data and gaps, UDP, several link types.
PASS_CAPTURES = [
    "http-ooo-lost-rst-tlpw1.pcap",
    "ipv4-frag-tcp-overlap-ooo-crafted.pcap",
    "ipv6-http-atomic-frag.pcap",
    "mixed-android-mobile.pcap",
    "raw-ipv4-ipv6-http.pcap",
    "tcp-retransmissions.pcap",
]


#: Hand-made cases the per-pass builds run on (fragments and overlaps in every order, a FIN
#: before its data, garbage).
PASS_CASES = ["garbage", "ipv4_frag_overlap", "ipv6_frag", "tcp_fin_overtakes", "tcp_overlap"]

#: Passes without which -O2 does not compile today, with the compiler's complaint. The test
#: checks that the build still fails that way, so a fixed generator makes it fail until the
#: entry goes (and the pass joins the comparisons).
# Passes whose disabling makes the build fail, with the marker the error must contain and why
# (empty since the flow-verdict lookup: "dead-blocks" built with a dangling-pointer warning of
# gcc's, on a path storing a local key buffer's address in the scratch record).
KNOWN_BUILD_FAILURES: dict[str, tuple[str, str]] = {}
COMPARED_PASSES = tuple(p for p in PASSES if p not in KNOWN_BUILD_FAILURES)
#: each disabled pass costs a build: a sample of them per run (tests/support/matrix.py)
SAMPLED_PASSES = tuple(matrix.sample(COMPARED_PASSES, 4, name="differential-passes"))


def _no_pass_build(name: str) -> Path:
    out = REPO / "build" / f"tcp_ip-O2-no-{name}"
    stack = REPO / "specs" / "stacks" / "tcp_ip.yaml"
    return build_stack(stack, out, opt_level=2, disable=(name,), quiet=True).binary


@pytest.fixture(scope="module")
def pass_binaries(binaries: dict[tuple[str, int], Path]) -> dict[tuple[str | int, ...], Path]:
    """tcp_ip at -O0 (ASan) and at -O2 without each pass in turn (plain builds: faster, and the
    -O0 comparison runs under the sanitizers)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = dict(zip(SAMPLED_PASSES, pool.map(_no_pass_build, SAMPLED_PASSES), strict=True))
    out: dict[tuple[str | int, ...], Path] = {("tcp_ip", 0): binaries[("tcp_ip", 0)]}
    out.update({("tcp_ip", name): b for name, b in built.items()})
    return out


@pytest.mark.parametrize("name", sorted(KNOWN_BUILD_FAILURES))
def test_known_build_failures_still_fail(name: str) -> None:
    from rubikgen.toolchain.build import BuildError

    marker, _ = KNOWN_BUILD_FAILURES[name]
    with pytest.raises(BuildError) as e:
        _no_pass_build(name)
    assert marker in str(e.value)


@pytest.mark.parametrize("capture", matrix.params(PASS_CAPTURES, 3, name="differential-pass-real"))
def test_each_pass_disabled_real(
    capture: str, pass_binaries: dict[tuple[str | int, ...], Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    if not pcap.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    check_equivalent(pass_binaries, "tcp_ip", pcap, tmp_path, variants=SAMPLED_PASSES)


@pytest.mark.parametrize("case", matrix.params(PASS_CASES, 3, name="differential-pass-cases"))
def test_each_pass_disabled_hand_made(
    case: str, pass_binaries: dict[tuple[str | int, ...], Path], tmp_path: Path
) -> None:
    pcap, exp = build(case, tmp_path / "cap")
    check_equivalent(pass_binaries, "tcp_ip", pcap, tmp_path, list(exp.args), SAMPLED_PASSES)


@pytest.mark.parametrize("case", matrix.params(sorted(CASES), 6, name="differential-cases"))
def test_hand_made_captures(
    case: str, binaries: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    pcap, exp = build(case, tmp_path / "cap")
    check_equivalent(binaries, "tcp_ip", pcap, tmp_path, list(exp.args))


# ---------------------------------------------------------------------------------------------
# Several packets of one flow close together, in every order

#: A real connection (every frame captured twice): the frames of each window are permuted in
#: every order among their positions, each permutation a connection of its own (its client port
#: rewritten), so packets of one flow that a burst would hold together arrive in every order:
#: the SYN, SYN-ACK, ACK and first data; a request, its retransmission and the response; the
#: FINs, their ACK and a retransmitted FIN.
ORDERS_SOURCE = "http-post-upload.pcap"
ORDERS_WINDOWS = ([0, 2, 4, 6], [6, 7, 8, 9], [26, 27, 28, 30])


def _orders_capture(src: Path, path: Path) -> Path:
    from itertools import permutations

    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap, wrpcap

    frames = list(rdpcap(str(src)))
    client = frames[0][TCP].sport  # the first frame is the client's SYN
    out = []
    port = 20000
    span = frames[-1].time - frames[0].time + 1  # each connection after the one before
    for window in ORDERS_WINDOWS:
        for perm in permutations(window):
            order = list(range(len(frames)))
            for pos, idx in zip(window, perm, strict=True):
                order[pos] = idx
            for pos, idx in enumerate(order):
                f = frames[idx].copy()
                f.time = frames[pos].time + (port - 20000) * span
                tcp = f[TCP]
                if tcp.sport == client:
                    tcp.sport = port
                else:
                    tcp.dport = port
                del f[IP].chksum, tcp.chksum  # recomputed
                out.append(f)
            port += 1
    wrpcap(str(path), out)
    return path


def test_flow_packets_in_every_order(binaries: dict[tuple[str, int], Path], tmp_path: Path) -> None:
    src = TRACES / ORDERS_SOURCE
    if not src.is_file():
        pytest.skip(f"{ORDERS_SOURCE} is not in {TRACES}")
    pcap = _orders_capture(src, tmp_path / "orders.pcap")
    check_equivalent(binaries, "tcp_ip", pcap, tmp_path)


# ---------------------------------------------------------------------------------------------
# Burst sizes: stage 1 (parse to the keys, prefetch) must change nothing

#: --burst sizes compared; --prefetch-always makes stage 1 run on these small captures (it
#: otherwise waits for a flow table bigger than the cache)
BURSTS = (1, 7, 32)
#: the burst size that also runs stage 1's pass B (--prefetch-records: the flow records)
BURST_RECORDS = 7


def _burst_args(b: int) -> list[str]:
    records = ["--prefetch-records"] if b == BURST_RECORDS else []
    return ["--burst", str(b), "--prefetch-always", *records]


#: (stack, capture): the every-order capture, fragments and overlaps, both IP versions, and
#: stage 1 through tunnels, a decrypting transform and PPP
BURST_CASES = [
    ("tcp_ip", ORDERS_SOURCE),
    ("tcp_ip", "ipv4-frag-tcp-overlap-ooo-crafted.pcap"),
    ("tcp_ip", "mixed-android-mobile.pcap"),
    ("tcp_ip", "ipv6-http-atomic-frag.pcap"),
    ("gtp", "gtp-u-http-outer-frag.pcap"),
    ("quic", "quic-v1-chromium.pcap"),
    ("pptp", "pptp-gre-ppp-udp-dns.pcap"),
]


def _counters(binary: Path, pcap: Path, extra: list[str]) -> str:
    """The runtime's counters (--stats: per layer packets, errors, instances...)."""
    argv = [str(binary), str(pcap), "--nf", "none", "--seed", "1", "--stats", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    return r.stderr


@pytest.mark.parametrize("stack,capture", BURST_CASES, ids=lambda x: str(x))
def test_burst_sizes(
    stack: str, capture: str, binaries: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    """At each burst size -O0, -O1 and -O2 agree, and every burst size writes what burst 1
    (no stage 1) writes."""
    src = TRACES / capture
    if not src.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    pcap = _orders_capture(src, tmp_path / "orders.pcap") if capture == ORDERS_SOURCE else src
    sums = {}
    for b in BURSTS:
        (tmp_path / f"b{b}").mkdir()
        sums[b] = check_equivalent(binaries, stack, pcap, tmp_path / f"b{b}", _burst_args(b))
    for b in BURSTS[1:]:
        for nf in ("events", "streams"):
            for lv in levels(stack):
                run = f"{pcap.stem}-{nf}-{lv}"
                what = f"{stack} {capture} -O{lv} --nf {nf}: --burst 1 and --burst {b}"
                diffs = _same_dirs(tmp_path / "b1" / run, tmp_path / f"b{b}" / run)
                assert not diffs, f"{what}: {diffs[:10]}"
                one, many = (_summary_fields(sums[k][(nf, lv)]) for k in (1, b))
                assert one == many, f"{what}: summaries {one} != {many}"
    for lv in (0, 2):
        counts = {b: _counters(binaries[(stack, lv)], pcap, _burst_args(b)) for b in BURSTS}
        for b in BURSTS[1:]:
            assert counts[b] == counts[1], f"{stack} {capture} -O{lv}: --stats, --burst {b}"


# ---------------------------------------------------------------------------------------------
# Random packet sequences


@st.composite
def sequences(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int]], list[str]]:
    """(seed, connections as (request, response, segment size), edits): each connection is a
    valid handshake, data both ways and a close; edits then drop, reorder, duplicate and
    truncate frames."""
    seed = draw(st.integers(0, 2**32 - 1))
    conns = draw(
        st.lists(
            st.tuples(st.integers(0, 3000), st.integers(0, 6000), st.integers(1, 1460)),
            min_size=1,
            max_size=3,
        )
    )
    edits = draw(st.lists(st.sampled_from(["drop", "swap", "dup", "cut"]), max_size=8))
    return seed, conns, edits


def _random_capture(
    seed: int, conns: list[tuple[int, int, int]], edits: list[str], path: Path
) -> Path:
    rng = random.Random(seed)
    cap = Capture()
    for k, (req, resp, seg) in enumerate(conns):
        t = Tcp(cap, (CLIENT4, 30000 + k), (SERVER4, 40080), isn=(rng.getrandbits(32),) * 2)
        t.handshake()
        t.stream("c", rng.randbytes(req), size=seg)
        t.stream("s", rng.randbytes(resp), size=seg)
        t.close(first=rng.choice(["c", "s"]))
    frames = cap.frames
    for e in edits:
        if not frames:
            break
        i = rng.randrange(len(frames))
        if e == "drop":
            del frames[i]
        elif e == "swap":
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
        elif e == "dup":
            frames.insert(rng.randrange(len(frames) + 1), frames[i])
        else:
            data, wire = frames[i]
            frames[i] = (data[: rng.randrange(len(data) + 1)], wire)
    return cap.write(path)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequences())
def test_random_packet_sequences(
    binaries: dict[tuple[str, int], Path],
    tmp_path_factory: pytest.TempPathFactory,
    seq: tuple[int, list[tuple[int, int, int]], list[str]],
) -> None:
    tmp = tmp_path_factory.mktemp("hyp")
    pcap = _random_capture(*seq, tmp / "random.pcap")
    check_equivalent(binaries, "tcp_ip", pcap, tmp)
