"""The packet source (AF_PACKET, TPACKET_V3 rings, PACKET_FANOUT) against libpcap and the file.

A veth pair in a network namespace (the `netns` fixture); tcpreplay sends a real capture into
one end, the sources read the other:

- srcdump (runtime-c/tests/srcdump.c: a source's frames into a pcap file, read as the driver
  reads them) on `--io packet` and on `--io live` (libpcap) at once, during one replay: both
  files hold the capture's frames, byte for byte and with their lengths (VLAN tags the kernel
  moved into the ring's aux data put back, as libpcap does); a BPF filter, a snap length.
- `--queues 2` (one socket per worker in one fanout group): the frames of both sockets are the
  capture's frames; with the kernel's hash (the default) every TCP/UDP connection, both ways,
  and every IP datagram's fragments reach one socket; with `l3` (our classic BPF program)
  every frame between two hosts does, on the socket the program's documented function picks.
- The tcp_ip stack with the streams NF on `--io packet`, one worker and two: the summary and
  the flow records are those of the run on the capture file itself; with IPv4 fragments in a
  TCP connection the kernel's hash splits it (documented) and `--fanout l3` does not.
- `rubikgen run --iface vb --io packet`.
- Errors: no such interface, a bad --fanout or --ring, not root (as user nobody).

Skipped, with the reason, without root, `ip`, tcpreplay or network namespaces (conftest.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.multicore import parse
from support.oracle.tshark import REPO, TRACES
from support.sources import (
    Frame,
    Netns,
    _file_run,
    _records,
    _replay,
    _summary_lines,
    _tree,
    _wait_capturing,
    _without_workers_line,
    read_pcap,
    srcdump_finish,
    srcdump_start,
    srcdump_stats,
)

# replays: run alone, after the parallel part of the suite (ci/test.sh)
pytestmark = pytest.mark.serial

# plain, VLAN-tagged, IPv4 fragments, IPv6, VXLAN, frames of up to 9100 bytes
CAPTURES = [
    "mixed-android-mobile.pcap",
    "vlan-http-syn-retransmit.pcap",
    "ipv4-frag-socks5-http.pcap",
    "ipv6-http-gquic.pcap",
    "vxlan-http.pcap",
    "arp-icmp-vlan.pcap",
]


@pytest.mark.parametrize("name", CAPTURES)
def test_packet_equals_libpcap_on_one_replay(
    netns: Netns, srcdump: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    sent = read_pcap(capture)
    n = str(len(sent))
    runs = {
        io: srcdump_start(
            netns, srcdump, io, "vb", tmp_path / f"{io}.pcap", "--count", n, "--duration", "30"
        )
        for io in ("packet", "live")
    }
    _replay(netns, capture)
    got: dict[str, list[Frame]] = {}
    for io, p in runs.items():
        st = srcdump_stats(srcdump_finish(p))
        assert st["dropped"] == 0 and st["frames"] == len(sent), (io, st)
        got[io] = read_pcap(tmp_path / f"{io}.pcap")
    assert got["packet"] == got["live"]
    # and both are what tcpreplay sent: the captured bytes, whole
    assert got["packet"] == [(len(b), b) for _, b in sent]
    if name.startswith(("vlan", "arp-icmp-vlan")):  # the tags came back from the aux data
        assert any(b[12:14] == b"\x81\x00" for _, b in got["packet"])


def test_packet_filter_and_snaplen(netns: Netns, srcdump: Path, tmp_path: Path) -> None:
    capture = TRACES / "mixed-android-mobile.pcap"
    sent = [b for _, b in read_pcap(capture)]
    ipv6 = [b for b in sent if b[12:14] == b"\x86\xdd"]
    assert 0 < len(ipv6) < len(sent) and any(len(b) > 100 for b in ipv6)
    out = tmp_path / "ip6.pcap"
    p = srcdump_start(
        netns,
        srcdump,
        "packet",
        "vb",
        out,
        *("--filter", "ip6", "--snaplen", "100", "--count", str(len(ipv6)), "--duration", "30"),
    )
    _replay(netns, capture)
    srcdump_finish(p)
    assert read_pcap(out) == [(len(b), b[:100]) for b in ipv6]


def _queues(
    netns: Netns, srcdump: Path, tmp_path: Path, capture: Path, fanout: str
) -> list[list[bytes]]:
    sent = read_pcap(capture)
    out = tmp_path / f"{capture.stem}-{fanout}.pcap"
    p = srcdump_start(
        netns,
        srcdump,
        "packet",
        "vb",
        out,
        *("--queues", "2", "--opt", f"fanout={fanout}", "--count", str(len(sent))),
        *("--duration", "30"),
    )
    assert p.stderr is not None and p.stderr.readline().strip() == "mode=hw"
    _replay(netns, capture)
    st = srcdump_stats(srcdump_finish(p))
    assert st["frames"] == len(sent) and st["dropped"] == 0, st
    qs = [[b for _, b in read_pcap(Path(f"{out}.{q}"))] for q in range(2)]
    assert sorted(qs[0] + qs[1]) == sorted(b for _, b in sent)  # every frame, once
    return qs


def _l3_socket(src: bytes, dst: bytes, n: int) -> int:
    """The socket --fanout l3's program picks (rg_source_packet.c): the XOR of every 32-bit
    word of both addresses, folded (A ^= A >> 16; A ^= A >> 8), modulo the group's size."""
    a = 0
    for addr in (src, dst):
        for i in range(0, len(addr), 4):
            a ^= int.from_bytes(addr[i : i + 4], "big")
    a ^= a >> 16
    a ^= a >> 8
    return a % n


