"""The afxdp source (AF_XDP sockets through libxdp) against libpcap and the file.

A veth pair in a network namespace; tcpreplay sends a real capture into va, the sources read:

- srcdump (runtime-c/tests/srcdump.c) on `--io afxdp` on vb and, during the same replay,
  `--io live` (libpcap) on va, the sending end (libpcap on vb would see nothing: an XDP
  redirect to an AF_XDP socket takes the frame before the kernel's packet taps): both files
  hold the capture's frames byte for byte, with their lengths. On the MTU-16000 pair veth's
  native XDP refuses a program without multi-buffer support, so the source takes generic
  (skb) XDP, in copy mode; a frame longer than a UMEM chunk's room (4096 bytes less the
  kernel's 256 of headroom) is dropped by the kernel and counted in the source's drops.
- On a pair of two queues (MTU 3000): native XDP, copy mode (veth has no zero-copy);
  `--queues 2` (one socket per queue, as `--workers 2`): every frame once, over both
  sockets, each queue's frames those the sending end put on the same queue number (veth
  hands a frame to the peer's RX queue of the TX queue it was sent on).
- The tcp_ip stack with the streams NF on `--io afxdp`, one worker and two: the summary and
  the flow records are those of the run on the capture file itself.
- `rubikgen run --iface vb --io afxdp`.
- Errors: no such interface, a queue the interface lacks, a bad --xdp-mode, a filter.

Skipped, with the reason, without root, `ip`, tcpreplay or network namespaces (conftest.py),
without libxdp (pkg-config), or where the kernel refuses AF_XDP sockets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.multicore import parse
from support.oracle.tshark import REPO, TRACES
from support.sources import (
    Frame,
    Netns,
    _build,
    _file_run,
    _records,
    _replay,
    _summary_lines,
    _tree,
    _without_workers_line,
    read_pcap,
    srcdump_finish,
    srcdump_start,
    srcdump_stats,
)

# replays: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial

# plain, VLAN-tagged, IPv4 fragments, IPv6 with 3,633-byte frames, VXLAN with one of 9,100
CAPTURES = [
    "mixed-android-mobile.pcap",
    "vlan-http-syn-retransmit.pcap",
    "ipv4-frag-socks5-http.pcap",
    "ipv6-http-gquic.pcap",
    "vxlan-http.pcap",
    "arp-icmp-vlan.pcap",
]
ROOM = 4096 - 256  # a UMEM chunk less XDP_PACKET_HEADROOM: the longest frame copy mode takes


@pytest.fixture(scope="module")
def afxdp(srcdump: Path, netns: Netns) -> Path:
    """srcdump with the afxdp source, where the kernel takes AF_XDP sockets."""
    if subprocess.run(["pkg-config", "--exists", "libxdp", "libbpf"]).returncode != 0:
        pytest.skip("libxdp is not installed (pkg-config; apt-get install libxdp-dev libbpf-dev)")
    r = netns.run(
        str(srcdump), "--io", "afxdp", "--name", "vb", "-w", "/dev/null", "--duration", "0.2"
    )
    if r.returncode == 2 and "no source" in r.stderr:
        pytest.fail(f"srcdump was built without the afxdp source: {r.stderr}")
    if "Address family not supported" in r.stderr:
        pytest.skip(f"the kernel refuses AF_XDP sockets: {r.stderr.strip()}")
    return srcdump


def _detail(err: str) -> str:
    m = re.search(r"^detail=(.*)$", err, re.M)
    assert m, err
    return m[1]


@pytest.mark.parametrize("name", CAPTURES)
def test_afxdp_equals_libpcap_on_one_replay(
    netns: Netns, afxdp: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    sent = read_pcap(capture)
    fit = [(n, b) for n, b in sent if len(b) <= ROOM]
    runs = {
        "afxdp": srcdump_start(
            netns, afxdp, "afxdp", "vb", tmp_path / "afxdp.pcap", "--count", str(len(fit)),
            "--duration", "8",
        ),
        "live": srcdump_start(
            netns, afxdp, "live", "va", tmp_path / "live.pcap", "--count", str(len(sent)),
            "--duration", "30",
        ),
    }  # fmt: skip
    _replay(netns, capture)
    got: dict[str, list[Frame]] = {}
    errs = {io: srcdump_finish(p) for io, p in runs.items()}
    for io in runs:
        got[io] = read_pcap(tmp_path / f"{io}.pcap")
    st = srcdump_stats(errs["afxdp"])
    # libpcap on the sending end: what tcpreplay sent, whole
    assert got["live"] == [(len(b), b) for _, b in sent]
    # AF_XDP: the same frames, those a chunk holds; the others dropped by the kernel, counted
    assert got["afxdp"] == [x for x in got["live"] if len(x[1]) <= ROOM]
    assert st["frames"] == len(fit) and st["dropped"] == len(sent) - len(fit), st
    detail = _detail(errs["afxdp"])
    assert detail.startswith("copy mode, generic (skb) XDP, libxdp's XDP program, queue 0")
    assert f"the kernel's: {len(sent) - len(fit)} dropped, 0 RX ring full" in detail
    if name == "vxlan-http.pcap":  # the capture has a frame no chunk holds
        assert len(fit) < len(sent)
    if name.startswith(("vlan", "arp-icmp-vlan")):  # tags in place (XDP sees the wire bytes)
        assert any(b[12:14] == b"\x81\x00" for _, b in got["afxdp"])
    # nanosecond arrival times, in order
    ts = [t for t in _times(tmp_path / "afxdp.pcap")]
    assert ts == sorted(ts) and abs(ts[-1] / 1e9 - time.time()) < 120


def _times(path: Path) -> list[int]:
    """The nanosecond timestamps of a pcap file srcdump wrote."""
    data = path.read_bytes()
    assert data[:4] == b"\x4d\x3c\xb2\xa1"  # nanosecond magic, little-endian
    out, off = [], 24
    while off + 16 <= len(data):
        sec, nsec, cap = (int.from_bytes(data[off + i : off + i + 4], "little") for i in (0, 4, 8))
        out.append(sec * 1_000_000_000 + nsec)
        off += 16 + cap
    return out


def test_afxdp_two_queues(netns_2q: Netns, afxdp: Path, tmp_path: Path) -> None:
    """Two sockets, queues 0 and 1, native XDP: every frame once; with a frame's TX queue on va
    (the kernel's flow hash: symmetric, so a TCP connection's both directions) picking vb's RX
    queue, both sockets receive and each flow stays on one."""
    ns = netns_2q
    seen_queues: set[int] = set()
    flows = 0
    for name in ("mixed-android-mobile.pcap", "ipv4-frag-socks5-http.pcap"):
        capture = TRACES / name
        sent = read_pcap(capture)
        out = tmp_path / f"{capture.stem}.pcap"
        p = srcdump_start(ns, afxdp, "afxdp", "vb", out, "--queues", "2", "--count", str(len(sent)),
                   "--duration", "30")  # fmt: skip
        assert p.stderr is not None and p.stderr.readline().strip() == "mode=hw"
        _replay(ns, capture)
        err = srcdump_finish(p)
        st = srcdump_stats(err)
        assert st["frames"] == len(sent) and st["dropped"] == 0, st
        assert _detail(err).startswith("copy mode, native XDP, libxdp's XDP program, queues 0-1")
        qs = [[b for _, b in read_pcap(Path(f"{out}.{q}"))] for q in range(2)]
        assert sorted(qs[0] + qs[1]) == sorted(b for _, b in sent)
        seen_queues |= {q for q in range(2) if qs[q]}
        where: dict[tuple[object, ...], set[int]] = {}
        for q, frames in enumerate(qs):
            for f in frames:
                pk = parse(f)
                if pk is not None and pk.ports and not pk.frag:
                    ends = sorted([(pk.src, pk.ports[0]), (pk.dst, pk.ports[1])])
                    where.setdefault((pk.proto, *ends), set()).add(q)
        assert all(len(w) == 1 for w in where.values()), where
        flows += len(where)
    assert seen_queues == {0, 1} and flows > 10


def _wait_xdp(ns: Netns, proc: subprocess.Popen[str], secs: float = 120) -> None:
    """Until an XDP program is attached to vb (the source's sockets are bound: libxdp attaches
    its program after the bind) and a little longer (the fill ring is filled after it)."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if "prog/xdp" in ns.run("ip", "-d", "link", "show", "vb").stdout:
            time.sleep(0.3)
            return
        if proc.poll() is not None:
            raise AssertionError(f"the stack ended before capturing: {proc.communicate()[1]}")
        time.sleep(0.05)
    raise AssertionError(f"no XDP program on vb within {secs:g} s")


