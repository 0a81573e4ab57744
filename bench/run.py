#!/usr/bin/env python3
"""The rubikgen benchmark harness (issue 4): rubikgen stacks against libnids and two bounds.

    python bench/run.py [--captures bench/captures] [--workloads a b c d e] [--passes 5]
                        [--rounds 3] [--callgrind] [--out bench/results]

Builds the stack binaries (`rubikgen build ... -O0` and `-O2`, an FT variant from bench/specs/)
and the peers (`make -C bench peers`), then runs every configuration on every workload capture
INTERLEAVED in rounds (round 1 runs each configuration once, round 2 again, ...; each run does
`--passes` passes over the capture loaded in memory and reports its best pass) and keeps each
configuration's best run, because the machine is shared and noisy.  With --callgrind it also
counts the instructions per packet of every configuration (valgrind's callgrind, the second
pass's processing loop only).  Writes bench/results/<timestamp>.json and .md and prints the
Markdown tables.  Correctness is checked on the way: bytes delivered by rubikgen against libnids
and the capture manifest, TCP connections closed against the manifest's connection count, and
the signature matches (SF) of rubikgen against libnids, pattern by pattern.

Not part of the test suite; see bench/README.md and BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multicore import MC_WORKLOADS  # noqa: E402
from multicore import run as run_multicore  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BUILD = BENCH / "build"
PEERS_DIR = BUILD / "peers"
WORKLOADS = ["a", "b", "c", "d", "e"]
SEED = 1  # hash seed of the stack binaries (--seed): the same work on every run
TCP_SPEC = ROOT / "specs" / "protocols" / "tcp.yaml"
FT_PROTOCOL = BENCH / "specs" / "tcp_ft.yaml"
FT_STACK = BENCH / "specs" / "tcp_ip_ft.yaml"
SF_PATTERNS = BENCH / "sf_patterns.txt"  # the SF workload's patterns (id = line number)

Json = dict[str, Any]


# ---------------------------------------------------------------------------
# configurations


@dataclass(frozen=True)
class Build:
    """One `rubikgen build` of a stack spec."""

    key: str  # directory name under bench/build, e.g. "tcp_ip-O2"
    spec: Path
    stack: str  # the stack's name (binary and file prefix)
    opt: int

    @property
    def dir(self) -> Path:
        return BUILD / self.key

    @property
    def binary(self) -> Path:
        return self.dir / self.stack

    @property
    def checker(self) -> Path:
        return self.dir / f"{self.stack}-flows"


BUILDS: dict[str, Build] = {
    b.key: b
    for b in [
        Build("tcp_ip-O0", ROOT / "specs/stacks/tcp_ip.yaml", "tcp_ip", 0),
        Build("tcp_ip-O2", ROOT / "specs/stacks/tcp_ip.yaml", "tcp_ip", 2),
        Build("tcp_ip_ft-O2", FT_STACK, "tcp_ip_ft", 2),
        Build("gtp-O0", ROOT / "specs/stacks/gtp.yaml", "gtp", 0),
        Build("gtp-O2", ROOT / "specs/stacks/gtp.yaml", "gtp", 2),
    ]
}


@dataclass(frozen=True)
class Config:
    name: str
    group: str  # "DA" (data assembly), "FT" (flow tracking), "SF" (signatures) or "bound"
    build: str | None = None  # key of BUILDS (rubikgen configurations)
    peer: str | None = None  # peer binary name (bench/build/peers/)
    doc: str = ""
    sf: bool = False  # the build's SF binary (`make -C bench sf`), matching bench/sf_patterns.txt

    @property
    def is_rubikgen(self) -> bool:
        return self.build is not None

    def binary(self) -> Path:
        if self.build is not None:
            b = BUILDS[self.build]
            return b.dir / f"{b.stack}-sf" if self.sf else b.binary
        assert self.peer is not None
        return PEERS_DIR / self.peer


SF_RUBIKGEN_DOC = "-O2 stack + SF NF (a Hyperscan stream per direction)"


def configs_for(stack: str) -> list[Config]:
    """The configurations of a workload whose capture the stack `stack` parses."""
    if stack == "gtp":
        return [
            Config("rubikgen-O0", "DA", build="gtp-O0", doc="gtp stack, generator -O0"),
            Config("rubikgen-O2", "DA", build="gtp-O2", doc="gtp stack, generator -O2"),
            Config("rubikgen-SF-O2", "SF", build="gtp-O2", sf=True, doc=SF_RUBIKGEN_DOC),
            Config("parse_only", "bound", peer="parse_only", doc="Eth/IPv4/UDP/GTP-U/IPv4/TCP"),
            Config("parse_hash", "bound", peer="parse_hash", doc="parse + inner 4-tuple lookup"),
        ]
    return [
        Config("rubikgen-O0", "DA", build="tcp_ip-O0", doc="tcp_ip stack, generator -O0"),
        Config("rubikgen-O2", "DA", build="tcp_ip-O2", doc="tcp_ip stack, generator -O2"),
        Config("nids_da", "DA", peer="nids_da", doc="libnids, both directions collected"),
        Config("rubikgen-FT-O2", "FT", build="tcp_ip_ft-O2", doc="tcp_ip, TCP buffer_data: false"),
        Config("nids_ft", "FT", peer="nids_ft", doc="libnids, no data collected"),
        Config("rubikgen-SF-O2", "SF", build="tcp_ip-O2", sf=True, doc=SF_RUBIKGEN_DOC),
        Config("nids_sf", "SF", peer="nids_sf", doc="nids_da + a Hyperscan stream per direction"),
        Config("parse_only", "bound", peer="parse_only", doc="Eth/IPv4/TCP header parse"),
        Config("parse_hash", "bound", peer="parse_hash", doc="parse + 4-tuple hash lookup"),
    ]


ALL_CONFIGS = ["rubikgen-O0", "rubikgen-O2", "nids_da", "rubikgen-FT-O2", "nids_ft"]
ALL_CONFIGS += ["rubikgen-SF-O2", "nids_sf", "parse_only", "parse_hash"]


#: Frames per burst of the rubikgen binaries and the parse bounds (--burst; libnids has none).
BURST = 32


def config_command(
    c: Config, capture: Path, passes: int, cap: int | None, burst: int = BURST
) -> list[str]:
    sf = ["--patterns", rel(SF_PATTERNS)] if c.group == "SF" else []
    # the same burst size for rubikgen and the bounds: ratios stay like for like
    bursts = ["--burst", str(burst)] if c.build is not None or c.group == "bound" else []
    if c.build is not None:
        cmd = [rel(c.binary()), rel(capture), "--bench", "--passes", str(passes)]
        cmd += ["--nf", "count", "--seed", str(SEED), *sf, *bursts]
        return cmd + (["--cap", str(cap)] if cap else [])
    cmd = [rel(c.binary()), rel(capture), "--passes", str(passes), *sf, *bursts]
    if cap:
        cmd += ["--cap", str(cap)]
    return cmd


# ---------------------------------------------------------------------------
# small helpers


def rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def run(cmd: list[str], *, cwd: Path = ROOT, timeout: float | None = None) -> str:
    """Run a command; its stdout, or SystemExit with its stderr on failure."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"bench: command failed ({p.returncode}): {shlex.join(cmd)}\n{p.stderr}{p.stdout}")
    return p.stdout


