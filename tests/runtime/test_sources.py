"""The live (libpcap) and DPDK packet sources against the captures replayed into them.

runtime-c/tests/srcdump.c reads frames from a source exactly as the driver does (rg_source.h:
open, next_burst until --count frames, stats, close) and writes them to a pcap file; the tests
compare that file, frame by frame and byte by byte, with the capture that went in, read by the
small independent pcap reader below.

- live: a veth pair inside a network namespace the test creates; tcpreplay sends a real
  capture into one end (rate-limited), the source captures on the other. IPv6 is disabled on
  the pair so the kernel sends nothing of its own. Also: a BPF filter (the frames it passes are
  those the test selects by EtherType itself), a filter that does not compile and an interface
  that does not exist (clear errors), SIGINT on an idle link (the source's timeout returns,
  the run ends cleanly), libpcap's drop counter (0).
- dpdk: DPDK's pcap virtual device reading a real capture (no hugepages, no NIC), one port and
  two, a port list, and a port that does not exist.

Skipped, with the reason, only where the facility is absent: not root or no `ip` / tcpreplay /
network namespaces (live); pkg-config finds no libdpdk (dpdk).
"""

from __future__ import annotations

import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from support.oracle.tshark import TRACES
from support.sources import (
    Netns,
    _build,
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

# replays and paced input: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial


# Ethernet captures replayed live: plain, VLAN-tagged, IPv4 fragments, IPv6 and frames of up
# to 9100 bytes (the veth MTU is raised for them)
LIVE_CAPTURES = [
    "mixed-android-mobile.pcap",
    "vlan-http-syn-retransmit.pcap",
    "ipv4-frag-socks5-http.pcap",
    "ipv6-http-gquic.pcap",
    "vxlan-http.pcap",
]
# DPDK: the same, plus frames larger than one mbuf (3633 bytes: several segments)
DPDK_CAPTURES = [*LIVE_CAPTURES, "6in4-tcp-tls.pcap", "tcp-retransmissions.pcap"]


def pcap_times(path: Path) -> list[int]:
    """The frame times of a pcap file srcdump wrote (little-endian, nanoseconds), in ns."""
    data = path.read_bytes()
    assert data[:4] == b"\x4d\x3c\xb2\xa1", "srcdump writes nanosecond pcap"
    times, off = [], 24
    while off + 16 <= len(data):
        sec, nsec, incl, _ = struct.unpack("<IIII", data[off : off + 16])
        times.append(sec * 1_000_000_000 + nsec)
        off += 16 + incl
    return times


def _check_times(path: Path, t0: int, t1: int) -> None:
    """Wall-clock times taken while the frames arrived, in order."""
    times = pcap_times(path)
    assert times, path
    assert times == sorted(times)
    assert t0 <= times[0] and times[-1] <= t1, (t0, times[0], times[-1], t1)


def _summary(stderr: str) -> dict[str, int]:
    m = re.search(r"frames=(\d+) bytes=(\d+) dropped=(\d+)", stderr)
    assert m, stderr
    return {"frames": int(m[1]), "bytes": int(m[2]), "dropped": int(m[3])}


# ---- live -----------------------------------------------------------------------------------


def _start_capture(ns: Netns, srcdump: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    p = ns.popen(str(srcdump), "--io", "live", "--name", "vb", "-w", str(out), *args)
    assert p.stderr is not None
    line = p.stderr.readline()  # "ready" once the handle is active
    assert line.strip() == "ready", line + p.stderr.read()
    return p


def _finish(p: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    assert p.stderr is not None
    rest = p.stderr.read()
    return p.wait(timeout=timeout), rest


@pytest.mark.parametrize("name", LIVE_CAPTURES)
def test_live_receives_the_replayed_capture(
    netns: Netns, srcdump: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    sent = read_pcap(capture)
    out = tmp_path / "live.pcap"
    p = _start_capture(netns, srcdump, out, "--count", str(len(sent)), "--duration", "30")
    t0 = time.time_ns()
    _replay(netns, capture)
    rc, err = _finish(p)
    assert rc == 0, err
    _check_times(out, t0, time.time_ns())
    got = read_pcap(out)
    st = _summary(err)
    assert st["dropped"] == 0
    assert len(got) == len(sent) == st["frames"]
    assert st["bytes"] == sum(len(b) for _, b in sent)
    for i, ((_, want), (glen, gbytes)) in enumerate(zip(sent, got, strict=True), 1):
        # tcpreplay sends the captured bytes: what arrives is them, whole
        assert gbytes == want, f"{name}: frame {i} differs"
        assert glen == len(want)


def test_live_bpf_filter(netns: Netns, srcdump: Path, tmp_path: Path) -> None:
    capture = TRACES / "mixed-android-mobile.pcap"
    sent = read_pcap(capture)
    ipv6 = [b for _, b in sent if b[12:14] == b"\x86\xdd"]
    assert 0 < len(ipv6) < len(sent)
    out = tmp_path / "ip6.pcap"
    p = _start_capture(
        netns, srcdump, out, "--filter", "ip6", "--count", str(len(ipv6)), "--duration", "30"
    )
    _replay(netns, capture)
    rc, err = _finish(p)
    assert rc == 0, err
    assert [b for _, b in read_pcap(out)] == ipv6


def test_live_snaplen(netns: Netns, srcdump: Path, tmp_path: Path) -> None:
    capture = TRACES / "http-post-upload.pcap"
    sent = read_pcap(capture)
    out = tmp_path / "snap.pcap"
    p = _start_capture(
        netns, srcdump, out, "--snaplen", "100", "--count", str(len(sent)), "--duration", "30"
    )
    _replay(netns, capture)
    rc, err = _finish(p)
    assert rc == 0, err
    got = read_pcap(out)
    assert [(n, b) for n, b in got] == [(len(b), b[:100]) for _, b in sent]
    assert any(len(b) > 100 for _, b in sent)  # some frames were cut


def test_live_errors_are_clear(netns: Netns, srcdump: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "x.pcap")
    r = netns.run(str(srcdump), "--io", "live", "--name", "vb", "--filter", "tcp port", "-w", out)
    assert r.returncode == 1
    assert 'BPF filter "tcp port"' in r.stderr, r.stderr
    r = netns.run(str(srcdump), "--io", "live", "--name", "nosuch0", "-w", out)
    assert r.returncode == 1
    assert "cannot capture on nosuch0" in r.stderr, r.stderr


def test_live_stops_on_sigint_when_idle(netns: Netns, srcdump: Path, tmp_path: Path) -> None:
    out = tmp_path / "idle.pcap"
    p = _start_capture(netns, srcdump, out)  # no --count, no --duration: only a signal stops it
    time.sleep(0.3)
    t0 = time.monotonic()
    # the `ip netns exec` child is srcdump itself (exec): signal it
    p.send_signal(signal.SIGINT)
    rc, err = _finish(p, timeout=10)
    assert rc == 0, err
    assert (
        time.monotonic() - t0 < 5
    )  # the poll timeout lets it see the flag (no timing asserted finer)
    assert _summary(err) == {"frames": 0, "bytes": 0, "dropped": 0}
    assert read_pcap(out) == []


# ---- dpdk -----------------------------------------------------------------------------------


def _dpdk_run(
    srcdump: Path, tmp: Path, count: int, ports: str, *vdevs: str
) -> subprocess.CompletedProcess[str]:
    out = tmp / "dpdk.pcap"
    cmd = [str(srcdump), "--io", "dpdk", "--count", str(count), "--duration", "30", "-w", str(out)]
    if ports:
        cmd += ["--name", ports]
    return subprocess.run([*cmd, "--", *_eal(tmp, *vdevs)], capture_output=True, text=True)


@pytest.mark.parametrize("name", DPDK_CAPTURES)
def test_dpdk_pcap_vdev(dpdk: Path, tmp_path: Path, name: str) -> None:
    capture = TRACES / name
    sent = read_pcap(capture)
    t0 = time.time_ns()
    r = _dpdk_run(dpdk, tmp_path, len(sent), "", f"net_pcap0,rx_pcap={capture}")
    assert r.returncode == 0, r.stderr
    _check_times(tmp_path / "dpdk.pcap", t0, time.time_ns())  # the TSC, on the wall clock
    st = _summary(r.stderr)
    got = read_pcap(tmp_path / "dpdk.pcap")
    assert st["frames"] == len(got) == len(sent)
    assert st["bytes"] == sum(len(b) for _, b in sent)
    assert st["dropped"] == 0
    for i, ((_, want), (glen, gbytes)) in enumerate(zip(sent, got, strict=True), 1):
        assert gbytes == want, f"{name}: frame {i} differs"
        assert glen == len(want)  # the vdev delivers the captured bytes as the frame


def test_dpdk_every_port_and_a_port_list(dpdk: Path, tmp_path: Path) -> None:
    a, b = TRACES / "http-post-upload.pcap", TRACES / "tcp-retransmissions.pcap"
    fa, fb = [x for _, x in read_pcap(a)], [x for _, x in read_pcap(b)]
    vdevs = (f"net_pcap0,rx_pcap={a}", f"net_pcap1,rx_pcap={b}")
    r = _dpdk_run(dpdk, tmp_path, len(fa) + len(fb), "", *vdevs)
    assert r.returncode == 0, r.stderr
    got = [x for _, x in read_pcap(tmp_path / "dpdk.pcap")]
    assert sorted(got) == sorted(fa + fb)
    # each port's frames keep their order
    assert [x for x in got if x in set(fa)] == fa
    r = _dpdk_run(dpdk, tmp_path, len(fb), "1", *vdevs)
    assert r.returncode == 0, r.stderr
    assert [x for _, x in read_pcap(tmp_path / "dpdk.pcap")] == fb


def test_dpdk_null_vdev(dpdk: Path, tmp_path: Path) -> None:
    # net_null: a port that receives 64-byte frames as fast as it is polled
    t0 = time.time_ns()
    r = _dpdk_run(dpdk, tmp_path, 5000, "", "net_null0,size=64")
    assert r.returncode == 0, r.stderr
    assert _summary(r.stderr) == {"frames": 5000, "bytes": 5000 * 64, "dropped": 0}
    got = read_pcap(tmp_path / "dpdk.pcap")
    assert len(got) == 5000 and all(n == 64 and len(b) == 64 for n, b in got)
    _check_times(tmp_path / "dpdk.pcap", t0, time.time_ns())


def test_dpdk_errors_are_clear(dpdk: Path, tmp_path: Path) -> None:
    a = TRACES / "http-post-upload.pcap"
    r = _dpdk_run(dpdk, tmp_path, 1, "5", f"net_pcap0,rx_pcap={a}")
    assert r.returncode == 1
    assert "port 5 does not exist" in r.stderr, r.stderr
    r = _dpdk_run(dpdk, tmp_path, 1, "")  # no --vdev, no PCI: no port at all
    assert r.returncode == 1
    assert "dpdk: no ports" in r.stderr, r.stderr


# ---- rubikgen build --io --------------------------------------------------------------------


def test_build_io_dpdk_links_the_dpdk_source(dpdk: Path, tmp_path: Path) -> None:
    r = _build(tmp_path, "dpdk")
    assert r.returncode == 0, r.stderr
    binary = tmp_path / "tcp_ip"
    syms = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    assert re.search(r" [DRdr] rg_source_dpdk$", syms, re.M)
    libs = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    assert "librte_ethdev" in libs and "librte_eal" in libs
    # still the same stack on a capture file
    out = subprocess.run([str(binary), str(TRACES / "http-post-upload.pcap")], capture_output=True)
    assert out.returncode == 0, out.stderr


def test_build_io_dpdk_without_dpdk_says_what_is_missing(tmp_path: Path) -> None:
    # an empty pkg-config search path: as on a machine without libdpdk-dev
    r = _build(tmp_path, "dpdk", {"PKG_CONFIG_LIBDIR": str(tmp_path), "PKG_CONFIG_PATH": ""})
    assert r.returncode != 0
    assert "--io dpdk: pkg-config finds no libdpdk" in r.stderr, r.stderr
    assert "apt-get install libdpdk-dev" in r.stderr
    assert not (tmp_path / "tcp_ip").exists()


# ---- the stack binary on live and DPDK sources ----------------------------------------------
#
# The tcp_ip stack with the streams NF, run on a capture file and on the same capture arriving
# through a veth pair (tcpreplay) or a DPDK pcap vdev: the summaries agree (but for the
# source's name and its drop count) and the streams directories are byte-identical. Instances
# never expire (--no-timeouts) in both runs: a replay does not keep the capture's timing.


@pytest.mark.parametrize("name", _ethernet_eligible())
def test_stack_on_dpdk_equals_file_run(
    dpdk: Path, stack_bin: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    want = _file_run(stack_bin, capture, tmp_path / "file")
    n = len(read_pcap(capture))
    cmd = [str(stack_bin), "--io", "dpdk", "--count", str(n), "--duration", "60"]
    cmd += ["--nf", "streams", "--out", str(tmp_path / "dpdk"), "--no-timeouts", "--"]
    cmd += _eal(tmp_path, f"net_pcap0,rx_pcap={capture}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "dropped        0 " in r.stdout
    assert _summary_lines(r.stdout) == _summary_lines(want)
    assert _tree(tmp_path / "dpdk") == _tree(tmp_path / "file")


@pytest.mark.parametrize("name", _ethernet_eligible())
def test_stack_on_live_equals_file_run(
    netns: Netns, stack_bin: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    want = _file_run(stack_bin, capture, tmp_path / "file")
    n = len(read_pcap(capture))
    cmd = [str(stack_bin), "--io", "live", "--iface", "vb", "--count", str(n)]
    cmd += ["--duration", "60", "--nf", "streams", "--out", str(tmp_path / "live"), "--no-timeouts"]
    with open(tmp_path / "summary.txt", "w") as summary:
        p = subprocess.Popen(
            ["ip", "netns", "exec", netns.name, *cmd],
            stdout=summary,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_capturing(netns)
        _replay(netns, capture)
        assert p.stderr is not None
        err = p.stderr.read()
        assert p.wait(timeout=90) == 0, err
    out = (tmp_path / "summary.txt").read_text()
    assert re.search(r"^dropped +0 ", out, re.M), out
    assert _summary_lines(out) == _summary_lines(want)
    assert _tree(tmp_path / "live") == _tree(tmp_path / "file")


def test_stack_stops_on_sigint_with_a_summary(
    netns: Netns, stack_bin: Path, tmp_path: Path
) -> None:
    p = subprocess.Popen(
        ["ip", "netns", "exec", netns.name, str(stack_bin), "--io", "live", "--iface", "vb"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_capturing(netns)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    assert re.search(r"^packets +0$", out, re.M), out
    assert re.search(r"^dropped +0 ", out, re.M), out


def test_stack_duration_and_count(netns: Netns, stack_bin: Path) -> None:
    r = netns.run(str(stack_bin), "--io", "live", "--iface", "vb", "--duration", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^packets +0$", r.stdout, re.M)
    r = subprocess.run(
        [str(stack_bin), str(TRACES / "mixed-android-mobile.pcap"), "--count", "10"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"^packets +10$", r.stdout, re.M), r.stdout


def test_stack_source_option_errors(stack_bin: Path) -> None:
    cap = str(TRACES / "http-post-upload.pcap")
    cases = [
        (
            [cap, "--filter", "tcp"],
            "--filter, --snaplen, --promisc and --buffer apply to --io live",
        ),
        (["--io", "live"], "name the interface (--iface IF)"),
        ([cap, "--", "--no-huge"], "arguments after -- are DPDK's EAL arguments"),
        (["--io", "live", "--iface", "nosuch0"], "cannot capture on nosuch0"),
    ]
    for args, msg in cases:
        r = subprocess.run([str(stack_bin), *args], capture_output=True, text=True)
        assert r.returncode != 0, args
        assert msg in r.stderr, (args, r.stderr)


# ---- --workers N ----------------------------------------------------------------------------
#
# N stack contexts on N threads, frames split by the symmetric RSS hash of their outer
# addresses, one NF for all: the flow records and streams are those of one context (uids
# aside: they are numbered so that the worker is uid - 1 modulo N), the summary is the same
# (plus its `workers` line), idle timeouts included (the reading thread hands every worker the
# clock ticks of the whole input).


def _run_nf(binary: Path, capture: Path, nf: str, out: Path, *extra: str) -> str:
    r = subprocess.run(
        [str(binary), str(capture), "--nf", nf, "--out", str(out), *extra],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _all_eligible() -> list[str]:
    from support.oracle.tshark import eligible_captures

    return [p.name for p in eligible_captures()]


@pytest.mark.parametrize("name", _all_eligible())
def test_workers_write_what_one_context_writes(stack_bin: Path, tmp_path: Path, name: str) -> None:
    capture = TRACES / name
    for nf, records in (("streams", "flows.jsonl"), ("flowstats", "flowstats.jsonl")):
        one = _run_nf(stack_bin, capture, nf, tmp_path / f"{nf}-1")
        three = _run_nf(stack_bin, capture, nf, tmp_path / f"{nf}-3", "--workers", "3")
        assert _without_workers_line(three) == _without_workers_line(one)
        assert re.search(r"^workers +3 ", three, re.M)
        assert (tmp_path / f"{nf}-3" / records).is_file()  # one set of files
        assert not list((tmp_path / f"{nf}-3").glob("worker-*"))
        assert _records(tmp_path / f"{nf}-3", records) == _records(tmp_path / f"{nf}-1", records)


def test_workers_share_the_work(stack_bin: Path, tmp_path: Path) -> None:
    out = _run_nf(
        stack_bin, TRACES / "mixed-android-mobile.pcap", "count", tmp_path, "--workers", "2"
    )
    m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", out, re.M)
    assert m, out
    assert int(m[1]) > 50 and int(m[2]) > 50 and int(m[1]) + int(m[2]) == 500


@pytest.mark.parametrize("name", ["mixed-android-mobile.pcap", "ipv4-frag-socks5-http.pcap"])
def test_workers_on_live(netns: Netns, stack_bin: Path, tmp_path: Path, name: str) -> None:
    capture = TRACES / name
    one = _run_nf(stack_bin, capture, "streams", tmp_path / "file", "--no-timeouts")
    n = len(read_pcap(capture))
    cmd = [str(stack_bin), "--io", "live", "--iface", "vb", "--count", str(n), "--workers", "2"]
    cmd += ["--duration", "60", "--nf", "streams", "--out", str(tmp_path / "live"), "--no-timeouts"]
    with open(tmp_path / "summary.txt", "w") as summary:
        p = subprocess.Popen(
            ["ip", "netns", "exec", netns.name, *cmd],
            stdout=summary,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_capturing(netns)
        _replay(netns, capture)
        assert p.stderr is not None
        err = p.stderr.read()
        assert p.wait(timeout=90) == 0, err
    out = (tmp_path / "summary.txt").read_text()
    assert re.search(r"^dropped +0 ", out, re.M), out
    assert _summary_lines("\n".join(_without_workers_line(out))) == _summary_lines(
        "\n".join(_without_workers_line(one))
    )
    assert _records(tmp_path / "live", "flows.jsonl") == _records(tmp_path / "file", "flows.jsonl")
