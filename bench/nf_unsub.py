#!/usr/bin/env python3
"""Dynamic subscription benchmark: an NF that stops after the first KB of each flow direction.

    python bench/nf_unsub.py [--capture bench/captures/b.pcap] [--after 1024] [--no-callgrind]

Builds the tcp_ip stack (-O2) and bench/nf/unsub_nf.c as a shared object, then runs the stack's
--bench mode (the capture in memory, 2 passes, seed 1) three ways:

- `stack`: the counters alone (--nf count), no NF;
- `nf-all`: unsub_nf reading every delivered byte (--nf ./unsub_nf.so);
- `nf-unsub`: the same NF with unsub_after=N in a chain file: once a direction delivered N
  bytes it unsubscribes from the flow's data events and asks for no more bytes
  (rg_nf_api.h), so the stack stops reassembling that direction.

For each: callgrind's instructions per packet of the second pass's processing loop (the same
method as bench/run.py --callgrind: --dump-before=clock_gettime*, dump part 7), and the
binary's own ns/packet (best pass, informative only). Prints a Markdown table (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def callgrind_ir(cmd: list[str]) -> tuple[float, dict]:
    """(instructions per packet of pass 2's loop, the --bench JSON)."""
    with tempfile.TemporaryDirectory(prefix="rg-nfcg-") as tmp:
        out = Path(tmp) / "cg.out"
        full = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--dump-before=clock_gettime*", *cmd]  # fmt: skip
        p = subprocess.run(full, capture_output=True, text=True, check=True, timeout=6 * 3600)
        parts: dict[int, int] = {}
        for f in Path(tmp).glob("cg.out.*"):
            suffix = f.name.rsplit(".", 1)[1]
            text = f.read_text(errors="replace")
            mt = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
            if suffix.isdigit() and mt and "clock_gettime" in text:
                parts[int(suffix)] = int(mt.group(1))
        if sorted(parts)[:8] != list(range(1, 9)):
            raise RuntimeError(f"unexpected callgrind dump parts {sorted(parts)}")
        js = _last_json(p.stdout)
        return parts[7] / js["pkts"], js


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", default=str(ROOT / "bench" / "captures" / "b.pcap"))
    ap.add_argument("--after", type=int, default=1024, help="unsub_after (bytes)")
    ap.add_argument("--no-callgrind", action="store_true", help="ns/packet only")
    args = ap.parse_args(argv)
    capture = Path(args.capture)
    if not capture.is_file():
        sys.stderr.write(f"{capture}: missing (python bench/gen.py b makes it)\n")
        return 1
    sys.path.insert(0, str(ROOT))
    from rubikgen.toolchain.build import build

    work = ROOT / "build" / "bench-nf"
    binary = build(ROOT / "specs" / "stacks" / "tcp_ip.yaml", work / "tcp_ip", quiet=True).binary
    so = work / "unsub_nf.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-std=c11", "-O2", f"-I{ROOT / 'runtime-c' / 'include'}",
                    str(ROOT / "bench" / "nf" / "unsub_nf.c"), "-o", str(so)], check=True)  # fmt: skip
    chain = work / "unsub.yaml"
    chain.write_text(f"chain:\n  - nf: {so}\n    params: {{unsub_after: {args.after}}}\n")
    base = [str(binary), str(capture), "--bench", "--passes", "2", "--seed", "1"]
    configs = {
        "stack": [*base, "--nf", "count"],
        "nf-all": [*base, "--nf", str(so)],
        "nf-unsub": [*base, "--chain", str(chain)],
    }
    use_cg = not args.no_callgrind and shutil.which("valgrind")
    print(f"capture {capture.name}, unsub_after={args.after}")
    print("| config | instructions/packet | ns/packet (cpu) | payload bytes delivered |")
    print("|---|---:|---:|---:|")
    for name, cmd in configs.items():
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        js = _last_json(p.stdout)
        ir = f"{callgrind_ir(cmd)[0]:,.0f}" if use_cg else "-"
        print(f"| {name} | {ir} | {js['cpu_ns_per_pkt']:.1f} | {js['payload_bytes']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