def last_json_line(text: str) -> Json:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            obj = json.loads(line)
            if isinstance(obj, dict):
                return obj
    raise ValueError(f"no JSON line in output: {text[-300:]!r}")


def first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


# ---------------------------------------------------------------------------
# the FT protocol spec: tcp.yaml with buffer_data: false


def ft_protocol_text(tcp_text: str) -> str:
    """bench/specs/tcp_ft.yaml as derived from specs/protocols/tcp.yaml."""
    modeline = "# yaml-language-server: $schema=../../schema/protocol.schema.json\n"
    header = (
        "# Benchmark copy of specs/protocols/tcp.yaml for flow tracking (FT): identical except that the\n"
        "# sequence does not buffer data (buffer_data: false), so offsets, windows, FIN markers and the\n"
        "# PSM work as in tcp.yaml but no byte is copied or delivered (assemble() gives an empty sdu).\n"
        "# Keep it in step with tcp.yaml (bench/run.py checks that only these lines differ).\n"
    )
    params = "  ip: {protocol: [ip.yaml, ipv6.yaml]}\n"
    window = '  window: ["temp.left", "temp.left + 0x40000000"]\n'
    for needle in (modeline, params, window):
        if tcp_text.count(needle) != 1:
            raise ValueError(f"tcp.yaml changed shape: cannot find {needle.strip()!r} once")
    text = tcp_text.replace(modeline, modeline + header)
    text = text.replace(
        params,
        "  ip: {protocol: [../../specs/protocols/ip.yaml, ../../specs/protocols/ipv6.yaml]}\n",
    )
    return text.replace(
        window, window + "  buffer_data: false                      # FT: track offsets only\n"
    )


def check_ft_spec(update: bool) -> None:
    want = ft_protocol_text(TCP_SPEC.read_text())
    have = FT_PROTOCOL.read_text() if FT_PROTOCOL.exists() else ""
    if want == have:
        return
    if update:
        FT_PROTOCOL.write_text(want)
        print(f"bench: rewrote {rel(FT_PROTOCOL)} from {rel(TCP_SPEC)}", file=sys.stderr)
        return
    sys.exit(
        f"bench: {rel(FT_PROTOCOL)} is out of step with {rel(TCP_SPEC)}; "
        "run `python bench/run.py --update-ft-spec` (it rewrites the copy and goes on)"
    )


# ---------------------------------------------------------------------------
# building


def rubikgen_cmd() -> list[str]:
    return [sys.executable, "-m", "rubikgen"]


def build_all(builds: list[Build], need_peers: bool, sf_builds: set[str], sf_peer: bool) -> Json:
    """Build the runtime, the peers, the stacks, their flow checkers and (for the builds in
    sf_builds) their SF binaries; what was built."""
    info: Json = {}
    print(
        "bench: building (make -C runtime-c lib, make -C bench peers, rubikgen build)",
        file=sys.stderr,
    )
    if (sf_builds or sf_peer) and subprocess.run(["pkg-config", "--exists", "libhs"]).returncode:
        sys.exit(
            "bench: the SF configurations need Hyperscan (apt-get install libhyperscan-dev, "
            "or bash ci/setup.sh); or leave them out with --configs"
        )
    run(["make", "-s", "-C", "runtime-c", "lib"])
    if need_peers:
        run(["make", "-s", "-C", "bench", "peers"])
    if sf_peer:
        run(["make", "-s", "-C", "bench", "sf-peer"])
    run(rubikgen_cmd() + ["validate", "--strict", "bench/specs"])
    for b in builds:
        cmd = rubikgen_cmd() + ["build", rel(b.spec), "-o", rel(b.dir), f"-O{b.opt}"]
        run(cmd)
        run(["make", "-s", "-C", "bench", "flows", f"STACK={b.stack}", f"STACK_DIR={b.dir}"])
        stamp: Json = {}
        stamp_path = b.dir / f"{b.stack}.stamp"
        if stamp_path.exists():
            stamp = json.loads(stamp_path.read_text())
        info[b.key] = {
            "command": shlex.join(cmd),
            "spec": rel(b.spec),
            "opt_level": b.opt,
            "binary": rel(b.binary),
            "spec_hash": stamp.get("spec_hash"),
            "cc_command": stamp.get("command"),
        }
        if b.key in sf_builds:
            # the same generated code and flags, with bench/nf's SF network function linked in
            sf_cmd = ["make", "-s", "-C", "bench", "sf", f"STACK={b.stack}", f"STACK_DIR={b.dir}"]
            run(sf_cmd)
            info[b.key]["sf_command"] = shlex.join(sf_cmd)
            info[b.key]["sf_binary"] = rel(b.dir / f"{b.stack}-sf")
    # how much the generator's -O2 changes the code today
    for stack in ("tcp_ip", "gtp"):
        o0, o2 = BUILD / f"{stack}-O0" / f"{stack}_gen.c", BUILD / f"{stack}-O2" / f"{stack}_gen.c"
        if o0.exists() and o2.exists():
            a, b2 = o0.read_text().splitlines()[3:], o2.read_text().splitlines()[3:]
            changed = sum(
                1
                for d in difflib.unified_diff(a, b2, lineterm="", n=0)
                if d[:1] in "+-" and d[:3] not in ("+++", "---")
            )
            info[f"{stack}-O0-vs-O2"] = {
                "gen_c_lines_O0": len(a),
                "gen_c_lines_O2": len(b2),
                "lines_changed": changed,
            }
    return info


