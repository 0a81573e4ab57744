"""Rule sets swapped while a capture is replayed (docs/rules.md, reload: `--rules-reload`,
`rubikgen ctl SOCKET rules reload R.yaml`).

A real capture is written into a FIFO the binary reads, a record at a time; the binary starts
with rules A (drop HTTPS), a rules file with an error is refused mid-replay (A keeps running),
then rules B (drop DNS) are swapped in. The reload's acknowledgement names the last packet A
judged. Checked against tshark's own filters of the capture: the written capture is exactly
the input without A's frames up to that packet and B's after it, byte for byte; nothing is
lost; the streams the run reassembled (flows spanning the reload) equal those of a run
without reload. The compiled-in rules of a --rules-reload build give the hits and the
written capture of a plain build (tests/e2e/test_rules.py's rules on the same capture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES, tshark_available
from support.paced_feed import PAUSE, PacedFeed, pcap_records
from support.rules import (
    CAPTURES,
    DROP_CAPTURES,
    DROP_FILTER,
    DROPS,
    PREDICATES,
    RULES,
    expected_rule,
    pcap_frames,
    run_json,
    tshark_frames,
    tshark_numbers,
)
from support.trusted import trusted_dir

pytestmark = pytest.mark.serial  # paced input (ci/test.sh runs these alone)

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))
CAPTURE = TRACES / "mixed-android-mobile.pcap"
SLOW = 0.1  # seconds between records while a reload is under way (the capture must outlast it)

RULES_A = """\
rules:
  - {name: https, match: "tcp.dport == 443 || tcp.sport == 443", action: drop}
"""
RULES_B = """\
rules:
  - {name: dns, match: "udp.dport == 53 || udp.sport == 53", action: drop}
"""
RULES_BAD = """\
rules:
  - {name: dns, match: "udp.dprt == 53", action: drop}