@pytest.fixture(scope="module")
def afxdp_bin(tmp_path_factory: pytest.TempPathFactory, afxdp: Path) -> Path:
    out = tmp_path_factory.mktemp("afxdp-stack")
    r = _build(out, "afxdp")
    assert r.returncode == 0, r.stderr
    return out / "tcp_ip"


def _stack_run(
    ns: Netns, stack_bin: Path, tmp_path: Path, capture: Path, workers: int
) -> tuple[str, Path]:
    n = len(read_pcap(capture))
    out = tmp_path / f"afxdp-{workers}"
    cmd = [str(stack_bin), "--io", "afxdp", "--iface", "vb", "--count", str(n)]
    cmd += [*(["--workers", str(workers)] if workers > 1 else []), "--duration", "60"]
    cmd += ["--nf", "streams", "--out", str(out), "--no-timeouts"]
    summary = tmp_path / "summary.txt"
    with open(summary, "w") as f:
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, *cmd], stdout=f, stderr=subprocess.PIPE, text=True
        )
        _wait_xdp(ns, p)
        _replay(ns, capture)
        assert p.stderr is not None
        err = p.stderr.read()
        assert p.wait(timeout=90) == 0, err
    text = summary.read_text()
    assert re.search(r"^dropped +0 +\(frames the afxdp source lost .*copy mode", text, re.M), text
    return text, out


