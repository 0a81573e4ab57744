"""`rubikgen run STACK --iface IF --xdp`: the stack's XDP program on the capture interface
(runtime-c/main/rg_xdp.c, docs/xdp.md), on a veth pair in a network namespace (the `netns`
fixture, MTU 1500 here: XDP without multi-buffer support), tcpreplay sending a real capture
into va, the stack reading vb through libpcap, in generic and native mode:

- a rule set dropping one port: the frames the kernel dropped (rg_stats, the summary's "xdp")
  are tshark's frames of that port, and dropped + seen in user space = frames sent; the
  streams of every other flow equal tshark's;
- an NF bypassing each TCP flow after 2000 bytes (tests/support/xdp/bypass_nf.c): the later
  frames of those flows never reach user space (kernel bypassed + seen in user space = frames
  sent), and yet the flowstats records carry, per direction, the packets tshark counts for
  each of those flows (the kernel's counts read back when the flows end); the streams of the
  flows never bypassed equal tshark's;
- the program is detached after SIGINT; errors: --xdp without --iface, an interface with an
  XDP program already.

Skipped, with the reason, without root, `ip`, tcpreplay, network namespaces or libbpf.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.oracle import reference_flows
from support.oracle.tshark import REPO, TRACES
from support.sources import Netns, _replay, _wait_capturing, read_pcap

# replays: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
# real phone traffic: TLS on 443 (most frames), DNS, NTP, IPv6 UDP; frames of at most 1484 bytes
CAPTURE = TRACES / "mixed-android-mobile.pcap"
RULES = (
    'rules:\n  - {name: no-https, match: "tcp.dport == 443 || tcp.sport == 443", action: drop}\n'
)
AFTER = 2000  # bypass_nf's threshold: bytes of the TCP layer's input, both directions
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def xns(netns: Netns) -> Iterator[Netns]:
    if subprocess.run(["pkg-config", "--exists", "libbpf"]).returncode != 0:
        pytest.skip("--xdp needs libbpf (ci/setup.sh installs libbpf-dev)")
    for dev in ("va", "vb"):  # native XDP on a veth wants frames that fit a page
        subprocess.run(["ip", "-n", netns.name, "link", "set", dev, "mtu", "1500"], check=True)
    yield netns
    for dev in ("va", "vb"):
        subprocess.run(["ip", "-n", netns.name, "link", "set", dev, "mtu", "16000"], check=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("xdp_run")
    so = d / "bypass_nf.so"
    src = REPO / "tests" / "support" / "xdp" / "bypass_nf.c"
    subprocess.run(["cc", "-shared", "-fPIC", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'runtime-c' / 'include'}", str(src), "-o", str(so)],
                   check=True)  # fmt: skip
    rules = d / "rules.yaml"
    rules.write_text(RULES)
    chain = d / "chain.yaml"
    chain.write_text(f"chain:\n  - nf: flowstats\n  - nf: {so}\n    params: {{after: '{AFTER}'}}\n")
    return {"dir": d, "rules": rules, "chain": chain}


def _xdp_attached(ns: Netns) -> bool:
    return "prog/xdp" in ns.run("ip", "-d", "link", "show", "vb").stdout


def _run(
    ns: Netns, build: Path, out: Path, mode: str, *extra: str, binary: tuple[str, ...] = ()
) -> dict[str, object]:
    """`rubikgen run --xdp` on vb during one replay of CAPTURE; its JSON summary."""
    cmd = [sys.executable, "-m", "rubikgen", "run", str(STACK), "--iface", "vb", "--xdp"]
    cmd += ["--xdp-mode", mode, "--build-dir", str(build), "--out", str(out)]
    cmd += ["--summary", "json", "--nf", "streams", *extra, "--", "--no-timeouts", *binary]
    p = subprocess.Popen(["ip", "netns", "exec", ns.name, *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)  # fmt: skip
    try:
        # the build first (seconds to a minute on a loaded machine), then the capture opens
        _wait_capturing(ns, 300, p)
        end = time.monotonic() + 30
        while not _xdp_attached(ns) and p.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        _replay(ns, CAPTURE)
        time.sleep(1)  # the last frames read
    finally:
        p.send_signal(signal.SIGINT)  # the run stops, flushes, detaches, summarises
        so, se = p.communicate(timeout=120)
    assert p.returncode == 0, se
    assert not _xdp_attached(ns), "the program stayed attached after the run"
    summary: dict[str, object] = json.loads(so.strip().splitlines()[-1])
    return summary


def _tshark(*args: str) -> list[list[str]]:
    r = subprocess.run(["tshark", "-r", str(CAPTURE), *args], capture_output=True, text=True,
                       check=True)  # fmt: skip
    return [ln.split("\t") for ln in r.stdout.splitlines()]


Tuple = tuple[str, int, str, int]


def _tcp_frames() -> list[tuple[Tuple, int]]:
    """Each IPv4 TCP frame, in order: (src, sport, dst, dport) and its TCP header + payload."""
    rows = _tshark("-Y", "ip && tcp && !icmp", "-T", "fields", "-e", "ip.src", "-e",
                   "tcp.srcport", "-e", "ip.dst", "-e", "tcp.dstport", "-e", "tcp.hdr_len",
                   "-e", "tcp.len")  # fmt: skip
    return [((a, int(sp), b, int(dp)), int(h) + int(n)) for a, sp, b, dp, h, n in rows]


def _streams(out: Path) -> set[tuple[str, int, str, int, int, str]]:
    recs = set()
    for ln in (out / "flows.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if r["proto"] == "tcp":
            recs.add((r["src"], r["sport"], r["dst"], r["dport"], r["bytes"], r["sha256"]))
    return recs


def _tshark_streams(
    keep: set[frozenset[tuple[str, int]]],
) -> set[tuple[str, int, str, int, int, str]]:
    """tshark's TCP directions (follow) of the connections in keep."""
    return {
        (f.src, f.sport, f.dst, f.dport, f.bytes, f.sha256)
        for f in reference_flows(CAPTURE)
        if f.proto == "tcp" and frozenset({(f.src, f.sport), (f.dst, f.dport)}) in keep
    }


