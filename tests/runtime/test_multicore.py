"""--workers N on DPDK ports: N stack contexts on N worker lcores, fed by the source's queues.

DPDK's virtual devices (net_pcap reading a real capture; no hugepages, no NIC) have no RSS, so
the source distributes in software: the main lcore hashes every frame with the symmetric
Toeplitz hash and hands the mbuf to its worker through an rte_ring (rg_source_dpdk.c).

- For every Ethernet capture of the tshark comparison, `--workers 1` writes byte-identical
  streams, the same flow records (uids too) and the same summary as the single-threaded file
  run, and `--workers 2` the same flow records (uid aside: DPDK frames are not numbered, so the
  merge orders instances by their time stamps) and streams, the summary adding the frames per
  worker.
- Every frame of a flow (both directions) and every fragment of a datagram (IPv4 and IPv6)
  reach one queue: srcdump --queues N writes what each worker would get; the test parses the
  frames itself, groups them by 5-tuple and by fragment identity, and checks each frame's queue
  against a Toeplitz hash written here from Microsoft's RSS specification.
- Too few lcores for the workers: a clear error.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.multicore import (
    SYMMETRIC_KEY,
    _eal_workers,
    parse,
    toeplitz,
)
from support.oracle.tshark import REPO, TRACES
from support.sources import (
    Netns,
    _eal,
    _ethernet_eligible,
    _file_run,
    _records,
    _replay,
    _summary_lines,
    _tree,
    _wait_capturing,
    _without_workers_line,
    read_pcap,
)


def _dpdk_workers_run(
    binary: Path, capture: Path, out: Path, workers: int, tmp: Path, *extra: str
) -> str:
    n = len(read_pcap(capture))
    cmd = [str(binary), "--io", "dpdk", "--count", str(n), "--duration", "60", *extra]
    cmd += ["--workers", str(workers), "--nf", "streams", "--out", str(out), "--no-timeouts"]
    cmd += ["--", *_eal_workers(tmp, workers, f"net_pcap0,rx_pcap={capture}")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", _ethernet_eligible())
def test_dpdk_workers_write_what_the_file_run_writes(
    dpdk: Path,  # noqa: F811
    stack_bin: Path,  # noqa: F811
    tmp_path: Path,
    name: str,
) -> None:
    capture = TRACES / name
    want = _file_run(stack_bin, capture, tmp_path / "file")
    n = len(read_pcap(capture))
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        # two workers with burst stage 1 over each queue's bursts (on these small tables too)
        extra = ["--prefetch-always"] if workers == 2 else []
        got = _dpdk_workers_run(stack_bin, capture, out, workers, tmp_path, *extra)
        assert re.search(r"^dropped +0 ", got, re.M), got
        assert _summary_lines("\n".join(_without_workers_line(got))) == _summary_lines(
            "\n".join(_without_workers_line(want))
        )
        if workers == 1:
            # one worker: the same instances, uids and all (records in the merge's order, each
            # with its worker)
            assert _flow_lines(out) == _flow_lines(tmp_path / "file")
            files = _tree(out)
            del files["flows.jsonl"]
            want_files = _tree(tmp_path / "file")
            del want_files["flows.jsonl"]
            assert files == want_files
        else:
            m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", got, re.M)
            assert m and int(m[1]) + int(m[2]) == n, got
            assert _records(out, "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")


def _flow_lines(out: Path) -> list[str]:
    """flows.jsonl's lines, sorted, without the "worker" member --workers adds."""
    lines = (out / "flows.jsonl").read_text().splitlines()
    return sorted(re.sub(r',"worker":\d+\}$', "}", ln) for ln in lines)


