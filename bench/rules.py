"""Cost of rules compiled into the TCP/IP stack (BENCHMARKS.md "Rules").

    python bench/rules.py [--connections 2000] [--sizes 0 1 10 100 1000] [--rewrite] [--reload]
                          [--actions] [--out FILE.md]

Generates workload a of bench/gen.py (HTTP-like connections, 9 packets each), builds
specs/stacks/tcp_ip.yaml -O2 plain and with rule sets of N rules (half exact 5-tuple matches,
half prefix or range matches; none matches the workload, so every packet pays the whole rule
set: the worst case), and counts instructions per packet with callgrind exactly as
bench/run.py does: the second pass's processing loop of `BINARY CAPTURE --bench --passes 2
--nf count` (the dump part between its clock reads) divided by the packets. With a rewrite
rule (`--rewrite`, needs the generated setters) every packet is also rewritten. `--reload` also
builds each size `--rules-reload` (the rule set called through one pointer, docs/rules.md).
`--actions` adds one-rule sets with the reject and clamp-mss actions (never hit, every SYN
rejected, every SYN and SYN-ACK clamped), and the cost of building and writing the replies:
callgrind's inclusive instructions of the driver's rg_rejector_answer in a `--write` run,
per rejected packet.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"


def rules_text(n: int, seed: int = 1, rewrite: bool = False) -> str:
    """n rules: even ones exact 5-tuples, odd ones alternately a /24 prefix with a port range
    and a pair of port ranges. Addresses in 172.16/12 and 192.168/16: the workload uses 10/8."""
    r = random.Random(seed)
    lines = [f"spec: {STACK}", "rules:" if n or rewrite else "rules: []"]
    for i in range(n):
        if i % 2 == 0:
            m = (f"ip.saddr == 172.{r.randint(16, 31)}.{r.randint(0, 255)}.{r.randint(1, 254)} "
                 f"&& ip.daddr == 172.{r.randint(16, 31)}.{r.randint(0, 255)}.{r.randint(1, 254)} "
                 f"&& tcp.sport == {r.randint(1024, 65535)} && tcp.dport == {r.randint(1, 1023)}")  # fmt: skip
        elif i % 4 == 1:
            lo = r.randint(1, 60000)
            m = (f"ip.daddr == 192.168.{r.randint(0, 255)}.0/24 "
                 f"&& tcp.dport >= {lo} && tcp.dport <= {lo + r.randint(0, 5000)}")  # fmt: skip
        else:
            lo, lo2 = r.randint(1, 1000), r.randint(1, 60000)
            m = (f"tcp.dport >= {lo} && tcp.dport <= {lo + 20} "
                 f"&& tcp.sport >= {lo2} && tcp.sport <= {lo2 + 100} && ip.ttl < 2")  # fmt: skip
        lines.append(f'  - {{name: r{i}, match: "{m}", action: count}}')
    if rewrite:
        lines.append('  - {name: every, match: "tcp", action: {rewrite: {ip.ttl: 33}}}')
    return "\n".join(lines) + "\n"


# one-rule sets of the actions that answer or rewrite (--actions): workload a's SYNs and
# SYN-ACKs carry an MSS of 1460; no packet goes to port 7
ACTIONS = {
    "reject, never hit": '{name: rej, match: "tcp.dport == 7", action: reject}',
    "reject every SYN": '{name: rej, match: "tcp.syn && !tcp.ack", action: reject}',
    "clamp-mss 1360 (every SYN, SYN-ACK)": '{name: clamp, match: "tcp.syn", action: {clamp-mss: 1360}}',
}


def action_rules(rule: str) -> str:
    return f"spec: {STACK}\nrules:\n  - {rule}\n"


def reply_cost(binary: Path, capture: Path) -> tuple[float, float, int]:
    """Inclusive instructions of rg_rejector_answer (replies built and written) and of
    rg_reject_build (built) per rejected packet, in a --write run."""
    with tempfile.TemporaryDirectory(prefix="rg-rules-cg-") as tmp:
        out = Path(tmp) / "cg.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary),
               str(capture), "--nf", "none", "--summary", "json", "--reject-rate", "0",
               "--write", str(Path(tmp) / "w.pcap")]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"callgrind failed: {p.stderr[-1000:]}")
        rejected = int(json.loads(p.stdout.strip().splitlines()[-1])["reject"]["rejected"])
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        got = []
        for fn in ("rg_rejector_answer", "rg_reject_build"):
            m = re.search(rf"^\s*([\d,]+)\s.*\b{fn}\b", ann, re.M)
            if m is None:
                raise SystemExit(f"callgrind_annotate: no {fn}")
            got.append(int(m.group(1).replace(",", "")) / rejected)
        return got[0], got[1], rejected


def build(out: Path, rules: Path | None, reload: bool = False) -> Path:
    cmd = [sys.executable, "-m", "rubikgen", "build", str(STACK), "-o", str(out)]
    if rules is not None:
        cmd += ["--rules", str(rules)]
    if reload:
        cmd.append("--rules-reload")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"build failed: {p.stderr[-2000:]}")
    return out / "tcp_ip"


def instructions_per_packet(binary: Path, capture: Path) -> tuple[float, int]:
    """bench/run.py's method: part 7 of a --passes 2 run is the second pass's loop."""
    with tempfile.TemporaryDirectory(prefix="rg-rules-cg-") as tmp:
        out = Path(tmp) / "cg.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               "--dump-before=clock_gettime*", str(binary), str(capture), "--bench",
               "--passes", "2", "--nf", "count", "--seed", "1"]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"callgrind failed: {p.stderr[-1000:]}")
        parts: dict[int, int] = {}
        for f in Path(tmp).glob("cg.out.*"):
            suffix = f.name.rsplit(".", 1)[1]
            if suffix.isdigit():
                m = re.search(r"^(?:summary|totals):\s*(\d+)", f.read_text(errors="replace"), re.M)
                if m:
                    parts[int(suffix)] = int(m.group(1))
        pkts = int(json.loads(p.stdout.strip().splitlines()[-1])["pkts"])
        return parts[7] / pkts, pkts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--sizes", type=int, nargs="*", default=[0, 1, 10, 100, 1000])
    ap.add_argument("--rewrite", action="store_true", help="also a rewrite on every packet")
    ap.add_argument(
        "--reload",
        action="store_true",
        help="also each size built --rules-reload (the rule set called through a pointer)",
    )
    ap.add_argument(
        "--actions", action="store_true", help="also reject and clamp-mss (one rule each)"
    )
    ap.add_argument("--build-dir", default=str(REPO / "build" / "bench-rules"))
    ap.add_argument("--out", help="also write the table here (Markdown)")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    bdir = Path(args.build_dir)
    bdir.mkdir(parents=True, exist_ok=True)
    cap_dir = bdir / "captures"
    gen = [sys.executable, str(REPO / "bench" / "gen.py"), "--out", str(cap_dir),
           "--connections", str(args.connections), "a"]  # fmt: skip
    subprocess.run(gen, check=True, capture_output=True)
    capture = cap_dir / "a.pcap"
    rows: list[tuple[str, float]] = []
    configs: list[tuple[str, int | None, bool, bool]] = [("plain stack", None, False, False)]
    configs += [(f"{n} rule{'' if n == 1 else 's'}", n, False, False) for n in args.sizes]
    if args.rewrite:
        configs += [(f"{n} rules + rewrite every packet", n, True, False) for n in (0, 10)]
    if args.reload:
        configs += [
            (f"{n} rule{'' if n == 1 else 's'}, --rules-reload", n, False, True) for n in args.sizes
        ]
    for label, n, rw, rl in configs:
        rules = None
        if n is not None:
            rules = bdir / f"r{n}{'-rw' if rw else ''}.yaml"
            rules.write_text(rules_text(n, rewrite=rw), encoding="utf-8")
        out = bdir / (
            (f"n{n}{'-rw' if rw else ''}" if n is not None else "plain") + ("-rl" if rl else "")
        )
        ipp, pkts = instructions_per_packet(build(out, rules, rl), capture)
        rows.append((label, ipp))
        print(f"{label:36} {ipp:9.1f} instructions/packet ({pkts} packets)", flush=True)
    for k, (label, rule) in enumerate(ACTIONS.items() if args.actions else []):
        rules = bdir / f"act{k}.yaml"
        rules.write_text(action_rules(rule), encoding="utf-8")
        binary = build(bdir / f"act{k}", rules)
        ipp, pkts = instructions_per_packet(binary, capture)
        rows.append((label, ipp))
        print(f"{label:36} {ipp:9.1f} instructions/packet ({pkts} packets)", flush=True)
        if label == "reject every SYN":
            per, built, n = reply_cost(binary, capture)
            print(f"{'  replies (--write), per reject':36} {per:9.1f} instructions, "
                  f"{built:.1f} of them building the RST ({n} rejects)")  # fmt: skip
            rows.append((f"+ the RST (--write), per rejected SYN: {per:,.0f} instructions, "
                         f"{built:,.0f} of them building it (rg_reject_build)", float("nan")))  # fmt: skip
    base = rows[0][1]
    table = ["| configuration | instructions/packet | vs plain |", "|---|---:|---:|"]
    table += [f"| {label} | {ipp:,.0f} | {ipp / base:.2f}x |" if ipp == ipp else f"| {label} | | |"
              for label, ipp in rows]  # fmt: skip
    text = "\n".join(table) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