# ---------------------------------------------------------------------------
# captures and the manifest


@dataclass
class Capture:
    workload: str
    path: Path
    packets: int | None = None
    wire_bytes: int | None = None  # sum of the frames' original lengths
    captured_bytes: int | None = None  # sum of caplen
    linktype: int | None = None
    sha256: str | None = None
    gtp: bool = False
    manifest: Json | None = None

    @property
    def stack(self) -> str:
        return "gtp" if self.gtp else "tcp_ip"


def _looks_gtp(frame: bytes) -> bool:
    off = 12
    while len(frame) >= off + 2 and frame[off : off + 2] in (b"\x81\x00", b"\x88\xa8"):
        off += 4
    if frame[off : off + 2] != b"\x08\x00" or len(frame) < off + 2 + 28:
        return False
    ip = frame[off + 2 :]
    ihl = (ip[0] & 15) * 4
    if ip[9] != 17 or len(ip) < ihl + 4:
        return False
    sport, dport = struct.unpack("!HH", ip[ihl : ihl + 4])
    return 2152 in (sport, dport)


def scan_capture(c: Capture) -> None:
    """Packets, bytes and link type of a classic pcap file; whether it carries GTP-U."""
    with c.path.open("rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic = head[:4]
        if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            endian = "<"
        elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
            endian = ">"
        else:  # pcapng: the figures come from the binaries' output instead
            return
        c.linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
        rec = struct.Struct(endian + "IIII")
        n = wire = captured = gtp_frames = 0
        while True:
            h = f.read(16)
            if len(h) < 16:
                break
            _, _, incl, orig = rec.unpack(h)
            if n < 1000 and c.linktype == 1:
                if _looks_gtp(f.read(incl)):
                    gtp_frames += 1
            else:
                f.seek(incl, os.SEEK_CUR)
            n += 1
            wire += orig
            captured += incl
        c.packets, c.wire_bytes, c.captured_bytes = n, wire, captured
        c.gtp = gtp_frames > 0
    digest = hashlib.sha256()
    with c.path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    c.sha256 = digest.hexdigest()


PAYLOAD_KEYS = (
    "payload_bytes",
    "total_payload_bytes",
    "payload",
    "bytes_payload",
    "tcp_payload_bytes",
)
CONN_KEYS = ("connections", "n_connections", "conns", "flows", "tcp_connections")
FILE_KEYS = ("file", "capture", "pcap", "path")


def _manifest_entries(doc: Any) -> dict[str, Json]:
    """Per-workload entries of MANIFEST.json, whatever its top-level shape."""
    entries: dict[str, Json] = {}
    if isinstance(doc, dict) and "workloads" in doc:
        doc = doc["workloads"]
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, dict):
                entries[str(k)] = v
    elif isinstance(doc, list):
        for v in doc:
            if not isinstance(v, dict):
                continue
            name = v.get("workload", v.get("name", v.get("id")))
            if name is None:
                for key in FILE_KEYS:
                    if isinstance(v.get(key), str):
                        name = Path(v[key]).stem
                        break
            if name is not None:
                entries[str(name)] = v
    return entries


def _first_int(entry: Json, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = entry.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, dict):  # per direction: {"c2s": .., "s2c": ..} (or with a "total")
            t = v.get("total")
            if isinstance(t, int):
                return t
            if v and all(isinstance(x, int) and not isinstance(x, bool) for x in v.values()):
                return sum(v.values())
    for v in entry.values():  # one level down: {"expected": {"payload_bytes": ...}}
        if isinstance(v, dict):
            got = _first_int_flat(v, keys)
            if got is not None:
                return got
    return None


