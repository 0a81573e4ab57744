"""Per-feature cost in instructions per packet (callgrind): the packet trace compiled in but
off, and the control socket's flow-table observer (`--control`), against the plain build.

    python bench/feature_cost.py [CAPTURE ...]   # default: ../shared/traces/mixed-android-mobile.pcap

Two measures, each on the -O2 build of specs/stacks/tcp_ip.yaml without and with -DRG_TRACE
(`rubikgen build --trace`):

- loop: `BINARY CAPTURE --bench --passes 2 --nf count` under `callgrind
  --dump-before=clock_gettime*`; the Ir of the second pass's processing loop (dump part 7, as
  bench/run.py's --callgrind) over the packets;
- run: a whole run (`BINARY CAPTURE --nf flowstats --out TMP`, and the same with `--control
  SOCK`): its total Ir minus that of the same command on the capture's header alone (start-up
  and exit), over the packets.

Prints one Markdown table (BENCHMARKS.md, "Per-feature cost")."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rubikgen.toolchain.build import build  # noqa: E402

DEFAULT = REPO.parent / "shared" / "traces" / "mixed-android-mobile.pcap"


def _ir(cmd: list[str], tmp: Path, tag: str, part: int | None = None) -> int:
    out = tmp / f"cg-{tag}.out"
    extra = ["--dump-before=clock_gettime*"] if part is not None else []
    full = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *extra, *cmd]
    p = subprocess.run(full, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"callgrind failed: {p.stderr[-400:]}")
    f = Path(f"{out}.{part}") if part is not None else out
    m = re.search(r"^(?:summary|totals):\s*(\d+)", f.read_text(errors="replace"), re.M)
    assert m, f
    return int(m.group(1))


def _packets(pcap: Path) -> int:
    data = pcap.read_bytes()
    le = data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    n, off = 0, 24
    while off + 16 <= len(data):
        caplen = int.from_bytes(data[off + 8 : off + 12], "little" if le else "big")
        off += 16 + caplen
        n += 1
    return n


def main() -> int:
    caps = [Path(a) for a in sys.argv[1:]] or [DEFAULT]
    stack = REPO / "specs" / "stacks" / "tcp_ip.yaml"
    plain = build(stack, REPO / "build" / "tcp_ip", quiet=True).binary
    traced = build(stack, REPO / "build" / "tcp_ip-trace", cflags=["-DRG_TRACE"], quiet=True)
    print(
        "| capture | packets | measure | plain build | trace compiled in, off | plain + `--control` |"
    )
    print("|---|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="rg-feature-cost-") as t:
        tmp = Path(t)
        for cap in caps:
            n = _packets(cap)
            empty = tmp / "empty.pcap"
            empty.write_bytes(cap.read_bytes()[:24])
            loop = [
                _ir([str(b), str(cap), "--bench", "--passes", "2", "--nf", "count"], tmp, k, 7) / n
                for k, b in (("lp", plain), ("lt", traced.binary))
            ]

            def run(b: Path, pcap: Path, tag: str, control: bool) -> int:
                cmd = [str(b), str(pcap), "--nf", "flowstats", "--out", str(tmp / tag)]
                if control:
                    cmd += ["--control", str(tmp / f"{tag}.sock")]
                return _ir(cmd, tmp, tag, None)

            whole = []
            for k, b, ctl in (("p", plain, False), ("t", traced.binary, False), ("c", plain, True)):
                whole.append((run(b, cap, k, ctl) - run(b, empty, k + "0", ctl)) / n)
            print(
                f"| {cap.name} | {n} | loop (`--bench`, pass 2) | {loop[0]:.1f} | {loop[1]:.1f} | |"
            )
            print(
                f"| {cap.name} | {n} | whole run (`--nf flowstats`) | {whole[0]:.1f} | "
                f"{whole[1]:.1f} | {whole[2]:.1f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
