"""The multi-core and wire workloads of the harness (issue 10): `python bench/run.py --workloads
scale dpdk live flows1m` (any subset), or this file directly with the same options.

scale    the -O2 tcp_ip stack's `--bench --workers 1` and `--workers 2` on capture (a), each
         worker processing the share a symmetric-RSS NIC would give it (the binary splits the
         loaded capture by the Toeplitz hash before timing); interleaved rounds, the best run of
         each counts; aggregate Mpps on the wall clock and on the slowest worker's own CPU time,
         and the 2-vs-1 ratios.
dpdk     the same stack reading DPDK's pcap virtual device with `infinite_rx=1` (the real
         ethdev RX path: rte_eth_rx_burst, mbufs, no copy into the stack) against the in-memory
         `--bench` path on the same packet sequence: the first K frames of (a) repeated R times.
         DPDK ns/packet is the process's CPU time between a run of K*R frames and one of K*R/10
         (the EAL start-up cancels out), divided by the frames between them.
live     (a) replayed by tcpreplay at 50,000 packets/s and at --topspeed into a veth pair of
         two queues in a network namespace, captured by the stack (streams NF, no timeouts)
         through libpcap (`--io live`), through TPACKET_V3 rings in a PACKET_FANOUT group
         (`--io packet`) and through AF_XDP sockets, one per queue (`--io afxdp`, the same
         stack built with --io afxdp), 1 and 2 workers, one after the other: the source's
         drops and whether the summary and every stream file equal the file run's.
flows1m  bench/gen_flows.py's 1,000,000 concurrent connections (6,000,000 packets): the stack's
         `--bench` ns/packet against the parse_hash bound's at the same table size (--cap), and
         both processes' peak RSS.

The machine may be shared: every figure comes with the load average at its start.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BUILD = BENCH / "build"
MC_WORKLOADS = ["scale", "dpdk", "live", "flows1m"]
STACK_DIR = BUILD / "tcp_ip-O2-dpdk"
AFXDP_DIR = BUILD / "tcp_ip-O2-afxdp"  # the AF_XDP source is an --io of its own
PARSE_HASH = BUILD / "peers" / "parse_hash"
FLOWS_CAP = 1 << 21  # table size for 1M connections (rubikgen --cap, parse_hash --cap)

Json = dict[str, Any]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _json_line(text: str) -> Json:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in: {text[-300:]}")


def build(no_build: bool) -> Path:
    """The -O2 tcp_ip stack with the DPDK source, and the parse_hash peer."""
    binary = STACK_DIR / "tcp_ip"
    if not no_build:
        cmd = [sys.executable, "-m", "rubikgen", "build", str(ROOT / "specs/stacks/tcp_ip.yaml")]
        cmd += ["-O2", "--io", "dpdk", "--out-dir", str(STACK_DIR)]
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
        subprocess.run(["make", "-s", "-C", str(BENCH), "peers"], check=True, capture_output=True)
    return binary


def build_afxdp(no_build: bool) -> Path | None:
    """The same stack with the AF_XDP source (None when libxdp is missing)."""
    if not no_build:
        cmd = [sys.executable, "-m", "rubikgen", "build", str(ROOT / "specs/stacks/tcp_ip.yaml")]
        cmd += ["-O2", "--io", "afxdp", "--out-dir", str(AFXDP_DIR)]
        if subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode != 0:
            return None
    binary = AFXDP_DIR / "tcp_ip"
    return binary if binary.is_file() else None


def _frames(path: Path) -> tuple[bytes, list[bytes]]:
    data = path.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1", f"{path}: little-endian microsecond pcap expected"
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off : off + 16 + incl])
        off += 16 + incl
    return data[:24], out


def repeated(src: Path, k: int, r: int, out: Path) -> int:
    """The first k frames of src, r times over, with increasing times: what net_pcap's
    infinite_rx delivers from a k-frame file. Returns the frame count."""
    hdr, frames = _frames(src)
    frames = frames[:k]
    t0 = struct.unpack_from("<II", frames[0])
    with open(out, "wb") as f:
        f.write(hdr)
        n = 0
        for _ in range(r):
            for fr in frames:
                us = t0[0] * 1_000_000 + t0[1] + n
                f.write(struct.pack("<II", us // 1_000_000, us % 1_000_000) + fr[8:])
                n += 1
    return n


def scale(binary: Path, capture: Path, passes: int, rounds: int) -> Json:
    best: dict[int, Json] = {}
    load = _load()
    for _ in range(rounds):
        for w in (1, 2):
            cmd = [str(binary), str(capture), "--bench", "--passes", str(passes), "--nf", "count"]
            out = subprocess.run(
                [*cmd, "--seed", "1", "--workers", str(w)], capture_output=True, text=True
            )
            if out.returncode:
                return {"error": out.stderr[-500:]}
            j = _json_line(out.stdout)
            if w not in best or j["mpps"] > best[w]["mpps"]:
                best[w] = j
    return {
        "capture": capture.name,
        "loadavg_start": load,
        "command": f"{binary} {capture} --bench --passes {passes} --nf count --seed 1 --workers N",
        "workers1": best[1],
        "workers2": best[2],
        "ratio_wall": round(best[2]["mpps"] / best[1]["mpps"], 3),
        "ratio_cpu_bound": round(best[2]["mpps_cpu_bound"] / best[1]["mpps_cpu_bound"], 3),
    }


def _cpu_of(cmd: list[str]) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise RuntimeError(p.stderr[-500:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, p.stdout


def dpdk(binary: Path, capture: Path, rounds: int, k: int = 4000, r: int = 250) -> Json:
    load = _load()
    with tempfile.TemporaryDirectory() as td:
        small = Path(td) / "k.pcap"
        repeated(capture, k, 1, small)
        seq = Path(td) / "seq.pcap"
        n = repeated(capture, k, r, seq)
        mem = []
        for _ in range(rounds):
            cmd = [str(binary), str(seq), "--bench", "--passes", "3", "--nf", "count"]
            out = subprocess.run(
                [*cmd, "--seed", "1", "--no-timeouts"], capture_output=True, text=True
            )
            mem.append(_json_line(out.stdout)["cpu_ns_per_pkt"])
        per = []
        for i in range(rounds):
            cpu = {}
            for count in (n // 10, n):
                eal = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "-l", "0"]
                eal += ["--file-prefix", f"rgbench{os.getpid()}_{i}_{count}", "--log-level=error"]
                eal += ["--vdev", f"net_pcap0,rx_pcap={small},infinite_rx=1"]
                cmd = [str(binary), "--io", "dpdk", "--count", str(count), "--nf", "count"]
                cmd += ["--seed", "1", "--no-timeouts", "--", *eal]
                cpu[count], out = _cpu_of(cmd)
                if count == n:
                    assert re.search(rf"^packets +{n}$", out, re.M), out
            per.append((cpu[n] - cpu[n // 10]) * 1e9 / (n - n // 10))
    return {
        "capture": f"the first {k} frames of {capture.name}, {r} times ({n} frames)",
        "loadavg_start": load,
        "vdev": f"net_pcap0,rx_pcap=FIRST{k}.pcap,infinite_rx=1",
        "inmemory_cpu_ns_per_pkt": min(mem),
        "dpdk_cpu_ns_per_pkt": round(min(per), 2),
        "dpdk_mpps": round(1e3 / min(per), 3),
        "ratio": round(min(per) / min(mem), 3),
        "runs": {"inmemory": mem, "dpdk": [round(x, 2) for x in per]},
    }


def _ns(name: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True, text=True)


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _summary(text: str) -> list[str]:
    # the runs write into folders of their own ("wrote" names them)
    return [ln for ln in text.splitlines() if not ln.startswith(("capture ", "dropped ", "wrote "))]


def _records(out: Path) -> list[str]:
    """flows.jsonl with uid and file name (which depend on the worker) replaced by the stream's
    content hash, sorted."""
    recs = []
    for line in (out / "flows.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec.pop("uid", None)
        rec.pop("worker", None)  # --workers N (1 too): the worker that processed the flow
        file = rec.pop("file", None)
        if file:
            rec["content"] = hashlib.sha256((out / file).read_bytes()).hexdigest()
        recs.append(json.dumps(rec, sort_keys=True))
    return sorted(recs)


def _veth(name: str) -> None:
    """va <-> vb with two RX and TX queues each (AF_XDP reads a queue per worker)."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    q = ["numrxqueues", "2", "numtxqueues", "2"]
    subprocess.run(
        ["ip", "-n", name, "link", "add", "va", *q, "type", "veth", "peer", "name", "vb", *q],
        check=True,
    )
    for dev in ("va", "vb"):
        _ns(name, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        subprocess.run(["ip", "-n", name, "link", "set", dev, "up"], check=True)


def _without_workers(text: str) -> list[str]:
    """The summary without its workers lines and its memory section (each worker's own peaks)."""
    out, skipping = [], False
    for ln in text.splitlines():
        if ln.startswith(("memcap ", "memory per layer")):
            skipping = True
            continue
        if skipping and ln.startswith("  "):
            continue
        skipping = False
        if not ln.startswith("workers "):
            out.append(ln)
    return out


# the sources of the wire measurement: libpcap (--buffer 64: 4 MB is 50 ms of 50,000 frames/s,
# see BENCHMARKS.md), TPACKET_V3 rings of the same size (one per worker, a PACKET_FANOUT group;
# l3: the stack's addresses-only grouping, exact with IP fragments), AF_XDP (a socket and a
# UMEM of 16,384 4 KB chunks, 64 MB, per queue and worker, the queue picked by va's TX queue:
# the kernel's flow hash)
WIRE_SOURCES = {
    "live": ["--io", "live", "--buffer", "64"],
    "packet": ["--io", "packet", "--ring", "64", "--fanout", "l3"],
    "afxdp": ["--io", "afxdp", "--frames", "16384"],
}
WIRE_RATES = ["50000", "topspeed"]


def live(binary: Path, capture: Path, afxdp: Path | None = None) -> Json:
    """Every source of WIRE_SOURCES with 1 and 2 workers at every rate of WIRE_RATES, one after
    the other (rate by rate, the sources interleaved): the tcpreplay rate achieved, the frames
    the source says it lost, and whether the output equals the file run's."""
    if os.geteuid() != 0 or not shutil.which("tcpreplay") or not shutil.which("ethtool"):
        return {"error": "needs root, tcpreplay and ethtool"}
    n = len(_frames(capture)[1])
    name = f"rgbench{os.getpid()}"
    res: Json = {"capture": f"{capture.name} ({n} frames)", "loadavg_start": _load()}
    _veth(name)
    # tmpfs when there is one: the streams NF creates a file per flow and direction, which a
    # disk-backed /tmp on a loaded machine does slower than 50,000 packets/s
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    try:
        with tempfile.TemporaryDirectory(dir=shm) as td:
            file_out = Path(td) / "file"
            want = subprocess.run(
                [str(binary), str(capture), "--nf", "streams", "--out", str(file_out)]
                + ["--no-timeouts"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for rate in WIRE_RATES:
                for workers in (1, 2):
                    for io, io_args in WIRE_SOURCES.items():
                        key = f"{io}-workers{workers}-{rate}"
                        b = afxdp if io == "afxdp" else binary
                        if b is None:
                            res[key] = {"error": "no stack built with --io afxdp (libxdp-dev)"}
                            continue
                        res[key] = _wire_run(
                            name, b, capture, n, Path(td) / key, io_args, workers, rate
                        )
                        out = res[key].pop("out")
                        res[key]["summary_equal"] = _summary(
                            "\n".join(_without_workers(out))
                        ) == _summary("\n".join(_without_workers(want)))
                        live_out = Path(td) / key
                        # the same records and stream contents (--workers adds each record's
                        # worker; with 2 the uids are numbered by time stamps)
                        res[key]["streams_equal"] = _records(live_out) == _records(file_out)
                        res[key]["stream_files"] = len(_tree(live_out))
                        shutil.rmtree(live_out, ignore_errors=True)
                        print(f"  {key}: {json.dumps(res[key])}", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    return res


def _wire_run(
    name: str,
    binary: Path,
    capture: Path,
    n: int,
    out: Path,
    io_args: list[str],
    workers: int,
    rate: str,
) -> Json:
    cmd = [str(binary), *io_args, "--iface", "vb", "--count", str(n)]
    cmd += ["--duration", str(n // 20_000 + 30), "--workers", str(workers)]
    cmd += ["--nf", "streams", "--out", str(out), "--no-timeouts"]
    # va sends on as many TX queues as there are workers, so vb's RX queues (one per AF_XDP
    # socket) are all read; the other sources read every queue anyway
    _ns(name, "ethtool", "-L", "va", "tx", str(workers))
    p = subprocess.Popen(["ip", "netns", "exec", name, *cmd], stdout=subprocess.PIPE, text=True)
    for _ in range(200):  # until the capture is open (AF_XDP: libxdp's program attached)
        if "afxdp" in io_args:
            if "prog/xdp" in _ns(name, "ip", "-d", "link", "show", "vb").stdout:
                break
        elif _ns(name, "cat", "/proc/net/packet").stdout.count("\n") > workers:
            break
        time.sleep(0.05)
    time.sleep(0.2)  # libpcap: the ring is set up after the socket appears
    speed = ["--topspeed"] if rate == "topspeed" else ["--pps", rate]
    rep = _ns(name, "tcpreplay", "-i", "va", *speed, str(capture))
    try:
        got, _ = p.communicate(timeout=n // 20_000 + 60)
    except subprocess.TimeoutExpired:  # frames lost: --count is never reached, --duration ends
        p.kill()
        got, _ = p.communicate()
    m = re.search(r"^dropped +(\d+)", got, re.M)
    detail = re.search(r"^dropped +\d+ +\(.*?NIC; (.*)\)$", got, re.M)
    pk = re.search(r"^packets +(\d+)", got, re.M)
    rated = re.search(r"Rated: .*?, ([\d.]+) pps", rep.stdout)
    return {
        "command": f"tcpreplay -i va {' '.join(speed)} CAPTURE; {' '.join(cmd)}",
        "tcpreplay_pps": float(rated[1]) if rated else None,
        "exit": p.returncode,
        "packets": int(pk[1]) if pk else None,
        "dropped": int(m[1]) if m else None,
        **({"source_detail": detail[1]} if detail else {}),
        "out": got,
    }


def _rss_run(cmd: list[str]) -> tuple[Json, int]:
    """The JSON line and the peak RSS (KiB) of one run (GNU time)."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr[-800:])
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    return _json_line(p.stdout), int(rss[1]) if rss else -1


def flows_cmd(binary: Path, capture: Path, cap: int) -> list[str]:
    """The stack's flows1m command line (less --burst). No flow-record memcap: the default
    256 MiB holds about 1,000,000 TCP records of 256 bytes, and a cap hit evicts the oldest
    connections, whose later packets open new instances (1,082,656 evicted and 2,000,000 TCP
    instances for 1,000,000 connections when it was on): the workload measures a table of N
    concurrent connections, not the memcap."""
    cmd = [str(binary), str(capture), "--bench", "--passes", "1", "--nf", "count"]
    return cmd + ["--seed", "1", "--cap", str(cap), "--memcap-flows", "0"]


def flow_counts(j: Json) -> Json:
    """The connection counts of a `--bench` JSON line. Its "flows_opened"/"flows_closed" count
    the instances of every layer (each IPv4 datagram is one), so the TCP layer's own figures
    say how many connections the stack tracked and how each ended."""
    tcp = j["layers"]["tcp"]
    return {
        "tcp_instances": tcp["opened"],
        "tcp_closed_by_fin_or_rst": tcp["closed"]["accept"],
        "tcp_evicted": tcp["closed"]["evicted"],
        "tcp_expired": tcp["closed"]["expired"],
        "tcp_flushed": tcp["closed"]["flushed"],
        "ip_datagrams": j["layers"]["ip"]["opened"],
        "instances_closed_all_layers": j["flows_closed"],
    }


def flows1m(binary: Path, capture: Path, rounds: int) -> Json:
    if not capture.is_file():
        return {"error": f"{capture}: run python bench/gen_flows.py first"}
    load = _load()
    best: dict[str, tuple[Json, int]] = {}
    for _ in range(rounds):
        rg_cmd = flows_cmd(binary, capture, FLOWS_CAP)
        ph_cmd = [str(PARSE_HASH), str(capture), "--passes", "1", "--cap", str(FLOWS_CAP)]
        # bursts of 32 (the default: index slots prefetched) and of 1 (no prefetch), both sides
        runs = {
            "rubikgen-O2": rg_cmd + ["--burst", "32"],
            "parse_hash": ph_cmd + ["--burst", "32"],
            "rubikgen-O2-burst1": rg_cmd + ["--burst", "1"],
            "parse_hash-burst1": ph_cmd + ["--burst", "1"],
        }
        for name, cmd in runs.items():
            j, rss = _rss_run(cmd)
            if name not in best or j["cpu_ns_per_pkt"] < best[name][0]["cpu_ns_per_pkt"]:
                best[name] = (j, rss)
    rg, ph = best["rubikgen-O2"], best["parse_hash"]
    return {
        "capture": f"{capture.name} ({rg[0]['pkts']} packets)",
        "loadavg_start": load,
        "cap": FLOWS_CAP,
        "rubikgen_cpu_ns_per_pkt": rg[0]["cpu_ns_per_pkt"],
        "parse_hash_cpu_ns_per_pkt": ph[0]["cpu_ns_per_pkt"],
        "ratio": round(rg[0]["cpu_ns_per_pkt"] / ph[0]["cpu_ns_per_pkt"], 3),
        "rubikgen_peak_rss_mib": round(rg[1] / 1024, 1),
        "parse_hash_peak_rss_mib": round(ph[1] / 1024, 1),
        "rubikgen_flows": rg[0]["flows"],
        **{f"rubikgen_{k}": v for k, v in flow_counts(rg[0]).items()},
        "parse_hash_flows_opened": ph[0].get("flows_opened"),
        "burst": 32,
        "burst1_rubikgen_cpu_ns_per_pkt": best["rubikgen-O2-burst1"][0]["cpu_ns_per_pkt"],
        "burst1_parse_hash_cpu_ns_per_pkt": best["parse_hash-burst1"][0]["cpu_ns_per_pkt"],
    }


def run(workloads: list[str], captures: Path, passes: int, rounds: int, no_build: bool) -> Json:
    binary = build(no_build)
    a = captures / "a.pcap"
    res: Json = {}
    for w in workloads:
        t0 = time.monotonic()
        if w == "scale":
            res[w] = scale(binary, a, passes, rounds)
        elif w == "dpdk":
            res[w] = dpdk(binary, a, rounds)
        elif w == "live":
            res[w] = live(binary, a, build_afxdp(no_build))
        elif w == "flows1m":
            res[w] = flows1m(binary, captures / "flows1m.pcap", rounds)
        res[w]["seconds"] = round(time.monotonic() - t0, 1)
        print(f"{w}: {json.dumps(res[w])}", flush=True)
    return res