def _first_int_flat(entry: Json, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = entry.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def expected(c: Capture) -> tuple[int | None, int | None]:
    """(payload bytes, connections) the manifest announces for a workload."""
    if not c.manifest:
        return None, None
    return _first_int(c.manifest, PAYLOAD_KEYS), _first_int(c.manifest, CONN_KEYS)


def find_captures(cap_dir: Path, workloads: list[str], explicit: bool) -> list[Capture]:
    manifest_path = cap_dir / "MANIFEST.json"
    entries: dict[str, Json] = {}
    if manifest_path.exists():
        entries = _manifest_entries(json.loads(manifest_path.read_text()))
    found: list[Capture] = []
    for w in workloads:
        entry = entries.get(w)
        path = cap_dir / f"{w}.pcap"
        if entry:
            for key in FILE_KEYS:
                if isinstance(entry.get(key), str):
                    cand = Path(entry[key])
                    cand = cand if cand.is_absolute() else cap_dir / cand.name
                    if cand.exists():
                        path = cand
                    break
        if not path.exists():
            alt = cap_dir / f"{w}.pcapng"
            path = alt if alt.exists() else path
        if not path.exists():
            msg = f"bench: no capture for workload {w} ({rel(path)})"
            if explicit:
                sys.exit(msg + "; generate them with `python bench/gen.py`")
            print(msg + ": skipped", file=sys.stderr)
            continue
        c = Capture(w, path, manifest=entry)
        scan_capture(c)
        found.append(c)
    return found


# ---------------------------------------------------------------------------
# measuring


@dataclass
class Measure:
    config: Config
    command: list[str]
    runs: list[Json] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    instructions_per_pkt: float | None = None
    callgrind_note: str | None = None
    flows: Json | None = None  # the flow checker's output (rubikgen configurations)

    def best(self, key: str) -> float | None:
        vals = [float(r[key]) for r in self.runs if key in r]
        return min(vals) if vals else None

    @property
    def last(self) -> Json:
        return self.runs[-1] if self.runs else {}


def pin_prefix(cpu: int | None) -> list[str]:
    return ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []


def run_once(m: Measure, cpu: int | None) -> None:
    cmd = pin_prefix(cpu) + m.command
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        m.errors.append("timeout")
        return
    if p.returncode != 0:
        m.errors.append(f"exit {p.returncode}: {p.stderr.strip()[-500:]}")
        return
    try:
        m.runs.append(last_json_line(p.stdout))
    except ValueError as e:
        m.errors.append(str(e))


def callgrind_ir(m: Measure, capture: Capture, cap: int | None, burst: int = BURST) -> None:
    """Instructions per packet of the second pass's processing loop (callgrind).

    The program runs with --passes 2 under callgrind with --dump-before=clock_gettime*: every
    clock read starts a new dump part, and both the stack binaries' --bench mode and the peers
    read the clocks exactly four times per pass (CPU, wall, loop, CPU, wall), so part 4k+3 is the
    loop of pass k (from 0) and part 7 the loop of the second, warm pass (plus the ~20
    instructions of one clock_gettime call)."""
    if not shutil.which("valgrind"):
        m.callgrind_note = "valgrind not installed"
        return
    cmd = config_command(m.config, capture.path, 2, cap, burst)
    with tempfile.TemporaryDirectory(prefix="rg-callgrind-") as tmp:
        out = Path(tmp) / "cg.out"
        full = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--dump-before=clock_gettime*",
            *cmd,
        ]
        p = subprocess.run(full, capture_output=True, text=True, timeout=6 * 3600)
        if p.returncode != 0:
            m.callgrind_note = f"callgrind failed ({p.returncode}): {p.stderr.strip()[-300:]}"
            return
        parts: dict[int, int] = {}
        for f in Path(tmp).glob("cg.out.*"):
            suffix = f.name.rsplit(".", 1)[1]
            if not suffix.isdigit():
                continue
            text = f.read_text(errors="replace")
            mt = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
            trig = re.search(r"^desc: Trigger: (.*)$", text, re.M)
            if mt and trig and "clock_gettime" in trig.group(1):
                parts[int(suffix)] = int(mt.group(1))
        if sorted(parts) != list(range(1, 9)):
            m.callgrind_note = f"unexpected callgrind dump parts {sorted(parts)} (want 1..8)"
            return
        pkts = int(last_json_line(p.stdout).get("pkts", capture.packets or 0))
        if pkts <= 0:
            m.callgrind_note = "no packets"
            return
        m.instructions_per_pkt = parts[7] / pkts
        m.callgrind_note = (
            f"pass 2 loop: {parts[7]} Ir / {pkts} packets (pass 1 loop: {parts[3]} Ir)"
        )


def run_flows(build_key: str, capture: Capture) -> Json | None:
    b = BUILDS[build_key]
    p = subprocess.run(
        [str(b.checker), str(capture.path)], capture_output=True, text=True, timeout=3600
    )
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-500:]}
    return last_json_line(p.stdout)


def tcp_flows(flows: Json | None) -> Json:
    """Sum the TCP layers (tcp, tcp6) of a flow-checker output."""
    tot = {
        k: 0
        for k in ("opened", "accept", "evicted", "expired", "flushed", "complete", "payload_bytes")
    }
    if not flows or "layers" not in flows:
        return tot
    for layer in flows["layers"].values():
        if layer.get("protocol") == "tcp":
            for k in tot:
                tot[k] += int(layer.get(k, 0))
    return tot


# ---------------------------------------------------------------------------
# results


def summarise(m: Measure, c: Capture, ref_payload: int | None) -> Json:
    cpu, wall = m.best("cpu_ns_per_pkt"), m.best("wall_ns_per_pkt")
    last = m.last
    pkts = int(last.get("pkts", c.packets or 0))
    wire = c.wire_bytes if c.wire_bytes is not None else int(last.get("wire_bytes", 0))
    out: Json = {
        "group": m.config.group,
        "doc": m.config.doc,
        "command": shlex.join(m.command),
        "runs": [
            {"cpu_ns_per_pkt": r.get("cpu_ns_per_pkt"), "wall_ns_per_pkt": r.get("wall_ns_per_pkt")}
            for r in m.runs
        ],
        "errors": m.errors,
        "cpu_ns_per_pkt": cpu,
        "wall_ns_per_pkt": wall,
        "mpps": 1e3 / cpu if cpu else None,
        "mpps_wall": 1e3 / wall if wall else None,
        "payload_gbps": None,
        "wire_gbps": None,
        "instructions_per_pkt": m.instructions_per_pkt,
        "callgrind": m.callgrind_note,
        "pkts": pkts,
        "payload_bytes": last.get("payload_bytes"),
        "flows_opened": last.get("flows_opened"),
        "flows_closed": last.get("flows_closed"),
        "output": last,
    }
    if cpu and pkts:
        seconds = cpu * pkts / 1e9
        out["wire_gbps"] = wire * 8 / seconds / 1e9
        if ref_payload is not None:
            out["payload_gbps"] = ref_payload * 8 / seconds / 1e9
    if m.config.group == "SF":
        out["sf"] = sf_summary(last)
    if m.config.is_rubikgen:
        tf = tcp_flows(m.flows)
        out["flows"] = m.flows
        out["tcp"] = tf
        # rubikgen's flows_closed: TCP connections its PSM closed (FIN/ACK or RST), not the
        # instances the final flush ends (the --bench totals count every layer and the flush)
        out["instances_closed_all_layers"] = last.get("flows_closed")
        out["flows_opened"] = tf["opened"]
        out["flows_closed"] = tf["accept"]
    return out


