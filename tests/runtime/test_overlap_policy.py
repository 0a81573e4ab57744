"""Hostile reassembly end to end: `overlap_policy: last` and memory that follows the data.

1. A copy of the stock tcp_ip stack whose tcp.yaml says `overlap_policy: last` (instead of
   `overwrite: first`) runs with the `streams` NF on a crafted capture (scapy, tests/support/captures.py)
   whose client sends segments that overlap delivered and buffered bytes with other content, in
   every shape (covering a buffered segment from below, overlapping its end, lying inside it,
   half over delivered bytes). Each direction's stream must equal what an independent byte-map
   reassembler written here delivers: bytes before the delivered point are final, any other byte
   takes the content of the last segment that carried it. The same stack with the stock policy
   (first) must differ on those flows, so the test can tell the policies apart.
2. The `overlap` event reaches handlers with its values: a handler on `overlap` logs
   `overlap_seq`, `overlap_len` and `overlap_new` through the `events` NF, and they match the
   overlaps the test made.
3. The far-ahead flood of bench/flood.py (one-byte segments ~1 MB ahead of a hole that is never
   filled) costs the sequences a few hundred bytes per connection (`--bench`'s
   seq_heap_peak_bytes), not ~1 MB (the offset).

One build of the modified stack per session (a private build directory).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.captures import (
    CLIENT4,
    REPO,
    SERVER4,
    TPORT,
    C,
    Capture,
    Rng,
    S,
    Tcp,
    rubikgen_command,
)

sys.path.insert(0, str(REPO / "bench"))
import flood  # noqa: E402

OVERLAP_HANDLER = (
    "  ovl_log: {layer: tcp, with: overlap, "
    "args: {seq: overlap_seq, len: overlap_len, won: overlap_new}}\n"
)


def last_copy(segments: list[tuple[int, bytes]]) -> bytes:
    """The independent reference: in arrival order, a byte at or after the delivered point
    takes the segment's content (the last copy wins); contiguous bytes are delivered at once and
    never change again."""
    held: dict[int, int] = {}
    out = bytearray()
    for off, chunk in segments:
        for i, b in enumerate(chunk):
            if off + i >= len(out):
                held[off + i] = b
        while len(out) in held:
            out.append(held.pop(len(out)))
    return bytes(out)


def plans(d: bytes) -> list[list[tuple[int, bytes]]]:
    def alt(a: int, b: int, x: int = 0x5A) -> bytes:
        return bytes(v ^ x for v in d[a:b])

    return [
        [
            (0, d[0:100]),
            (300, d[300:400]),  # buffered behind a hole
            (250, alt(250, 450)),  # covers it from below and beyond
            (600, d[600:700]),  # buffered
            (650, alt(650, 750)),  # overlaps its end
            (620, alt(620, 640, 0x33)),  # inside it
            (50, alt(50, 150)),  # half over delivered bytes
            (150, d[150:250]),
            (450, d[450:600]),
            (750, d[750:900]),
        ],
        [
            (0, d[0:10]),
            (100, d[100:200]),  # buffered
            (100, alt(100, 200)),  # same range, other bytes
            (100, alt(100, 150, 0x11)),  # same start, ends inside
            (150, alt(150, 250, 0x22)),  # starts inside, ends after
            (10, d[10:100]),
            (250, d[250:300]),
        ],
    ]


def overlaps(segments: list[tuple[int, bytes]]) -> list[tuple[int, int, int]]:
    """Per segment that overlaps held bytes with other content: (first differing overlap
    offset, bytes of differing overlaps, bytes of them the new copy won) as the runtime reports
    them for policy last, from byte maps of what is delivered (kept until acknowledged: these
    captures send no ACK of client data before the last client segment; compared as one run,
    never replaced) and buffered (past the delivered point) when the segment arrives."""
    held: dict[int, int] = {}
    kept = bytearray()  # delivered, unacknowledged
    delivered = 0
    out = []
    for off, chunk in segments:
        first, total, won = None, 0, 0
        old = [i for i in range(len(chunk)) if off + i < delivered]
        if old and any(kept[off + i] != chunk[i] for i in old):
            first, total = off + old[0], len(old)
        # runs of overlapped bytes per buffered run, compared as whole runs
        run: list[int] = []
        for i in range(len(chunk) + 1):
            pos = off + i
            inside = i < len(chunk) and pos >= delivered and pos in held
            if inside:
                run.append(i)
                continue
            if run and any(held[off + j] != chunk[j] for j in run):
                first = off + run[0] if first is None else first
                total += len(run)
                won += len(run)
            run = []
        if first is not None:
            out.append((first, total, won))
        for i, b in enumerate(chunk):
            if off + i >= delivered:
                held[off + i] = b
        while delivered in held:
            kept.append(held.pop(delivered))
            delivered += 1
    return out


@pytest.fixture(scope="session")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """specs/ copied twice: tcp.yaml with `overlap_policy: last` (stack tcp_ip_last, with a
    handler on overlap) and unchanged (stack tcp_ip_first, same handler)."""
    root = tmp_path_factory.mktemp("ovl")
    out = {}
    for policy in ("last", "first"):
        specs = root / policy / "specs"
        shutil.copytree(REPO / "specs", specs)
        tcp = specs / "protocols" / "tcp.yaml"
        text = tcp.read_text()
        if policy == "last":
            assert "\n  overwrite: first\n" in text
            text = text.replace("\n  overwrite: first\n", "\n  overlap_policy: last\n")
        tcp.write_text(text)
        stack = specs / "stacks" / "tcp_ip.yaml"
        st = stack.read_text().replace("stack: tcp_ip\n", f"stack: tcp_ip_{policy}\n")
        assert "\nhandlers:\n" in st
        stack.write_text(st.replace("\nhandlers:\n", "\nhandlers:\n" + OVERLAP_HANDLER))
        out[policy] = stack
    return out


def run(
    stack: Path, pcap: Path, out: Path, nf: str, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    build = stack.parents[2] / "build"
    argv = [*rubikgen_command(), "run", str(stack), str(pcap), "--nf", nf, "--out", str(out)]
    argv += ["--build-dir", str(build), "--summary", "json"]
    if extra:
        argv += ["--", *extra]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return proc


def streams(out: Path) -> dict[tuple[int, str], bytes]:
    """(client port, dir) -> bytes of the tcp layer's streams."""
    got = {}
    for line in (out / "flows.jsonl").read_text().splitlines():
        r: dict[str, Any] = json.loads(line)
        if r["layer"] != "tcp" or not r.get("file"):
            continue
        port = r["sport"] if r["dport"] == TPORT else r["dport"]
        got[(port, r["dir"])] = (out / r["file"]).read_bytes()
    return got


