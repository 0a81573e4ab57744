"""Differential equivalence of the middle-end: a stack built with -O0 (the plain per-layer
pipeline) and with -O2 (every pass) writes byte-identical `events` and `streams` output on
every test capture, real and hand-made, and on random packet sequences (Hypothesis). Both
builds run under ASan/UBSan."""

from __future__ import annotations

import filecmp
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from captures import CASES, CLIENT4, SERVER4, Capture, Tcp, build
from rubikgen.build import build as build_stack

REPO = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="module")
def binaries() -> dict[tuple[str, int], Path]:
    return {(s, lv): _binary(s, lv) for s in REAL for lv in (0, 2)}


def _run(binary: Path, pcap: Path, out: Path, nf: str, extra: list[str]) -> None:
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--seed", "1", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: a capture error (cut file), same both
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]


def _same_dirs(a: Path, b: Path) -> list[str]:
    diffs = []
    cmp = filecmp.dircmp(a, b)
    diffs += [f"only in -O0: {x}" for x in cmp.left_only]
    diffs += [f"only in -O2: {x}" for x in cmp.right_only]
    for f in cmp.common_files:
        if (a / f).read_bytes() != (b / f).read_bytes():
            diffs.append(f"differs: {f}")
    for d in cmp.common_dirs:
        diffs += [f"{d}/{x}" for x in _same_dirs(a / d, b / d)]
    return diffs


def check_equivalent(
    bins: dict[tuple[str, int], Path],
    stack: str,
    pcap: Path,
    tmp: Path,
    extra: list[str] | None = None,
) -> None:
    jobs = [(nf, level) for nf in ("events", "streams") for level in (0, 2)]
    outs = {j: tmp / f"{pcap.stem}-{j[0]}-O{j[1]}" for j in jobs}
    with ThreadPoolExecutor(max_workers=4) as pool:  # the four runs are independent
        for f in [
            pool.submit(_run, bins[(stack, lv)], pcap, outs[(nf, lv)], nf, extra or [])
            for nf, lv in jobs
        ]:
            f.result()
    for nf in ("events", "streams"):
        diffs = _same_dirs(outs[(nf, 0)], outs[(nf, 2)])
        assert not diffs, f"{stack} {pcap.name} --nf {nf}: -O0 and -O2 differ: {diffs[:10]}"


@pytest.mark.parametrize(
    "stack,capture", [(s, c) for s, cs in REAL.items() for c in cs], ids=lambda x: str(x)
)
def test_real_captures(
    stack: str, capture: str, binaries: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    if not pcap.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    check_equivalent(binaries, stack, pcap, tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hand_made_captures(
    case: str, binaries: dict[tuple[str, int], Path], tmp_path: Path
) -> None:
    pcap, exp = build(case, tmp_path / "cap")
    check_equivalent(binaries, "tcp_ip", pcap, tmp_path, list(exp.args))


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