def sf_by_id(per: list[int] | None) -> str | None:
    """The patterns that matched as "id:count ..." (ids are line numbers of the pattern file)."""
    if per is None:
        return None
    return " ".join(f"{i + 1}:{n}" for i, n in enumerate(per) if n) or "none"


def sf_summary(o: Json) -> Json:
    """The SF counts of a run's output line (sf_hs.h: sf_counts_json)."""
    per = o.get("sf_pattern_matches")
    return {
        "matches": o.get("sf_matches"),
        "patterns": o.get("sf_patterns"),
        "patterns_hit": o.get("sf_patterns_hit"),
        "pattern_matches": per,  # index i: pattern id i + 1 (its line in the pattern file)
        "matched": sf_by_id(per),
        "streams": o.get("sf_streams"),
        "chunks": o.get("sf_chunks"),
        "scanned_bytes": o.get("sf_scanned_bytes"),
        "errors": o.get("sf_errors"),
        "consistent": o.get("sf_consistent"),
    }


def sf_checks(c: Capture, res: dict[str, Json], exp_payload: int | None) -> list[Json]:
    """The SF workload's correctness: rubikgen and libnids chunk the payload differently, but
    Hyperscan's streaming mode makes the matches independent of the chunking, so both must
    report the same match count for every pattern."""
    out: list[Json] = []
    sf = {k: r["sf"] for k, r in res.items() if r.get("group") == "SF" and r.get("sf")}
    rg, nids = sf.get("rubikgen-SF-O2"), sf.get("nids_sf")
    if rg and nids and rg["pattern_matches"] is not None and nids["pattern_matches"] is not None:
        a, b = rg["pattern_matches"], nids["pattern_matches"]
        diff = [
            f"id {i + 1}: {x} vs {y}" for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y
        ]
        if len(a) != len(b):
            diff.insert(0, f"{len(a)} vs {len(b)} patterns")
        same = not diff and rg["matches"] == nids["matches"]
        verdict = "every pattern's count equal" if same else "differ: " + ", ".join(diff[:10])
        detail = (
            f"{rg['matches']} vs {nids['matches']} matches; {rg['patterns_hit']} of "
            f"{rg['patterns']} patterns matched; {verdict}; "
            f"chunks scanned {rg['chunks']} vs {nids['chunks']}"
        )
        out.append(check("sf matches: rubikgen-SF-O2 == nids_sf (per pattern)", same, detail))
    for cfg, v in sf.items():
        out.append(
            check(
                f"sf matches > 0: {cfg}",
                bool(v["matches"]),
                f"{v['matches']} matches (id:count {v['matched']})",
            )
        )
        if exp_payload is not None:
            out.append(
                check(
                    f"sf bytes scanned: {cfg} == manifest",
                    v["scanned_bytes"] == exp_payload,
                    f"{v['scanned_bytes']} vs {exp_payload}",
                )
            )
        if v["errors"]:
            out.append(check(f"sf Hyperscan errors: {cfg}", False, str(v["errors"])))
    return out


def check(name: str, ok: bool | None, detail: str) -> Json:
    return {
        "check": name,
        "status": "n/a" if ok is None else ("ok" if ok else "FAIL"),
        "detail": detail,
    }


def correctness(c: Capture, res: dict[str, Json]) -> list[Json]:
    exp_payload, conns = expected(c)
    out: list[Json] = []

    def val(cfg: str, key: str) -> int | None:
        v = res.get(cfg, {}).get(key)
        return int(v) if isinstance(v, int | float) else None

    if c.manifest and isinstance(c.manifest.get("sha256"), str):
        same = c.manifest["sha256"] == c.sha256
        out.append(check("capture file == manifest (sha256)", same, f"{c.path.name} {c.sha256}"))
    rg = val("rubikgen-O2", "payload_bytes")
    nids = val("nids_da", "payload_bytes")
    o0 = val("rubikgen-O0", "payload_bytes")
    if rg is not None and o0 is not None:
        out.append(check("payload: rubikgen-O0 == rubikgen-O2", o0 == rg, f"{o0} vs {rg}"))
    if rg is not None and nids is not None:
        out.append(
            check(
                "payload: rubikgen-O2 == nids_da",
                rg == nids,
                f"{rg} vs {nids} (diff {rg - nids:+d})",
            )
        )
    if rg is not None:
        out.append(
            check(
                "payload: rubikgen-O2 == manifest",
                None if exp_payload is None else rg == exp_payload,
                f"{rg} vs {exp_payload if exp_payload is not None else 'no manifest figure'}",
            )
        )
    if nids is not None and exp_payload is not None:
        out.append(
            check(
                "payload: nids_da == manifest",
                nids == exp_payload,
                f"{nids} vs {exp_payload} (diff {nids - exp_payload:+d})",
            )
        )
    flow_cfgs = ["rubikgen-O2", "rubikgen-O0", "rubikgen-FT-O2", "rubikgen-SF-O2"]
    for cfg in flow_cfgs + ["nids_da", "nids_ft", "nids_sf"]:
        closed = val(cfg, "flows_closed")
        if closed is None:
            continue
        extra = ""
        r = res[cfg]
        if cfg.startswith("rubikgen"):
            t = r.get("tcp", {})
            extra = (
                f"; TCP instances opened {t.get('opened')}, closed by the PSM {t.get('accept')}, "
                f"flushed at the end {t.get('flushed')}, expired {t.get('expired')}, evicted {t.get('evicted')}"
            )
        else:
            o = r.get("output", {})
            extra = (
                f"; established {o.get('flows_opened')}, FIN {o.get('close_fin')}, RST {o.get('close_rst')}, "
                f"timed out {o.get('close_timeout')}, still open at the end {o.get('flows_open_at_end')}"
            )
        out.append(
            check(
                f"flows closed: {cfg} == connections",
                None if conns is None else closed == conns,
                f"{closed} vs {conns if conns is not None else 'no manifest figure'}{extra}",
            )
        )
    for cfg, r in res.items():
        o = r.get("output", {})
        if o.get("consistent") is False or o.get("sf_consistent") is False:
            out.append(
                check(
                    f"passes agree: {cfg}", False, "the passes of a run reported different counters"
                )
            )
        warns = {k: v for k, v in o.items() if k.startswith("warn_") and v}
        if cfg.startswith("nids"):
            out.append(
                check(
                    f"libnids warnings: {cfg}",
                    not warns,
                    ", ".join(f"{k} {v}" for k, v in warns.items()) or "none",
                )
            )
        flows = r.get("flows") or {}
        if cfg.startswith("rubikgen") and flows.get("errors"):
            out.append(
                check(
                    f"stack errors: {cfg}",
                    False,
                    f"{flows['errors']} (rubikgen --stats tells which)",
                )
            )
    return out + sf_checks(c, res, exp_payload)