def _conn(t: Tuple) -> frozenset[tuple[str, int]]:
    return frozenset({(t[0], t[1]), (t[2], t[3])})


@pytest.mark.parametrize("mode", ["generic", "native"])
def test_rule_drops_in_kernel(xns: Netns, files: dict[str, Path], mode: str) -> None:
    sent = len(read_pcap(CAPTURE))
    out = files["dir"] / f"rules-{mode}"
    s = _run(xns, files["dir"] / "b-rules", out, mode, "--rules", str(files["rules"]),
             binary=("--stats-interval", "5"))  # fmt: skip
    x = s["xdp"]
    assert isinstance(x, dict)
    assert x["mode"] == mode
    port = len(_tshark("-Y", "tcp.port == 443 && !icmp"))  # tshark's frames of the port
    assert port > sent // 2  # most of the capture: the drop is not vacuous
    assert x["packets"] == sent
    assert x["rule_drop"] == port
    assert s["dropped"] == 0  # libpcap kept up: every frame passed up was seen
    # dropped in the kernel + seen in user space (+ bypassed: none here) = sent
    assert x["rule_drop"] + x["flow_drop"] + x["bypass"] + s["packets"] == sent
    # the live counters' last line (stats.jsonl) has the program's counters too
    last = json.loads((out / "stats.jsonl").read_text().splitlines()[-1])
    assert last["final"] and last["total"]["xdp"]["rule_drop"] == x["rule_drop"]
    # the flows the rule leaves alone are inspected whole: their streams are tshark's
    conns = {_conn(t) for t, _ in _tcp_frames() if 443 not in (t[1], t[3])}
    assert conns
    assert _streams(out) == _tshark_streams(conns)