"""
# the same in tshark's filter language (the stack's tcp/udp layers are over IPv4)
FILTER_A = "!ipv6 && tcp.port == 443"
FILTER_B = "!ipv6 && udp.port == 53"


def rubikgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args], capture_output=True, text=True, env=ENV,
        timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reload_binary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("rules-reload")
    a = d / "a.rules.yaml"
    a.write_text(RULES_A, encoding="utf-8")
    # built where the control socket trusts its rule sets (its --rules-path: its own directory)
    with trusted_dir("rules-reload") as b:
        p = rubikgen("build", str(STACK), "--rules", str(a), "--rules-reload", "-o", str(b))
        assert p.returncode == 0, p.stderr
        yield b / "tcp_ip", d


def _summary(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check_written(out: Path, boundary: int, n: int) -> int:
    """The written capture: the input without A's frames up to the boundary and B's after it
    (tshark's filters), byte for byte; nothing lost. Returns the number of B's drops."""
    drop_a = {k for k in tshark_numbers(CAPTURE, FILTER_A) if k <= boundary}
    drop_b = {k for k in tshark_numbers(CAPTURE, FILTER_B) if k > boundary}
    assert drop_a and drop_b, "nothing to drop on one side: the test would prove nothing"
    frames_in = pcap_frames(CAPTURE)
    want = [f for i, f in enumerate(frames_in, 1) if i not in drop_a and i not in drop_b]
    got = pcap_frames(out)
    assert got == want  # every other frame, byte for byte, in order
    assert len(got) + len(drop_a) + len(drop_b) == n  # nothing lost
    return len(drop_b)


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_reload_mid_replay_swaps_at_a_packet_boundary(
    reload_binary: tuple[Path, Path], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    binary, _ = reload_binary
    b, bad = tmp_path / "b.rules.yaml", tmp_path / "bad.rules.yaml"
    b.write_text(RULES_B, encoding="utf-8")
    bad.write_text(RULES_BAD, encoding="utf-8")
    _, records = pcap_records(CAPTURE)

    # the reference streams: a run without reload (rules do not change what is reassembled)
    ref_dir = tmp_path / "ref"
    ref = subprocess.run(
        [str(binary), str(CAPTURE), "--nf", "streams", "--out", str(ref_dir), "--summary",
         "json"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr

    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out.pcap"
    os.mkfifo(fifo)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [str(binary), str(fifo), "--nf", "streams", "--out", str(run_dir), "--control",
         str(sock), "--write", str(out), "--summary", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    third = len(records) // 3
    done = threading.Event()  # the writer trickles from a third on until the reload is done
    # slowly while the reloads are under way (two compiles: seconds on a busy machine)
    feed = PacedFeed(fifo, CAPTURE, lambda i: SLOW if i >= third and not done.is_set() else PAUSE)
    feed.start()
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        feed.wait_written(third, lambda: proc.poll() is None)
        # an error in the rules: refused with its position, A keeps running
        p = rubikgen("ctl", str(sock), "rules", "reload", str(bad))
        assert p.returncode == 1, p.stdout
        assert f"{bad}:2:25: error[RG011]" in p.stderr and "did you mean 'dport'" in p.stderr
        assert "the rules in force are kept" in p.stderr
        p = rubikgen("ctl", str(sock), "rules", "reload", str(b))
        assert p.returncode == 0, p.stderr
        words = p.stdout.split()
        assert words[:4] == ["loaded", "1", "rules", "of"], p.stdout
        boundary = int(words[words.index("packet") + 1])
        p = rubikgen("ctl", str(sock), "rules", "info")
        assert p.returncode == 0 and "reloads\t1\n" in p.stdout, p.stdout
    finally:
        done.set()
        if proc.poll() is None:
            feed.join()
        so, se = proc.communicate(timeout=120)
    assert proc.returncode == 0, se
    # the binary reads behind the writer (the FIFO buffers): the boundary may precede `third`
    assert 0 < boundary < len(records)

    got = check_written(out, boundary, len(records))
    s = _summary(so)
    assert s["packets"] == len(records)
    # the set in force at the end, counted from the reload on; the reloads
    assert s["rules"] == [{"name": "dns", "action": "drop", "hits": got}]
    assert s["rule_reloads"] == 1
    # flows spanning the reload kept their state: the same streams as without reload
    ref_files = sorted(p.relative_to(ref_dir) for p in ref_dir.rglob("*") if p.is_file())
    run_files = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file())
    assert ref_files == run_files and len(ref_files) > 3
    for rel in ref_files:
        assert (ref_dir / rel).read_bytes() == (run_dir / rel).read_bytes(), rel


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_sighup_recompiles_the_rules_file(tmp_path: Path) -> None:
    """`rubikgen run --rules R.yaml --rules-reload`: R.yaml edited, SIGHUP to rubikgen: an
    error is reported with its position and A keeps running; then B is swapped in."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    rules = tmp_path / "r.rules.yaml"
    rules.write_text(RULES_A, encoding="utf-8")
    _, records = pcap_records(CAPTURE)
    fifo, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rubikgen", "run", str(STACK), str(fifo), "--rules", str(rules),
         "--rules-reload", "--build-dir", str(tmp_path / "b"), "--nf", "count", "--out",
         str(tmp_path / "o"), "--write", str(out), "--summary", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    err_lines: list[str] = []
    seen = threading.Condition()

    def reader() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with seen:
                err_lines.append(line)
                seen.notify_all()

    def wait_for(text: str) -> str:
        with seen:
            ok = seen.wait_for(lambda: any(text in x for x in err_lines), timeout=120)
        assert ok, "".join(err_lines)
        return next(x for x in err_lines if text in x)

    third = len(records) // 3
    done = threading.Event()
    feed = PacedFeed(fifo, CAPTURE, lambda i: SLOW if i >= third and not done.is_set() else PAUSE)
    threading.Thread(target=reader, daemon=True).start()
    feed.start()
    try:
        feed.wait_written(third, lambda: proc.poll() is None)
        rules.write_text(RULES_BAD.replace("udp.dprt", "udp.dprt "), encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        wait_for("SIGHUP: the rules in force are kept")
        assert any(f"{rules}:2:25: error[RG011]" in x for x in err_lines), err_lines
        rules.write_text(RULES_B, encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        line = wait_for("rules: SIGHUP: loaded 1 rules")
    finally:
        done.set()
        alive = proc.poll() is None
        so, _ = proc.communicate(timeout=120)
        if alive:
            feed.join()
    assert proc.returncode == 0, "".join(err_lines)
    words = line.split()
    boundary = int(words[words.index("packet") + 1])
    # the binary reads behind the writer (the FIFO buffers): the boundary may precede `third`
    assert 0 < boundary < len(records)
    got = check_written(out, boundary, len(records))
    s = _summary(so)
    assert s["rules"] == [{"name": "dns", "action": "drop", "hits": got}]
    assert s["rule_reloads"] == 1


# -- a rule set compiled to a shared object judges like the compiled-in one (and tshark) --------


@pytest.fixture(scope="module")
def bare_binary() -> Iterator[Path]:
    """A --rules-reload build without rules: every set comes from --rules-so."""
    with trusted_dir("rules-bare") as b:
        p = rubikgen("build", str(STACK), "--rules-reload", "-o", str(b))
        assert p.returncode == 0, p.stderr
        yield b / "tcp_ip"


def _so(rules: str, tmp: Path) -> Path:
    from rubikgen.rules.reload import compile_so

    r = tmp / "r.rules.yaml"
    try:  # tests/e2e/test_rules.py's texts are format strings (doubled braces); ours are not
        text = rules.format(stack=STACK)
    except (KeyError, IndexError):
        text = rules
    r.write_text(text, encoding="utf-8")
    c = compile_so(str(STACK), str(r), tmp / "so")
    assert c.so is not None, (c.error, c.diagnostics)
    return c.so


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", CAPTURES)
def test_shared_object_hits_match_tshark(name: str, bare_binary: Path, tmp_path: Path) -> None:
    """tests/e2e/test_rules.py's exact groups, prefixes, range groups and linear rules, from a
    shared object: the hits of the rule each frame falls under by tshark's fields."""
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    want = Counter(expected_rule(f) for f in tshark_frames(pcap))
    got = run_json(bare_binary, pcap, "--rules-so", str(_so(RULES, tmp_path)))
    hits = {r["name"]: r["hits"] for r in got["rules"]}  # type: ignore[attr-defined]
    assert hits == {n: want.get(n, 0) for n, _ in PREDICATES}, (hits, want)
    assert sum(hits.values()) > 0 and "rule_reloads" not in got


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", DROP_CAPTURES)
def test_shared_object_drops_match_tshark(name: str, bare_binary: Path, tmp_path: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    out = tmp_path / "out.pcap"
    run_json(bare_binary, pcap, "--rules-so", str(_so(DROPS, tmp_path)), "--write", str(out))
    drop = tshark_numbers(pcap, DROP_FILTER)
    assert drop
    assert pcap_frames(out) == [f for i, f in enumerate(pcap_frames(pcap), 1) if i not in drop]


def test_a_set_for_another_stack_is_refused(bare_binary: Path, tmp_path: Path) -> None:
    """The fingerprint: a rule set compiled for another stack does not load."""
    from rubikgen.rules.reload import compile_so

    r = tmp_path / "r.rules.yaml"
    r.write_text('rules:\n  - {name: x, match: "ip.ttl == 1", action: drop}\n')
    other = REPO / "specs" / "stacks" / "sctp.yaml"
    c = compile_so(str(other), str(r), tmp_path / "so")
    assert c.so is not None, c.diagnostics
    p = subprocess.run(
        [str(bare_binary), str(CAPTURE), "--nf", "count", "--rules-so", str(c.so)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert p.returncode != 0
    assert "the rule set was compiled for another stack" in p.stderr, p.stderr


# -- stateful decisions across a reload: kept by rule name, forgotten otherwise ------------------

STATEFUL_A = """\
rules:
  - {name: keep, stateful: true, action: drop,
     match: "tcp.syn && !tcp.ack && ip.daddr == 216.239.38.120"}
  - {name: gone, stateful: true, action: drop,
     match: "tcp.syn && !tcp.ack && (ip.daddr == 172.217.168.206 || ip.daddr == 172.217.21.202)"}
"""
STATEFUL_B = """\
rules:
  - {name: keep, stateful: true, action: drop,
     match: "tcp.syn && !tcp.ack && ip.daddr == 216.239.38.120"}
"""
SYN = "tcp.flags.syn == 1 && tcp.flags.ack == 0 && !ipv6 && "


def _streams(flt: str) -> dict[int, set[int]]:
    """tcp.stream -> its frame numbers, for the streams whose SYN the filter selects."""
    from support.oracle.tshark import _tshark

    syns = _tshark(["-r", str(CAPTURE), "-Y", SYN + flt, "-T", "fields", "-e", "tcp.stream"])
    ids = {int(x) for x in syns.split()}
    rows = _tshark(["-r", str(CAPTURE), "-Y", "tcp && !ipv6", "-T", "fields", "-e",
                    "frame.number", "-e", "tcp.stream"])  # fmt: skip
    out: dict[int, set[int]] = {i: set() for i in ids}
    for ln in rows.splitlines():
        n, s = ln.split("\t")
        if int(s) in out:
            out[int(s)].add(int(n))
    return out


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_reload_keeps_stateful_decisions_by_rule_name(bare_binary: Path, tmp_path: Path) -> None:
    """Connections a stateful `keep` took before the reload stay dropped after it (their
    later packets match no rule of B: only the kept decision drops them); those `gone` took
    pass after it (B has no rule of that name: forgotten)."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    a = _so(STATEFUL_A, tmp_path)  # A from the start (--rules-so), B through the socket
    b = tmp_path / "b.rules.yaml"
    b.write_text(STATEFUL_B, encoding="utf-8")
    _, records = pcap_records(CAPTURE)
    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out.pcap"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [str(bare_binary), str(fifo), "--nf", "count", "--rules-so", str(a), "--control",
         str(sock), "--write", str(out), "--summary", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    start = 230  # long connections of both rules are open here (tshark: tcp.stream spans)
    done = threading.Event()
    feed = PacedFeed(fifo, CAPTURE, lambda i: SLOW if i >= start and not done.is_set() else PAUSE)
    feed.start()
    try:
        feed.wait_written(start, lambda: proc.poll() is None)
        p = rubikgen("ctl", str(sock), "rules", "reload", str(b))
        assert p.returncode == 0, p.stderr
        boundary = int(p.stdout.split()[p.stdout.split().index("packet") + 1])
    finally:
        done.set()
        if proc.poll() is None:
            feed.join()
        so, se = proc.communicate(timeout=120)
    assert proc.returncode == 0, se
    keep = _streams("ip.dst == 216.239.38.120")
    gone = _streams("(ip.dst == 172.217.168.206 || ip.dst == 172.217.21.202)")
    spans = [fs for fs in keep.values() if min(fs) <= boundary < max(fs)]
    assert spans, f"no kept connection spans the reload at {boundary}: the test proves nothing"
    assert any(min(fs) <= boundary < max(fs) for fs in gone.values()), boundary
    drop = set().union(*keep.values())  # before: A's keep; after: the decision kept, B's keep
    drop |= {n for fs in gone.values() if min(fs) <= boundary for n in fs if n <= boundary}
    frames = pcap_frames(CAPTURE)
    assert pcap_frames(out) == [f for i, f in enumerate(frames, 1) if i not in drop]
    s = _summary(so)
    # B's keep counts the packets it decided from the reload on (kept decisions included)
    assert s["rules"] == [
        {"name": "keep", "action": "drop", "hits": len({n for n in drop if n > boundary})}
    ]
    assert s["rule_reloads"] == 1


def test_fields_a_reloadable_set_cannot_read_are_positioned(tmp_path: Path) -> None:
    """TCP options have no fixed place: a reloadable set cannot read them (RG010 at the name)."""
    r = tmp_path / "opt.rules.yaml"
    r.write_text('rules:\n  - {name: mss, match: "tcp.mss == 1460", action: drop}\n')
    p = rubikgen(
        "build", str(STACK), "--rules", str(r), "--rules-reload", "-o", str(tmp_path / "b")
    )
    assert p.returncode == 1
    assert f"{r}:2:25: error[RG010]: 'tcp.mss' is not at a fixed place" in p.stderr, p.stderr
    p = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(tmp_path / "b"))
    assert p.returncode == 0, p.stderr  # compiled in, the option can be matched


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_reload_on_two_workers_swaps_every_context(
    reload_binary: tuple[Path, Path], tmp_path: Path
) -> None:
    """--workers 2: each worker swaps its own context's set on its own thread. The writer
    stops after a third of the capture (the input idles, the workers take the request while
    no packet arrives), the reload is acknowledged, then the rest follows: every frame up to
    the third is judged by A, every later one by B, on whichever worker its flow hashes to."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    binary, _ = reload_binary
    b = tmp_path / "b.rules.yaml"
    b.write_text(RULES_B, encoding="utf-8")
    head, records = pcap_records(CAPTURE)
    third = len(records) // 3
    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out.pcap"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [str(binary), str(fifo), "--workers", "2", "--nf", "streams", "--out",
         str(tmp_path / "run"), "--control", str(sock), "--write", str(out), "--summary",
         "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with open(fifo, "wb", buffering=0) as f:
            f.write(head + b"".join(records[:third]))
            deadline = time.monotonic() + 30
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(1.0)  # the binary takes in what was written (milliseconds of work)
            p = rubikgen("ctl", str(sock), "rules", "reload", str(b))
            assert p.returncode == 0, p.stderr
            assert p.stdout.split()[:4] == ["loaded", "1", "rules", "of"], p.stdout
            f.write(b"".join(records[third:]))
    finally:
        so, se = proc.communicate(timeout=120)
    assert proc.returncode == 0, se
    got_b = check_written(out, third, len(records))
    s = _summary(so)
    assert s["packets"] == len(records)
    assert s["rule_reloads"] == 1  # one reload (every worker applied it: the frames above)
    assert s["rules"] == [{"name": "dns", "action": "drop", "hits": got_b}]