def ratios(res: dict[str, Json]) -> Json:
    out: Json = {}

    def ns(cfg: str) -> float | None:
        v = res.get(cfg, {}).get("cpu_ns_per_pkt")
        return float(v) if isinstance(v, int | float) and v else None

    def ir(cfg: str) -> float | None:
        v = res.get(cfg, {}).get("instructions_per_pkt")
        return float(v) if isinstance(v, int | float) and v else None

    pairs = [("rubikgen-O2", p) for p in ("rubikgen-O0", "nids_da", "parse_only", "parse_hash")]
    pairs += [("rubikgen-FT-O2", "nids_ft"), ("rubikgen-FT-O2", "parse_hash")]
    pairs += [("rubikgen-SF-O2", "nids_sf")]
    for mine, other in pairs:
        a, b = ns(mine), ns(other)
        ia, ib = ir(mine), ir(other)
        if a and b:
            out[f"{mine} vs {other}"] = {
                "speedup": b / a,  # > 1: rubikgen is faster (packets/s ratio)
                "instructions_ratio": ib / ia if ia and ib else None,
            }
    return out


def evaluate_targets(results: dict[str, Json]) -> list[Json]:
    t: list[Json] = []

    def get(w: str, cfg: str, key: str) -> Any:
        return results.get(w, {}).get("configs", {}).get(cfg, {}).get(key)

    def speed(w: str, a: str, b: str) -> float | None:
        r = results.get(w, {}).get("ratios", {}).get(f"{a} vs {b}")
        return float(r["speedup"]) if r else None

    for w in ("a", "b"):
        s = speed(w, "rubikgen-O2", "nids_da")
        t.append(
            {
                "target": f"DA ({w}): rubikgen -O2 >= 2x libnids packets/s",
                "measured": None if s is None else f"{s:.2f}x",
                "met": None if s is None else s >= 2.0,
            }
        )
    ir = get("a", "rubikgen-O2", "instructions_per_pkt")
    t.append(
        {
            "target": "DA (a): rubikgen -O2 <= 350 instructions/packet",
            "measured": None if ir is None else f"{ir:.0f} instructions/packet",
            "met": None if ir is None else ir <= 350,
        }
    )
    s = speed("a", "rubikgen-O2", "rubikgen-O0")
    t.append(
        {
            "target": "DA (a): rubikgen -O2 >= 1.5x rubikgen -O0",
            "measured": None if s is None else f"{s:.2f}x",
            "met": None if s is None else s >= 1.5,
        }
    )
    for w in ("c", "d"):
        checks = results.get(w, {}).get("checks", [])
        mine = [
            ch
            for ch in checks
            if ch["check"]
            in ("payload: rubikgen-O2 == manifest", "flows closed: rubikgen-O2 == connections")
        ]
        if not mine or any(ch["status"] == "n/a" for ch in mine):
            met = None
        else:
            met = all(ch["status"] == "ok" for ch in mine)
        t.append(
            {
                "target": f"({w}): every byte delivered and every flow closed (rubikgen -O2)",
                "measured": "; ".join(f"{ch['check']}: {ch['detail'].split(';')[0]}" for ch in mine)
                or None,
                "met": met,
            }
        )
    a_ns, e_ns = (
        get("a", "rubikgen-O2", "cpu_ns_per_pkt"),
        get("e", "rubikgen-O2", "cpu_ns_per_pkt"),
    )
    if a_ns and e_ns:
        rel_e = e_ns / a_ns
        t.append(
            {
                "target": "GTP (e): rubikgen -O2 per packet within 15% of (a)",
                "measured": f"{e_ns:.0f} vs {a_ns:.0f} ns/packet ({(rel_e - 1) * 100:+.1f}%)",
                "met": rel_e <= 1.15,
            }
        )
    else:
        t.append(
            {
                "target": "GTP (e): rubikgen -O2 per packet within 15% of (a)",
                "measured": None,
                "met": None,
            }
        )
    return t


def machine_info() -> Json:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nids = first_line(["dpkg-query", "-W", "-f=${Version}", "libnids-dev"])
    hs = first_line(["dpkg-query", "-W", "-f=${Version}", "libhyperscan-dev"])
    commit = first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "kernel": f"{platform.system()} {platform.release()}",
        "gcc": first_line(["cc", "--version"]),
        "libnids": f"libnids-dev {nids}" if nids != "unknown" else "unknown",
        "libpcap": first_line(["pkg-config", "--modversion", "libpcap"]),
        "hyperscan": f"libhyperscan-dev {hs}" if hs != "unknown" else "unknown",
        "valgrind": first_line(["valgrind", "--version"]) if shutil.which("valgrind") else None,
        "python": platform.python_version(),
        "git_commit": commit + (" (with local changes)" if dirty else ""),
        "loadavg_start": list(os.getloadavg()),
    }