FANOUT_CAPTURES = [
    "mixed-android-mobile.pcap",
    "ipv4-frag-socks5-http.pcap",
    "ipv6-http-gquic.pcap",
]


@pytest.mark.parametrize("fanout", ["hash", "l3"])
def test_fanout_keeps_flows_together(
    netns: Netns, srcdump: Path, tmp_path: Path, fanout: str
) -> None:
    seen = {"two-way flows": 0, "v4frag": 0}
    used: set[int] = set()
    for name in FANOUT_CAPTURES:
        qs = _queues(netns, srcdump, tmp_path, TRACES / name, fanout)
        groups: dict[tuple[object, ...], set[int]] = {}
        senders: dict[tuple[object, ...], set[bytes]] = {}
        for q, frames in enumerate(qs):
            used |= {q} if frames else set()
            for f in frames:
                p = parse(f)
                if p is None:
                    continue
                if fanout == "l3":  # every frame between two hosts, on the program's socket
                    assert q == _l3_socket(p.src, p.dst, 2), f"{name}: {p.src.hex()}"
                    key: tuple[object, ...] = ("hosts", *sorted([p.src, p.dst]))
                elif p.frag:  # the kernel hashes a fragment on its addresses
                    key = ("frag", *p.frag)
                elif p.ports:
                    key = ("flow", p.proto, *sorted([(p.src, p.ports[0]), (p.dst, p.ports[1])]))
                else:
                    continue
                seen["v4frag"] += bool(p.frag and len(p.src) == 4)
                groups.setdefault(key, set()).add(q)
                senders.setdefault(key, set()).add(p.src)
        for key, where in groups.items():
            assert len(where) == 1, f"{name}: {key} on sockets {sorted(where)}"
        seen["two-way flows"] += sum(len(s) > 1 for s in senders.values())
    # the captures exercised both directions, fragments and both sockets
    assert seen["two-way flows"] > 10 and seen["v4frag"] > 10, seen
    assert used == {0, 1}


def _stack_run(
    netns: Netns, stack_bin: Path, tmp_path: Path, capture: Path, workers: int, *extra: str
) -> tuple[str, Path]:
    n = len(read_pcap(capture))
    out = tmp_path / f"packet-{workers}{'-'.join(extra)}"
    cmd = [str(stack_bin), "--io", "packet", "--iface", "vb", "--count", str(n)]
    # one worker: the single context (no --workers); else N sockets in a fanout group
    cmd += [*(["--workers", str(workers)] if workers > 1 else []), *extra, "--duration", "60"]
    cmd += ["--nf", "streams", "--out", str(out), "--no-timeouts"]
    summary = tmp_path / "summary.txt"
    with open(summary, "w") as f:
        p = subprocess.Popen(
            ["ip", "netns", "exec", netns.name, *cmd], stdout=f, stderr=subprocess.PIPE, text=True
        )
        _wait_capturing(netns)
        _replay(netns, capture)
        assert p.stderr is not None
        err = p.stderr.read()
        assert p.wait(timeout=90) == 0, err
    text = summary.read_text()
    assert re.search(r"^dropped +0 ", text, re.M), text
    return text, out


def _same_summary(a: str, b: str) -> bool:
    return _summary_lines("\n".join(_without_workers_line(a))) == _summary_lines(
        "\n".join(_without_workers_line(b))
    )


@pytest.mark.parametrize("name", CAPTURES)
def test_stack_on_packet_equals_file_run(
    netns: Netns, stack_bin: Path, tmp_path: Path, name: str
) -> None:
    capture = TRACES / name
    want = _file_run(stack_bin, capture, tmp_path / "file")
    file_records = _records(tmp_path / "file", "flows.jsonl")
    got, out = _stack_run(netns, stack_bin, tmp_path, capture, 1)
    assert _summary_lines(got) == _summary_lines(want)
    assert _tree(out) == _tree(tmp_path / "file")
    # two workers, each on its own socket of the fanout group: the addresses-only program
    got, out = _stack_run(netns, stack_bin, tmp_path, capture, 2, "--fanout", "l3")
    m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", got, re.M)
    assert m and int(m[1]) + int(m[2]) == len(read_pcap(capture)), got
    assert _same_summary(got, want)
    assert _records(out, "flows.jsonl") == file_records