@pytest.mark.parametrize("name", ["mixed-android-mobile.pcap", "vlan-http-syn-retransmit.pcap"])
def test_stack_on_afxdp_equals_file_run(
    netns: Netns, netns_2q: Netns, afxdp_bin: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    want = _file_run(afxdp_bin, capture, tmp_path / "file")
    # one worker: the single context on the one queue of the first pair
    got, out = _stack_run(netns, afxdp_bin, tmp_path, capture, 1)
    assert _summary_lines(got) == _summary_lines(want)
    assert _tree(out) == _tree(tmp_path / "file")
    if name.startswith("vlan"):
        # its one connection is tagged one way and not the other: the kernel's flow hash,
        # which picks va's TX queue and so vb's RX queue, counts the tag and puts the two
        # directions on two queues (as RSS on a NIC may: runtime-c/README.md)
        return
    # two workers, a socket each on queues 0 and 1 of the second pair: the flows as the
    # kernel's flow hash put them on va's TX queues, each flow's both directions on one
    got, out = _stack_run(netns_2q, afxdp_bin, tmp_path, capture, 2)
    m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", got, re.M)
    assert m and int(m[1]) + int(m[2]) == len(read_pcap(capture)), got
    assert _summary_lines("\n".join(_without_workers_line(got))) == _summary_lines(
        "\n".join(_without_workers_line(want))
    )
    assert _records(out, "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")


def test_rubikgen_run_io_afxdp(netns: Netns, afxdp_bin: Path, tmp_path: Path) -> None:
    capture = TRACES / "http-post-upload.pcap"
    n = len(read_pcap(capture))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    build = tmp_path / "build"
    cmd = [sys.executable, "-m", "rubikgen", "run", str(REPO / "specs/stacks/tcp_ip.yaml")]
    cmd += ["--build-dir", str(build), "--iface", "vb", "--io", "afxdp"]
    cmd += ["--count", str(n), "--duration", "60", "--nf", "streams"]
    cmd += ["--out", str(tmp_path / "afxdp"), "--", "--no-timeouts"]
    b = subprocess.run(
        [sys.executable, "-m", "rubikgen", "build", str(REPO / "specs/stacks/tcp_ip.yaml")]
        + ["--io", "afxdp", "--out-dir", str(build)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert b.returncode == 0, b.stderr
    p = subprocess.Popen(
        ["ip", "netns", "exec", netns.name, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    _wait_xdp(netns, p)
    _replay(netns, capture)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert re.search(rf"^packets +{n}$", out, re.M), out
    _file_run(build / "tcp_ip", capture, tmp_path / "file")
    assert _records(tmp_path / "afxdp", "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")
    r = subprocess.run(
        [*cmd[:5], "--io", "afxdp", str(capture)], capture_output=True, text=True, env=env
    )
    assert r.returncode != 0 and "--io afxdp reads an interface" in r.stderr, r.stderr


def test_afxdp_errors_are_clear(
    netns: Netns, afxdp: Path, afxdp_bin: Path, stack_bin: Path
) -> None:
    base = [str(afxdp), "--io", "afxdp", "-w", "/dev/null"]
    r = netns.run(*base, "--name", "nosuch0")
    assert r.returncode == 1 and "afxdp: cannot capture on nosuch0: no such interface" in r.stderr
    r = netns.run(*base, "--name", "vb", "--opt", "queue=3")
    assert r.returncode == 1 and "afxdp: vb has 1 RX queue: no queue 3" in r.stderr, r.stderr
    r = netns.run(*base, "--name", "vb", "--queues", "2")
    assert r.returncode == 1, r.stderr
    assert "vb has 1 RX queue: queues 0 to 1 (--queue 0, --workers 2) are not all there" in r.stderr
    r = netns.run(*base, "--name", "vb", "--filter", "tcp")
    assert r.returncode == 1 and "afxdp: no BPF filter (--filter)" in r.stderr, r.stderr
    stack = [str(afxdp_bin), "--io", "afxdp", "--iface", "vb"]
    for args, msg in (
        (["--xdp-mode", "hw"], "invalid value 'hw' for --xdp-mode"),
        (["--queue", "x"], "--queue"),
        (["--frames", "1000"], "--frames 1000: a power of 2, 64 to 1048576"),
        (["--workers", "2", "--pin"], "--pin: each worker reads its socket"),
    ):
        r = subprocess.run([*stack, *args], capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = netns.run(*stack, "--queue", "5", "--duration", "1")
    assert r.returncode == 1 and "afxdp: vb has 1 RX queue: no queue 5" in r.stderr, r.stderr
    # a binary built without the source says how to get it
    r = subprocess.run([str(stack_bin), *stack[1:]], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "this binary has no AF_XDP source (build it with rubikgen build --io afxdp)" in r.stderr


# most of tests/e2e/test_xdp.py's tcp_ip rules: ports, a prefix, protocols
XDP_RULES = """\
rules:
  - {name: no-https, match: "tcp.dport == 443 || tcp.sport == 443", action: drop}
  - {name: net10-udp, match: "ip.saddr == 10.0.0.0/8 && udp", action: drop}
  - {name: icmp, match: "icmp || icmp6", action: drop}
  - {name: web-in, match: "tcp.sport == 80 && ip.daddr == 10.0.0.0/8", action: count}
  - {name: web, match: "tcp.dport == 80", action: drop}
  - {name: alt-web-out, match: "tcp.sport == 8080", action: drop}
"""


def test_afxdp_under_the_stacks_xdp_program(netns: Netns, afxdp: Path, tmp_path: Path) -> None:
    """`rubikgen build --xdp --rules R` attached to vb (generic mode: the pair's MTU), the afxdp
    source puts its socket in the program's rg_xsks (no program of libxdp's): the frames it
    receives are those the user-space stack with the same rules keeps (`--write`), frame for
    frame; closed, it takes its socket out again, and the frames go up the kernel's stack."""
    for tool in ("clang-14", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (ci/setup.sh --test)")
    rules = tmp_path / "rules.yaml"
    rules.write_text(XDP_RULES)
    spec = str(REPO / "specs/stacks/tcp_ip.yaml")
    rg = [sys.executable, "-m", "rubikgen", "build", spec, "--rules", str(rules)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([*rg, "--xdp", "-o", str(tmp_path / "xdp")], capture_output=True,
                       text=True, cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    obj = r.stdout.strip()
    u = subprocess.run([*rg, "-o", str(tmp_path / "user")], capture_output=True, text=True,
                       cwd=REPO, env=env)  # fmt: skip
    assert u.returncode == 0, u.stderr
    user = u.stdout.strip().splitlines()[-1]
    runner = tmp_path / "xdp_run"
    src = REPO / "tests" / "support" / "xdp" / "xdp_run.c"
    subprocess.run(["cc", "-O1", "-o", str(runner), str(src), "-lbpf"], check=True)
    # --hold: the runner keeps rg_progs open (the tail calls) until its input closes
    hold = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            netns.name,
            str(runner),
            obj,
            "--attach",
            "vb",
            "generic",
            "--hold",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert hold.stdout is not None and hold.stdout.readline().startswith("attached vb")
    try:
        for name in ("http-post-upload.pcap", "mixed-android-mobile.pcap"):
            capture = TRACES / name
            kept = tmp_path / f"{capture.stem}.user.pcap"
            w = subprocess.run([user, str(capture), "--write", str(kept)], capture_output=True,
                               text=True)  # fmt: skip
            assert w.returncode == 0, w.stderr
            want = read_pcap(kept)
            assert 0 < len(want) < len(read_pcap(capture))  # the rules drop some, not all
            out = tmp_path / f"{capture.stem}.afxdp.pcap"
            p = srcdump_start(netns, afxdp, "afxdp", "vb", out, "--count", str(len(want)),
                       "--duration", "20")  # fmt: skip
            _replay(netns, capture)
            err = srcdump_finish(p)
            assert _detail(err).startswith(
                "copy mode, generic (skb) XDP, the stack's XDP program (rg_xsks), queue 0"
            ), err
            assert read_pcap(out) == want
            assert srcdump_stats(err)["dropped"] == 0
        # the socket is out of rg_xsks again: libpcap on vb sees what the rules pass
        live = tmp_path / "live.pcap"
        capture = TRACES / "http-post-upload.pcap"
        p = srcdump_start(netns, afxdp, "live", "vb", live, "--duration", "8")
        _replay(netns, capture)
        srcdump_finish(p)
        assert read_pcap(live) == read_pcap(tmp_path / f"{capture.stem}.user.pcap")
    finally:
        assert hold.stdin is not None
        hold.stdin.close()
        hold.wait(timeout=30)
        netns.run("ip", "link", "set", "dev", "vb", "xdpgeneric", "off")