# ---------------------------------------------------------------------------
# Markdown


def markdown(doc: Json) -> str:
    lines: list[str] = []
    add = lines.append
    mi = doc["machine"]
    add(f"Run {doc['timestamp']}: `{doc['command']}`  ")
    add(
        f"{mi['cpu_model']}, {mi['cores']} cores, {mi['kernel']}, {mi['gcc']}, {mi['libnids']}; "
        f"passes {doc['settings']['passes']}, rounds {doc['settings']['rounds']}; load average "
        f"{mi['loadavg_start'][0]:.2f} at the start, {mi.get('loadavg_end', [0.0])[0]:.2f} at the end."
    )
    add("")
    add(
        "| workload | config | group | ns/pkt cpu | ns/pkt wall | Mpps | payload Gbps | wire Gbps | instr/pkt | payload bytes | flows closed |"
    )
    add("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w, wr in doc["workloads"].items():
        for name, r in wr["configs"].items():
            ipp = r.get("instructions_per_pkt")
            add(
                f"| {w} | {name} | {r['group']} | {fmt(r['cpu_ns_per_pkt'])} | {fmt(r['wall_ns_per_pkt'])} | "
                f"{fmt(r['mpps'], 2)} | {fmt(r['payload_gbps'], 2)} | {fmt(r['wire_gbps'], 2)} | "
                f"{fmt(ipp, 0) if ipp else '–'} | {fmt(r['payload_bytes'])} | {fmt(r['flows_closed'])} |"
            )
    add("")
    sf_rows = [
        (w, name, r["sf"])
        for w, wr in doc["workloads"].items()
        for name, r in wr["configs"].items()
        if r.get("sf")
    ]
    if sf_rows:
        add(
            "| workload | SF config | matches | patterns matched | matches by pattern id | streams | chunks scanned | bytes scanned |"
        )
        add("|---|---|---:|---:|---|---:|---:|---:|")
        for w, name, v in sf_rows:
            by_id = v["matched"] or "–"
            add(
                f"| {w} | {name} | {fmt(v['matches'])} | {fmt(v['patterns_hit'])}/{fmt(v['patterns'])} | "
                f"{by_id} | {fmt(v['streams'])} | {fmt(v['chunks'])} | {fmt(v['scanned_bytes'])} |"
            )
        add("")
    add("| workload | comparison | speedup (packets/s) | instructions ratio |")
    add("|---|---|---:|---:|")
    for w, wr in doc["workloads"].items():
        for name, r in wr["ratios"].items():
            add(f"| {w} | {name} | {r['speedup']:.2f}x | {fmt(r['instructions_ratio'], 2)} |")
    add("")
    add("| workload | check | status | detail |")
    add("|---|---|---|---|")
    for w, wr in doc["workloads"].items():
        for ch in wr["checks"]:
            add(f"| {w} | {ch['check']} | {ch['status']} | {ch['detail']} |")
    add("")
    add("| target | measured | met |")
    add("|---|---|---|")
    for t in doc["targets"]:
        met = t["met"]
        add(
            f"| {t['target']} | {t['measured'] or 'not measured'} | {'n/a' if met is None else ('yes' if met else 'NO')} |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="Benchmark rubikgen stacks against libnids and the parse/hash bounds.",
    )
    ap.add_argument(
        "--captures",
        type=Path,
        default=BENCH / "captures",
        help="directory of W.pcap + MANIFEST.json",
    )
    ap.add_argument(
        "--workloads",
        nargs="+",
        metavar="W",
        help="workloads to run (default: a b c d e, those present); also the multi-core and "
        "wire workloads of bench/multicore.py: scale dpdk live flows1m",
    )
    ap.add_argument(
        "--configs",
        nargs="+",
        metavar="C",
        choices=ALL_CONFIGS,
        help="configurations (default: all)",
    )
    ap.add_argument(
        "--passes", type=int, default=5, help="passes per run; the best one counts (default 5)"
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; the best run counts (default 3)"
    )
    ap.add_argument(
        "--callgrind", action="store_true", help="also count instructions/packet with callgrind"
    )
    ap.add_argument(
        "--out", type=Path, default=BENCH / "results", help="where <timestamp>.json/.md go"
    )
    ap.add_argument("--cpu", type=int, help="pin every run to this CPU (taskset)")
    ap.add_argument(
        "--burst",
        type=int,
        default=BURST,
        help=f"frames per burst of rubikgen and the parse bounds (default {BURST}; 1: none)",
    )
    ap.add_argument(
        "--cap",
        type=int,
        help="flow-table size of every configuration: rubikgen --cap (live instances per layer, "
        "default 262144), libnids n_tcp_streams and parse_hash's table (default 1<<20)",
    )
    ap.add_argument(
        "--no-build", action="store_true", help="use the binaries already in bench/build"
    )
    ap.add_argument(
        "--update-ft-spec",
        action="store_true",
        help="rewrite bench/specs/tcp_ft.yaml from tcp.yaml",
    )
    a = ap.parse_args(argv)
    if a.passes < 1 or a.rounds < 1:
        ap.error("--passes and --rounds must be at least 1")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.chdir(ROOT)
    check_ft_spec(args.update_ft_spec)
    command = shlex.join(["python", "bench/run.py", *(sys.argv[1:] if argv is None else argv)])
    mc = [w for w in args.workloads or [] if w in MC_WORKLOADS]
    if mc:  # the multi-core and wire workloads (bench/multicore.py)
        doc = {"command": command, "machine": machine_info()}
        doc["multicore"] = run_multicore(mc, args.captures, args.passes, args.rounds, args.no_build)
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        (args.out / f"{stamp}-multicore.json").write_text(json.dumps(doc, indent=1) + "\n")
        args.workloads = [w for w in args.workloads if w not in MC_WORKLOADS]
        if not args.workloads:
            return 0
    explicit = args.workloads is not None
    captures = find_captures(args.captures.resolve(), args.workloads or WORKLOADS, explicit)
    if not captures:
        sys.exit(
            f"bench: no captures in {rel(args.captures)}; generate them with `python bench/gen.py`"
        )

    plan: dict[str, list[Config]] = {}
    for c in captures:
        cfgs = configs_for(c.stack)
        if args.configs:
            cfgs = [x for x in cfgs if x.name in args.configs]
        plan[c.workload] = cfgs
    planned = [x for cfgs in plan.values() for x in cfgs]
    needed = sorted({x.build for x in planned if x.build})
    builds_info: Json = {}
    if not args.no_build:
        builds_info = build_all(
            [BUILDS[k] for k in needed],
            any(x.peer and x.group != "SF" for x in planned),
            {x.build for x in planned if x.build and x.sf},
            any(x.peer == "nids_sf" for x in planned),
        )

    measures: dict[str, dict[str, Measure]] = {}
    for c in captures:
        measures[c.workload] = {
            x.name: Measure(x, config_command(x, c.path, args.passes, args.cap, args.burst))
            for x in plan[c.workload]
        }
    machine = machine_info()
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())

    # interleaved rounds: every configuration of every workload once per round; the order
    # rotates from round to round so that no configuration always runs first
    jobs = [(c, m) for c in captures for m in measures[c.workload].values()]
    for rnd in range(args.rounds):
        k = rnd % len(jobs)
        for c, m in jobs[k:] + jobs[:k]:
            run_once(m, args.cpu)
            r = m.last if m.runs else {}
            print(
                f"bench: round {rnd + 1}/{args.rounds} {c.workload} {m.config.name:15s} "
                f"{fmt(r.get('cpu_ns_per_pkt'))} ns/pkt cpu, {fmt(r.get('wall_ns_per_pkt'))} wall"
                + (f"  ERROR {m.errors[-1]}" if m.errors else ""),
                file=sys.stderr,
            )
    # correctness counters of the stacks (untimed; the SF binary shares its build's checker)
    for c in captures:
        checked: dict[str, Json | None] = {}
        for m in measures[c.workload].values():
            if m.config.build:
                if m.config.build not in checked:
                    checked[m.config.build] = run_flows(m.config.build, c)
                m.flows = checked[m.config.build]
    if args.callgrind:
        for c in captures:
            for m in measures[c.workload].values():
                print(f"bench: callgrind {c.workload} {m.config.name}", file=sys.stderr)
                callgrind_ir(m, c, args.cap, args.burst)

    workloads: Json = {}
    for c in captures:
        exp_payload, conns = expected(c)
        ms = measures[c.workload]
        ref_payload = exp_payload
        if ref_payload is None and "rubikgen-O2" in ms and ms["rubikgen-O2"].runs:
            ref_payload = int(ms["rubikgen-O2"].last.get("payload_bytes", 0))
        res = {name: summarise(m, c, ref_payload) for name, m in ms.items()}
        workloads[c.workload] = {
            "capture": rel(c.path),
            "stack": c.stack,
            "packets": c.packets,
            "wire_bytes": c.wire_bytes,
            "captured_bytes": c.captured_bytes,
            "linktype": c.linktype,
            "sha256": c.sha256,
            "manifest": c.manifest,
            "expected_payload_bytes": exp_payload,
            "connections": conns,
            "payload_gbps_basis": "manifest payload bytes"
            if exp_payload is not None
            else "rubikgen-O2 delivered bytes",
            "configs": res,
            "ratios": ratios(res),
            "checks": correctness(c, res),
        }
    machine["loadavg_end"] = list(os.getloadavg())
    doc: Json = {
        "schema": 1,
        "timestamp": started,
        "command": command,
        "machine": machine,
        "settings": {
            "passes": args.passes,
            "rounds": args.rounds,
            "burst": args.burst,
            "callgrind": args.callgrind,
            "callgrind_method": "Ir of the second pass's processing loop (callgrind --dump-before=clock_gettime*, dump part 7 of a --passes 2 run) / packets"
            if args.callgrind
            else None,
            "captures": rel(args.captures.resolve()),
            "seed": SEED,
            "cpu": args.cpu,
            "sf_patterns": {
                "file": rel(SF_PATTERNS),
                "sha256": hashlib.sha256(SF_PATTERNS.read_bytes()).hexdigest()
                if SF_PATTERNS.exists()
                else None,
                "count": len(SF_PATTERNS.read_text().splitlines())
                if SF_PATTERNS.exists()
                else None,
                "engine": "Hyperscan streaming mode (HS_MODE_STREAM), one stream per flow "
                "direction; flags HS_FLAG_DOTALL | HS_FLAG_MULTILINE; every match report counts",
            },
            "rates_from": "best pass CPU time (CLOCK_THREAD_CPUTIME_ID); wall time reported alongside",
        },
        "builds": builds_info,
        "workloads": workloads,
    }
    doc["targets"] = evaluate_targets(workloads)
    args.out.mkdir(parents=True, exist_ok=True)
    out_json = args.out / f"{started}.json"
    out_json.write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    (args.out / f"{started}.md").write_text(md)
    print(md)
    print(f"bench: wrote {rel(out_json)} and {rel(out_json.with_suffix('.md'))}", file=sys.stderr)
    failed = [
        f"{w}: {m.config.name}: {m.errors[-1]}"
        for w, ms in measures.items()
        for m in ms.values()
        if not m.runs
    ]
    for f in failed:
        print(f"bench: no measurement for {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