def test_dpdk_workers_need_lcores(dpdk: Path, stack_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    capture = TRACES / "http-post-upload.pcap"
    cmd = [str(stack_bin), "--io", "dpdk", "--count", "1", "--workers", "2", "--"]
    cmd += _eal(tmp_path, f"net_pcap0,rx_pcap={capture}")  # -l 0: the main lcore alone
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 1
    assert "worker 0 has no lcore" in r.stderr and "-l 0-2" in r.stderr, r.stderr


# ---- one flow, one worker -------------------------------------------------------------------


def test_toeplitz_matches_the_specification_vectors() -> None:
    # Microsoft's verification suite (IPv4, addresses only) with its default key
    key = bytes.fromhex(
        "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa"
    )
    src, dst = ipaddress.ip_address("66.9.149.187"), ipaddress.ip_address("161.142.100.80")
    assert toeplitz(key, src.packed + dst.packed) == 0x323E8FC2


def _fragmented_ipv6(path: Path) -> None:
    """A capture of IPv6 UDP datagrams fragmented in three, both directions, between several
    host pairs, interleaved (scapy builds it; nothing of ours)."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    frames = []
    for i in range(12):
        a, b = f"2001:db8::{i + 1:x}", f"2001:db8:1::{7 * i + 3:x}"
        for src, dst in ((a, b), (b, a)):
            pkt = (
                IPv6(src=src, dst=dst)
                / IPv6ExtHdrFragment(id=1000 + i)
                / UDP(sport=4000 + i, dport=53)
                / (b"x" * 2400)
            )
            frames.append(
                [
                    Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / f
                    for f in fragment6(pkt, 1000)
                ]
            )
    out = []
    while any(frames):  # round-robin: datagrams interleaved
        for fr in frames:
            if fr:
                out.append(fr.pop(0))
    wrpcap(str(path), out)


@pytest.mark.parametrize("queues", [2, 3])
def test_a_flow_and_a_datagram_reach_one_worker(
    dpdk: Path,  # noqa: F811
    tmp_path: Path,
    queues: int,
) -> None:
    v6frag = tmp_path / "ipv6-frags.pcap"
    _fragmented_ipv6(v6frag)
    captures = [
        v6frag,
        TRACES / "ipv4-frag-tcp-overlap-ooo-crafted.pcap",
        TRACES / "gtp-u-http-outer-frag.pcap",
        TRACES / "ipv4-frag-socks5-http.pcap",
        TRACES / "mixed-android-mobile.pcap",
        TRACES / "ipv6-http-gquic.pcap",
    ]
    seen = {"v4frag": 0, "v6frag": 0, "two-way flows": 0}
    used: set[int] = set()
    for cap in captures:
        sent = [b for _, b in read_pcap(cap)]
        out = tmp_path / f"{cap.stem}-queue.pcap"
        cmd = [str(dpdk), "--io", "dpdk", "--queues", str(queues), "--count", str(len(sent))]
        cmd += ["--duration", "30", "-w", str(out), "--"]
        cmd += _eal(tmp_path, f"net_pcap0,rx_pcap={cap}")
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "mode=sw" in r.stderr  # net_pcap has no RSS: the software distributor
        got = {q: [b for _, b in read_pcap(Path(f"{out}.{q}"))] for q in range(queues)}
        # every frame once, each queue in input order
        assert sorted(b for fs in got.values() for b in fs) == sorted(sent)
        for fs in got.values():
            it = iter(sent)
            assert all(any(f == s for s in it) for f in fs), f"{cap.name}: order"
        groups: dict[tuple[object, ...], set[int]] = {}
        senders: dict[tuple[object, ...], set[bytes]] = {}
        for q, fs in got.items():
            used |= {q} if fs else set()
            for f in fs:
                p = parse(f)
                if p is None:
                    continue
                # the worker a symmetric-RSS NIC hashing addresses picks (128-entry RETA)
                want = (toeplitz(SYMMETRIC_KEY, p.src + p.dst) & 127) % queues
                assert q == want, f"{cap.name}: a frame of {p.src.hex()}->{p.dst.hex()}"
                if p.frag:
                    key: tuple[object, ...] = ("frag", *p.frag)
                    seen["v6frag" if len(p.src) == 16 else "v4frag"] += 1
                elif p.ports:
                    ends = sorted([(p.src, p.ports[0]), (p.dst, p.ports[1])])
                    key = ("flow", p.proto, *ends)
                else:
                    continue
                groups.setdefault(key, set()).add(q)
                senders.setdefault(key, set()).add(p.src)
        for key, qs in groups.items():
            assert len(qs) == 1, f"{cap.name}: {key} on queues {sorted(qs)}"
        seen["two-way flows"] += sum(1 for k, s in senders.items() if k[0] == "flow" and len(s) > 1)
    # the captures did exercise what the test is about, over every queue
    assert seen["v4frag"] > 10 and seen["v6frag"] >= 72 and seen["two-way flows"] > 20, seen
    assert used == set(range(queues))


def test_pinned_file_workers(stack_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    # --pin: threads pinned round-robin even with fewer cores than threads; same records
    capture = TRACES / "mixed-android-mobile.pcap"
    one = _file_run(stack_bin, capture, tmp_path / "one")
    cmd = [str(stack_bin), str(capture), "--workers", "3", "--pin", "--nf", "streams"]
    r = subprocess.run(
        [*cmd, "--out", str(tmp_path / "pin"), "--no-timeouts"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert _without_workers_line(r.stdout) == _without_workers_line(one)
    assert _records(tmp_path / "pin", "flows.jsonl") == _records(tmp_path / "one", "flows.jsonl")
    r = subprocess.run(
        [str(stack_bin), "--io", "dpdk", "--pin", "--", "-l", "0"], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "--pin: DPDK workers run on the EAL's lcores" in r.stderr, r.stderr


def test_pin_sets_each_threads_core(stack_bin: Path) -> None:  # noqa: F811
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root")
    allowed = sorted(os.sched_getaffinity(0))
    cmd = [str(stack_bin), "--io", "live", "--iface", "lo", "--duration", "2"]
    p = subprocess.Popen(
        [*cmd, "--workers", "3", "--pin", "--nf", "none"], stdout=subprocess.DEVNULL
    )
    try:
        cores: list[str] = []
        for _ in range(100):  # until the reader and its 3 workers run
            time.sleep(0.05)
            tasks = sorted(Path(f"/proc/{p.pid}/task").iterdir(), key=lambda t: int(t.name))
            if len(tasks) >= 4:
                time.sleep(0.1)  # the workers are pinned right after they start
                cores = [
                    re.search(r"^Cpus_allowed_list:\s*(\S+)", (t / "status").read_text(), re.M)[1]  # type: ignore[index]
                    for t in tasks
                ]
                break
    finally:
        assert p.wait(timeout=30) == 0
    # the reader on the first allowed core, worker i on the (i + 1)-th, round-robin
    assert cores == [str(allowed[i % len(allowed)]) for i in range(4)], cores


# ---- rubikgen run on the wire ---------------------------------------------------------------
#
# `rubikgen run` builds (here: finds up to date, the build directory of stack_bin) and runs the
# binary on an interface or DPDK ports; what it writes is the file run's.


def _rubikgen_run(build_dir: Path, *args: str, ns: str | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "rubikgen", "run", str(REPO / "specs/stacks/tcp_ip.yaml")]
    cmd += ["--build-dir", str(build_dir), "--summary", "full", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )


@pytest.mark.parametrize("lcores", ["given", "default"])
def test_run_dpdk_workers(dpdk: Path, stack_bin: Path, tmp_path: Path, lcores: str) -> None:  # noqa: F811
    """`rubikgen run --dpdk EAL --workers 2`, with an lcore list, and without one (`rubikgen
    run` maps the main lcore and both workers onto this machine's cores, two in CI)."""
    capture = TRACES / "ipv4-frag-socks5-http.pcap"
    one = _file_run(stack_bin, capture, tmp_path / "file")
    args = _eal_workers(tmp_path, 2, f"net_pcap0,rx_pcap={capture}")
    if lcores == "default":  # no -l, -c or --lcores
        i = args.index("--lcores")
        args = [*args[:i], *args[i + 2 :]]
    eal = " ".join(args)
    n = str(len(read_pcap(capture)))
    p = _rubikgen_run(
        stack_bin.parent,
        *("--dpdk", eal, "--workers", "2", "--count", n, "--duration", "60"),
        *("--nf", "streams", "--out", str(tmp_path / "dpdk"), "--", "--no-timeouts"),
    )
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "rebuilt" not in err  # the stack_bin build, up to date
    assert re.search(r"^workers +2 ", out, re.M), out
    assert _summary_lines("\n".join(_without_workers_line(out))) == _summary_lines(
        "\n".join(_without_workers_line(one))
    )
    assert _records(tmp_path / "dpdk", "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")


def test_run_capture_workers(stack_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    capture = TRACES / "mixed-android-mobile.pcap"
    one = _file_run(stack_bin, capture, tmp_path / "file")
    p = _rubikgen_run(
        stack_bin.parent,
        *(str(capture), "--workers", "2", "--nf", "streams", "--out", str(tmp_path / "w")),
        *_same_io(stack_bin),
        *("--", "--no-timeouts"),
    )
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "rebuilt" not in err
    assert re.search(r"^workers +2 ", out, re.M), out
    assert _without_workers_line(out) == _without_workers_line(one)
    assert _records(tmp_path / "w", "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")


def _same_io(binary: Path) -> list[str]:
    """--io as stack_bin was built, so that `rubikgen run` finds it up to date."""
    has_dpdk = "librgdpdk" in binary.with_suffix(".stamp").read_text(errors="replace")
    return ["--io", "dpdk"] if has_dpdk else []


@pytest.mark.serial  # a tcpreplay replay: alone, after the parallel part (ci/test.sh)
def test_run_iface(netns: Netns, stack_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    capture = TRACES / "mixed-android-mobile.pcap"
    _file_run(stack_bin, capture, tmp_path / "file")
    sent = read_pcap(capture)
    ipv4 = [b for _, b in sent if b[12:14] == b"\x08\x00"]
    assert 0 < len(ipv4) < len(sent)
    p = _rubikgen_run(
        stack_bin.parent,
        *("--iface", "vb", "--bpf", "ip", "--count", str(len(ipv4)), "--duration", "60"),
        *("--nf", "streams", "--out", str(tmp_path / "live"), *_same_io(stack_bin)),
        *("--", "--no-timeouts"),
        ns=netns.name,
    )
    _wait_capturing(netns)
    _replay(netns, capture)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert re.search(r"^dropped +0 ", out, re.M), out
    assert re.search(rf"^packets +{len(ipv4)}$", out, re.M), out
    # the IPv4 flows of the file run, exactly: the filter passed them and nothing else
    file_records = _records(tmp_path / "file", "flows.jsonl")
    want = [r for r in file_records if ":" not in json.loads(r)["src"]]
    assert 0 < len(want) < len(file_records)
    got = _records(tmp_path / "live", "flows.jsonl")
    assert got == want
    assert got


def test_run_source_errors(tmp_path: Path) -> None:
    cases = [
        ([], "name one source"),
        (["x.pcap", "--iface", "lo"], "name one source"),
        (["--dpdk", "-l 0", "--bpf", "tcp"], "--bpf applies to --iface"),
        (["--iface", "lo", "--workers", "0"], "--workers wants a positive number"),
    ]
    for args, msg in cases:
        p = _rubikgen_run(tmp_path, *args)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 2, (args, err)
        assert msg in err, (args, err)


def test_bench_workers_split_as_a_symmetric_rss_nic(stack_bin: Path) -> None:  # noqa: F811
    # --bench --workers N: the capture split by the hash before timing; each share processed
    # by its own context: the same payload as one context, the split a NIC's
    capture = TRACES / "mixed-android-mobile.pcap"
    base = [str(stack_bin), str(capture), "--bench", "--passes", "1", "--nf", "count"]
    one = json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)
    frames = [b for _, b in read_pcap(capture)]
    for n in (1, 2, 3):
        r = subprocess.run([*base, "--workers", str(n)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        want = [0] * n
        for f in frames:
            p = parse(f)
            want[(toeplitz(SYMMETRIC_KEY, p.src + p.dst) & 127) % n if p else 0] += 1
        assert got["workers"] == n and got["pkts"] == len(frames)
        assert got["worker_pkts"] == want
        assert got["payload_bytes"] == one["payload_bytes"] > 0
        assert got["flows_opened"] == one["flows_opened"]