@pytest.mark.parametrize("mode", ["generic", "native"])
def test_bypass_after_bytes(xns: Netns, files: dict[str, Path], mode: str) -> None:
    sent = len(read_pcap(CAPTURE))
    out = files["dir"] / f"bypass-{mode}"
    s = _run(xns, files["dir"] / "b-plain", out, mode, "--chain", str(files["chain"]))
    x = s["xdp"]
    assert isinstance(x, dict)
    # which connections the NF bypasses: more than AFTER bytes of TCP header + payload
    total: Counter[frozenset[tuple[str, int]]] = Counter()
    per_dir: Counter[Tuple] = Counter()
    for t, n in _tcp_frames():
        total[_conn(t)] += n
        per_dir[t] += 1
    bypassed = {c for c, n in total.items() if n > AFTER}
    inspected = set(total) - bypassed
    assert bypassed and inspected
    assert x["bypass_flows"] == len(bypassed)
    assert x["bypass"] > 0 and x["flow_drop"] == 0 and x["rule_drop"] == 0
    # their later frames never reached user space: bypassed in the kernel + seen = sent
    assert x["bypass"] + s["packets"] == sent
    assert x["kernel_packets"] == x["bypass"]  # every one read back into its record
    # the records carry tshark's packets per direction, the kernel's frames included
    got: dict[frozenset[tuple[str, int]], list[Counter[Tuple]]] = defaultdict(list)
    for ln in (out / "flowstats.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if r["layer"] != "tcp":
            continue
        a: Tuple = (r["src"], r["sport"], r["dst"], r["dport"])
        b: Tuple = (a[2], a[3], a[0], a[1])
        got[_conn(a)].append(Counter({a: r["packets"][0], b: r["packets"][1]}))
    for c in bypassed:
        (rec,) = got[c]  # one instance per connection (no port reuse in this capture)
        want = Counter({t: n for t, n in per_dir.items() if _conn(t) == c})
        assert +rec == want, sorted(c)
    # the flows never bypassed were inspected whole: their streams are tshark's
    assert {r for r in _streams(out) if _conn(r[:4]) in inspected} == _tshark_streams(inspected)


def test_errors(xns: Netns, files: dict[str, Path]) -> None:
    cmd = [sys.executable, "-m", "rubikgen", "run", str(STACK), "--xdp", str(CAPTURE)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=REPO)
    assert r.returncode == 2 and "--xdp attaches to the capture interface" in r.stderr, r.stderr
    # an interface with an XDP program already: the kernel's refusal, said, no traceback
    obj = files["dir"] / "b-plain" / "tcp_ip_xdp.o"  # test_bypass_after_bytes's, or built here
    if not obj.is_file():
        b = [sys.executable, "-m", "rubikgen", "build", str(STACK), "--xdp", "-o", str(obj.parent)]
        assert subprocess.run(b, capture_output=True, env=ENV, cwd=REPO).returncode == 0
    runner = files["dir"] / "xdp_run"
    subprocess.run(["cc", "-O1", "-o", str(runner), str(REPO / "tests/support/xdp/xdp_run.c"),
                    "-lbpf"], check=True)  # fmt: skip
    a = xns.run(str(runner), str(obj), "--attach", "vb", "generic")
    assert a.returncode == 0, a.stderr
    try:
        cmd = [sys.executable, "-m", "rubikgen", "run", str(STACK), "--iface", "vb", "--xdp"]
        cmd += ["--build-dir", str(files["dir"] / "b-plain"), "--out", str(files["dir"] / "e")]
        r = subprocess.run(["ip", "netns", "exec", xns.name, *cmd], capture_output=True,
                           text=True, env=ENV, cwd=REPO, timeout=300)  # fmt: skip
        assert r.returncode == 1, r.stderr
        assert "cannot attach the program to vb" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    finally:
        xns.run("ip", "link", "set", "dev", "vb", "xdpgeneric", "off")