Plans = list[list[tuple[int, bytes]]]


@pytest.fixture(scope="session")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Plans, list[int]]:
    """The capture, the client's segments of each flow and each client's ISN."""
    rng, cap = Rng(1407), Capture()
    d = rng.data(1000)
    ps = plans(d)
    isns = [rng.getrandbits(32) for _ in ps]
    for k, segs in enumerate(ps):
        t = Tcp(cap, (CLIENT4, 46000 + k), (SERVER4, TPORT), isn=(isns[k], 77))
        t.handshake()
        for off, chunk in segs:
            t.send(C, chunk, off=off)
        t.send(S, flags="A")
        t.send(S, b"reply")
        t.close()
    return cap.write(tmp_path_factory.mktemp("ovlcap") / "overlap-last.pcap"), ps, isns


def test_last_policy_matches_reference(
    stacks: dict[str, Path], capture: tuple[Path, Plans, list[int]], tmp_path: Path
) -> None:
    pcap, ps, _ = capture
    got = {p: streams(_run_streams(stacks[p], pcap, tmp_path / p)) for p in ("last", "first")}
    for k, segs in enumerate(ps):
        want = last_copy(segs)
        assert len(want) == max(o + len(c) for o, c in segs)  # every byte arrived
        keys = [key for key in got["last"] if key[0] == 46000 + k]
        c2s = [key for key in keys if got["last"][key] != b"reply"]
        assert len(c2s) == 1, keys
        assert got["last"][c2s[0]] == want, f"flow {k}"
        assert got["first"][c2s[0]] != want, f"flow {k}: first and last agree; nothing tested"
        assert got["last"][(46000 + k, "s2c" if c2s[0][1] == "c2s" else "c2s")] == b"reply"


def _run_streams(stack: Path, pcap: Path, out: Path, extra: tuple[str, ...] = ()) -> Path:
    run(stack, pcap, out, "streams", extra)
    return out


