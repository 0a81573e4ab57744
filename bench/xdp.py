"""The XDP workload (issue 32, docs/xdp.md): `python bench/xdp.py [--frames N] [--rounds R]`,
as root with tcpreplay.

A capture where most bytes are in a few long flows (4 TCP connections to port 5001 carrying
1,400-byte segments, with many short ones: DNS over UDP and small TCP connections) is
generated into bench/captures/xdp-longflows.pcap, then replayed by `tcpreplay --topspeed` into
a veth pair in a network namespace, the -O2 tcp_ip stack capturing the other end with libpcap
(`--io live`, streams NF, no timeouts), four runs side by side in each round:

rule-user   the rule `tcp.port == 5001: drop` compiled into the stack, no XDP: every frame
            crosses into user space, where the rule drops the long flows' frames
rule-xdp    the same binary with --xdp: the rule runs at XDP (native mode, --mode generic
            for skb mode) and those frames are dropped in the kernel
bypass-user an NF (tests/support/xdp/bypass_nf.c) bypassing each TCP flow after 2,000 bytes,
            no XDP: the bypassed flows' frames still reach user space (they stop at the
            instance lookup)
bypass-xdp  the same with --xdp: the flows go into rg_bypass and their later frames are
            dropped at XDP, never reaching user space

Per run: the frames tcpreplay sent and its rate, the frames user space read, libpcap's drops,
the frames the rule decided in user space or in the kernel, the frames bypassed in the kernel,
and the rates derived: frames dropped per second of replay by the rule (user space: only the
frames libpcap delivered are decided), the share of the frames sent that never reached user
space. The result goes to bench/results/STAMP-xdp.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flood import addr, ipv4, tcp, write_pcap  # bench/: the frames' builders

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BUILD = BENCH / "build"
CAPTURE = BENCH / "captures" / "xdp-longflows.pcap"
RULES = 'rules:\n  - {name: iperf, match: "tcp.dport == 5001 || tcp.sport == 5001", action: drop}\n'
NS = f"rgxdpb{os.getpid()}"

Json = dict[str, Any]


def _udp(src: int, dst: int, sp: int, dp: int, data: bytes) -> bytes:
    return ipv4(src, dst, 17, struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data)


def _conn(c: int, s: int, cp: int, sp: int, segs: int, size: int) -> list[bytes]:
    """A TCP connection: handshake, segs data segments of size bytes (an ACK every second), FIN."""
    syn, ack, fin, psh = 0x02, 0x10, 0x01, 0x08
    out = [tcp(c, s, cp, sp, 0, 0, syn, b""), tcp(s, c, sp, cp, 0, 1, syn | ack, b""),
           tcp(c, s, cp, sp, 1, 1, ack, b"")]  # fmt: skip
    seq = 1
    for i in range(segs):
        out.append(tcp(c, s, cp, sp, seq, 1, ack | psh, bytes([i & 0xFF]) * size))
        seq += size
        if i % 2:
            out.append(tcp(s, c, sp, cp, 1, seq, ack, b""))
    out += [tcp(c, s, cp, sp, seq, 1, fin | ack, b""), tcp(s, c, sp, cp, 1, seq + 1, fin | ack, b""),
            tcp(c, s, cp, sp, seq + 1, 2, ack, b"")]  # fmt: skip
    return out


def generate(frames: int) -> Path:
    """bench/captures/xdp-longflows.pcap: about `frames` frames, 4 long connections interleaved
    with short ones (DNS pairs, 5-segment connections), most bytes in the long ones."""
    CAPTURE.parent.mkdir(parents=True, exist_ok=True)
    cl, sv = addr("10.1.0.2"), addr("10.2.0.1")
    segs = max(10, frames * 8 // 10 // 4 * 2 // 3)
    longs = [iter(_conn(cl, sv, 40000 + i, 5001, segs, 1400)) for i in range(4)]
    shorts: list[bytes] = []
    k = 0
    while len(shorts) < frames // 5:
        h = addr("10.3.0.0") + k % 65536
        if k % 3:
            q = b"\x12\x34\x01\x00\0\x01\0\0\0\0\0\0\x07example\x03com\0\0\x01\0\x01"
            shorts += [_udp(h, sv, 20000 + k % 40000, 53, q), _udp(sv, h, 53, 20000 + k % 40000, q)]
        else:
            shorts += _conn(h, sv, 30000 + k % 30000, 80, 3, 200)
        k += 1
    out, si = [], 0
    live = list(longs)
    while live:  # round robin: the long flows' frames, a short frame between them
        for it in list(live):
            f = next(it, None)
            if f is None:
                live.remove(it)
                continue
            out.append(f)
            if si < len(shorts) and len(out) % 5 == 0:
                out.append(shorts[si])
                si += 1
    out += shorts[si:]
    write_pcap(CAPTURE, out)
    return CAPTURE


def _ns(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", NS, *cmd], capture_output=True, text=True)


def build() -> dict[str, Path]:
    """The -O2 tcp_ip stack linked with --xdp, with the rule and without, their XDP programs,
    and the bypass NF."""
    sys.path.insert(0, str(ROOT))
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import build_compilation
    from rubikgen.toolchain.xdp import build_xdp

    stack = ROOT / "specs" / "stacks" / "tcp_ip.yaml"
    rules = BUILD / "xdp-rules.yaml"
    BUILD.mkdir(parents=True, exist_ok=True)
    rules.write_text(RULES)
    out: dict[str, Path] = {}
    for name, r in (("rule", rules), ("bypass", None)):
        d = BUILD / f"tcp_ip-xdp-{name}"
        comp = Compilation(str(stack), opt_level=2, rules=str(r) if r else None)
        res = build_compilation(comp, d, quiet=True, xdp=True)
        out[name] = res.binary
        out[f"{name}_obj"] = build_xdp(comp, d)
    so = BUILD / "bypass_nf.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-std=c11", "-O2", f"-I{ROOT / 'runtime-c/include'}",
                    str(ROOT / "tests/support/xdp/bypass_nf.c"), "-o", str(so)], check=True)  # fmt: skip
    chain = BUILD / "xdp-bypass-chain.yaml"
    chain.write_text(f"chain:\n  - nf: {so}\n    params: {{after: '2000'}}\n")
    out["chain"] = chain
    return out


def _xdp_attached() -> bool:
    return "prog/xdp" in _ns("ip", "-d", "link", "show", "vb").stdout


MODE = "native"


def one(binary: Path, out: Path, extra: list[str], xdp: Path | None, flows: str) -> Json:
    cmd = [str(binary), "--io", "live", "--iface", "vb", "--buffer", "64", "--nf", "streams"]
    cmd += ["--out", str(out), "--no-timeouts", "--summary", "json", *extra]
    if xdp is not None:
        cmd += ["--xdp", str(xdp), "--xdp-mode", MODE, "--xdp-flows", flows]
    p = subprocess.Popen(["ip", "netns", "exec", NS, *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    for _ in range(400):  # until the capture is open (and the program attached)
        if _ns("cat", "/proc/net/packet").stdout.count("\n") > 1 and (
            xdp is None or _xdp_attached()
        ):
            break
        time.sleep(0.05)
    time.sleep(0.3)  # libpcap: the ring is set up after the socket appears
    rep = _ns("tcpreplay", "-i", "va", "--topspeed", str(CAPTURE))
    time.sleep(2)  # what the ring still holds is read
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=300)
    if p.returncode:
        raise RuntimeError(se[-2000:])
    s = json.loads(so.strip().splitlines()[-1])
    sent = re.search(r"Actual: (\d+) packets .*? in ([\d.]+) seconds", rep.stdout)
    rated = re.search(r"Rated: .*?, ([\d.]+) pps", rep.stdout)
    assert sent and rated, rep.stdout + rep.stderr
    n, secs = int(sent[1]), float(sent[2])
    x = s.get("xdp", {})
    rule_user = sum(r["hits"] for r in s.get("rules", []) if r["action"] == "drop")
    seen = s["packets"]
    r: Json = {
        "command": " ".join(cmd),
        "sent": n,
        "replay_seconds": secs,
        "replay_pps": float(rated[1]),
        "user_space_frames": seen,
        "pcap_dropped": s.get("dropped"),
        "rule_drop_user": rule_user,
        "rule_drop_kernel": x.get("rule_drop", 0),
        "bypassed_kernel": x.get("bypass", 0),
        "bypass_flows": x.get("bypass_flows", 0),
        "bypassed_user": sum(v["bypassed"] for v in s["layers"].values()),
        "xdp": x,
    }
    r["rule_drop_pps"] = round((r["rule_drop_user"] + r["rule_drop_kernel"]) / secs)
    kernel = x.get("rule_drop", 0) + x.get("flow_drop", 0) + x.get("bypass", 0)
    r["never_in_user_space"] = round(kernel / n, 4) if n else 0  # decided at XDP
    return r


def run(frames: int, rounds: int) -> Json:
    if os.geteuid() != 0 or not shutil.which("tcpreplay"):
        return {"error": "needs root and tcpreplay"}
    generate(frames)
    b = build()
    meta = json.loads(b["rule_obj"].with_suffix(".json").read_text())
    flows = ",".join(sorted(meta["flow_layers"]))
    subprocess.run(["ip", "netns", "add", NS], check=True)
    tmp = BUILD / "xdp-out"
    try:
        subprocess.run(["ip", "-n", NS, "link", "add", "va", "type", "veth", "peer", "name", "vb"],
                       check=True)  # fmt: skip
        for dev in ("va", "vb"):
            _ns("sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            subprocess.run(["ip", "-n", NS, "link", "set", dev, "up"], check=True)
        res: dict[str, list[Json]] = {}
        for _ in range(rounds):  # the four side by side, round after round
            res.setdefault("rule-user", []).append(one(b["rule"], tmp / "ru", [], None, flows))
            res.setdefault("rule-xdp", []).append(
                one(b["rule"], tmp / "rx", [], b["rule_obj"], flows)
            )
            ch = ["--chain", str(b["chain"])]
            res.setdefault("bypass-user", []).append(one(b["bypass"], tmp / "bu", ch, None, flows))
            res.setdefault("bypass-xdp", []).append(
                one(b["bypass"], tmp / "bx", ch, b["bypass_obj"], flows)
            )
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
    return {"capture": str(CAPTURE.relative_to(ROOT)), "frames": frames, "load": os.getloadavg(),
            "runs": res}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mode", choices=("native", "generic"), default="native")
    args = ap.parse_args(argv)
    global MODE
    MODE = args.mode
    doc = run(args.frames, args.rounds)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = BENCH / "results" / f"{stamp}-xdp.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, rs in doc.get("runs", {}).items():
        for r in rs:
            print(
                f"{name:12} sent {r['sent']:>7} at {r['replay_pps']:>9.0f} pps; user space "
                f"{r['user_space_frames']:>7} (pcap dropped {r['pcap_dropped']}); rule drops "
                f"{r['rule_drop_user']}+{r['rule_drop_kernel']} ({r['rule_drop_pps']}/s); "
                f"bypassed in kernel {r['bypassed_kernel']}; never in user space "
                f"{r['never_in_user_space']:.1%}"
            )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