def test_kernel_hash_splits_a_fragmented_connection(
    netns: Netns, stack_bin: Path, tmp_path: Path
) -> None:
    """What runtime-c/README.md says of PACKET_FANOUT_HASH: a TCP connection some of whose
    segments are IP fragments is hashed on its 4-tuple, its fragments on their addresses, so
    two workers see parts of it; on a capture without fragments the records are exact."""
    capture = TRACES / "ipv4-frag-socks5-http.pcap"
    _file_run(stack_bin, capture, tmp_path / "file")
    whole = _records(tmp_path / "file", "flows.jsonl")
    # the kernel's hash has a per-boot seed: the 4-tuple's and the addresses' hashes fall on
    # one socket of N by chance (1 in N); over N = 2, 3, 4, 5, 7 all of them do only when the
    # two hashes are equal modulo 420, so some group size splits the connection
    for workers in (2, 3, 4, 5, 7):
        _, out = _stack_run(netns, stack_bin, tmp_path, capture, workers)
        split = _records(out, "flows.jsonl")
        if split != whole:
            break
    assert split != whole, "no fanout group size split the fragmented connection"
    assert any('"reason": "flushed"' in r for r in split)  # a half seen without its FIN
    capture = TRACES / "mixed-android-mobile.pcap"
    want = _file_run(stack_bin, capture, tmp_path / "file2")
    got, out = _stack_run(netns, stack_bin, tmp_path, capture, 2)
    assert _same_summary(got, want)
    assert _records(out, "flows.jsonl") == _records(tmp_path / "file2", "flows.jsonl")


def test_rubikgen_run_io_packet(netns: Netns, tmp_path: Path) -> None:
    capture = TRACES / "http-post-upload.pcap"
    n = len(read_pcap(capture))
    cmd = [sys.executable, "-m", "rubikgen", "run", str(REPO / "specs/stacks/tcp_ip.yaml")]
    cmd += ["--build-dir", str(tmp_path / "build"), "--iface", "vb", "--io", "packet"]
    cmd += ["--count", str(n), "--duration", "60", "--workers", "2", "--nf", "streams"]
    cmd += ["--out", str(tmp_path / "packet"), "--", "--no-timeouts", "--fanout", "l3"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # the build first (not in the namespace's time budget), then the run
    b = subprocess.run(
        [sys.executable, "-m", "rubikgen", "build", str(REPO / "specs/stacks/tcp_ip.yaml")]
        + ["--out-dir", str(tmp_path / "build")],
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
    # `rubikgen run` checks the build (the specs compiled again) before the binary starts:
    # seconds on a loaded machine
    _wait_capturing(netns, 120, p)
    _replay(netns, capture)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert re.search(rf"^packets +{n}$", out, re.M), out
    _file_run(tmp_path / "build" / "tcp_ip", capture, tmp_path / "file")
    assert _records(tmp_path / "packet", "flows.jsonl") == _records(
        tmp_path / "file", "flows.jsonl"
    )
    r = subprocess.run(
        [*cmd[:5], "--io", "packet", str(capture)], capture_output=True, text=True, env=env
    )
    assert r.returncode != 0 and "--io packet reads an interface" in r.stderr, r.stderr


def test_packet_errors_are_clear(netns: Netns, srcdump: Path, stack_bin: Path) -> None:
    r = netns.run(str(srcdump), "--io", "packet", "--name", "nosuch0", "-w", "/dev/null")
    assert r.returncode == 1 and "cannot capture on nosuch0: no such interface" in r.stderr
    r = netns.run(
        str(srcdump), "--io", "packet", "--name", "vb", "--filter", "tcp port", "-w", "/dev/null"
    )
    assert r.returncode == 1 and 'packet: BPF filter "tcp port"' in r.stderr, r.stderr
    base = [str(stack_bin), "--io", "packet", "--iface", "vb", "--workers", "2"]
    for args, msg in (
        (["--fanout", "rss"], "--fanout rss: the modes are hash, l3, cpu and lb"),
        (["--ring", "0"], "--ring 0: a size in MB, 1 to 4095"),
        (["--pin"], "--pin: each worker reads its socket"),
    ):
        r = subprocess.run([*base, *args], capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = subprocess.run([str(stack_bin), "--io", "packet"], capture_output=True, text=True)
    assert "name the interface (--iface IF)" in r.stderr
    # without root's capabilities (still uid 0, so it may read the binary): no packet socket
    if not shutil.which("setpriv"):
        pytest.skip("no setpriv to drop root's capabilities")
    r = netns.run(
        "setpriv",
        *("--bounding-set=-all", "--inh-caps=-all"),
        *(str(stack_bin), "--io", "packet", "--iface", "vb", "--duration", "1"),
    )
    assert r.returncode == 1, r.stderr
    assert "packet: cannot capture on vb: Operation not permitted" in r.stderr, r.stderr
    assert "(capturing needs root or CAP_NET_RAW)" in r.stderr