def test_overlap_policy_at_run_time(
    stacks: dict[str, Path], capture: tuple[Path, Plans, list[int]], tmp_path: Path
) -> None:
    """`--overlap-policy tcp=last` makes the stock stack (spec policy first) deliver what the
    last-copy reference delivers, as the stack built with `overlap_policy: last` does; naming
    another layer leaves tcp's policy alone, and a bad value is a usage error."""
    pcap, ps, _ = capture
    last = streams(
        _run_streams(stacks["first"], pcap, tmp_path / "rt", ("--overlap-policy", "tcp=last"))
    )
    first = streams(
        _run_streams(stacks["first"], pcap, tmp_path / "rt6", ("--overlap-policy", "tcp6=last"))
    )
    built = streams(_run_streams(stacks["last"], pcap, tmp_path / "built"))
    assert last == built
    for k, segs in enumerate(ps):
        c2s = [key for key in last if key[0] == 46000 + k and last[key] != b"reply"]
        assert len(c2s) == 1
        assert last[c2s[0]] == last_copy(segs), f"flow {k}"
        assert first[c2s[0]] != last_copy(segs), f"flow {k}: tcp6=last changed tcp"
    binary = stacks["first"].parents[2] / "build" / "tcp_ip_first"
    for bad in ("tcp=newest", "nolayer=last", ""):
        proc = subprocess.run(
            [str(binary), str(pcap), "--overlap-policy", bad], capture_output=True, text=True
        )
        assert proc.returncode == 2 and "--overlap-policy" in proc.stderr, (bad, proc.stderr)


def test_overlap_event_values(
    stacks: dict[str, Path], capture: tuple[Path, Plans, list[int]], tmp_path: Path
) -> None:
    pcap, ps, isns = capture
    out = tmp_path / "events"
    run(stacks["last"], pcap, out, "events")
    calls = []
    for line in (out / "events.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("handler") == "ovl_log":
            calls.append(r["args"])
    want = [
        # last: the new copy won the buffered bytes, never the delivered ones
        {"seq": (isns[k] + 1 + off) % (1 << 32), "len": n, "won": w}
        for k, segs in enumerate(ps)
        for off, n, w in overlaps(segs)
    ]
    assert len(want) >= 5
    assert calls == want


def test_far_ahead_memory_follows_data(stacks: dict[str, Path], tmp_path: Path) -> None:
    conns, segs = 300, 4
    pcap = tmp_path / "far.pcap"
    flood.write_pcap(pcap, flood.far_ahead(conns, segs, 1_000_000))
    run(stacks["last"], pcap, tmp_path / "warm", "none")  # builds (cached) the binary
    binary = stacks["last"].parents[2] / "build" / "tcp_ip_last"
    proc = subprocess.run(
        [str(binary), str(pcap), "--bench", "--passes", "1", "--no-timeouts"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    bench = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = bench["seq_heap_peak_bytes"]
    # every connection holds its 4 bytes: at least that, and a bounded overhead each (the old
    # linear buffer reserved up to the furthest offset, ~1 MB per connection)
    assert conns * segs <= peak <= conns * 512, peak


@pytest.mark.parametrize(
    ("lines", "bad", "message"),
    [
        (["  overlap_policy: vista"], "vista", "got the string 'vista'"),
        (
            ["  overlap_policy: last", "  overwrite: first"],
            "overwrite",
            "overwrite: first contradicts overlap_policy: last",
        ),
    ],
)
def test_validator_names_the_place(
    tmp_path: Path, lines: list[str], bad: str, message: str
) -> None:
    """A wrong overlap_policy (or one contradicting overwrite) is RG006 at file:line:col."""
    text = (REPO / "specs" / "protocols" / "tcp.yaml").read_text()
    assert "\n  overwrite: first\n" in text
    text = text.replace("\n  overwrite: first\n", "\n" + "\n".join(lines) + "\n")
    spec = tmp_path / "tcp.yaml"
    spec.write_text(text)
    line_no = next(i for i, ln in enumerate(text.splitlines(), 1) if ln == lines[-1])
    col = lines[-1].index(bad) + 1
    proc = subprocess.run(
        [*rubikgen_command(), "validate", str(spec)], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert f"{spec}:{line_no}:{col}: error[RG006]: " in proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr
