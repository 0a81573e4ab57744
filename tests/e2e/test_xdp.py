"""The XDP program of `rubikgen build --xdp` in the real kernel: loaded through the verifier,
run with BPF_PROG_TEST_RUN on every frame of real captures, its verdicts compared frame by
frame with the user-space stack's on the same rules (`rubikgen run --rules --write`: the
frames that survive), and the drop map's per-entry counters with tshark's count of the
flow's frames and bytes. Skipped only when the kernel refuses BPF (or no clang/libbpf)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.pcap_frames import frames

TRACES = REPO_ROOT.parent / "shared" / "traces"
STACKS = REPO_ROOT / "specs" / "stacks"
XDP_DROP, XDP_PASS = 1, 2
RULES = """\
rules:
  - {name: no-https, match: "tcp.dport == 443 || tcp.sport == 443", action: drop}
  - {name: net10-udp, match: "ip.saddr == 10.0.0.0/8 && udp", action: drop}
  - {name: icmp, match: "icmp || icmp6", action: drop}
  - {name: v6-dns, match: "udp6.dport == 53 || ipv6.saddr == fe80::/10", action: drop}
  - {name: web-in, match: "tcp.sport == 80 && ip.daddr == 10.0.0.0/8", action: count}
  - {name: web, match: "tcp.dport == 80", action: drop}
"""
# drop by port, by prefix and by protocol in the inner packets of tunnels, and outside them
RULES_TUNNELS = """\
rules:
  - {name: inner-https, match: "inner_tcp.dport == 443 || inner_tcp.sport == 443 || inner_tcp6.dport == 443 || inner_tcp6.sport == 443", action: drop}
  - {name: inner-ssh, match: "inner_tcp.dport == 22 && inner_ip.saddr == 10.0.0.0/8", action: drop}
  - {name: inner-udp, match: "inner_udp", action: drop}
  - {name: icmp, match: "icmp || inner_icmp || inner_icmp6", action: drop}
  - {name: outer-web, match: "tcp.dport == 80 && !inner_eth", action: drop}
  - {name: inner-v6, match: "inner_ipv6.saddr == 2001::/16", action: count}
"""
STACK_RULES = {"tcp_ip": RULES, "tcp_ip_tunnels": RULES_TUNNELS}
# v4, v6, VLAN, ARP, a v6-in-v4 tunnel (tcp_ip parses the outer header only), fragments;
# VXLAN, IP in IP both ways, MPLS in UDP, QinQ + PPPoE, GRE + PPP with fragments
CAPTURES = [
    ("tcp_ip", "http-post-upload.pcap"),
    ("tcp_ip", "mixed-android-mobile.pcap"),
    ("tcp_ip", "ipv6-http-curl-localhost.pcap"),
    ("tcp_ip", "arp-icmp-vlan.pcap"),
    ("tcp_ip", "6in4-tcp-tls.pcap"),
    ("tcp_ip", "ipv4-frag-socks5-http.pcap"),
    ("tcp_ip_tunnels", "vxlan-ssh-aws-mirror.pcap"),
    ("tcp_ip_tunnels", "vxlan-http.pcap"),
    ("tcp_ip_tunnels", "6in4-tcp-tls.pcap"),
    ("tcp_ip_tunnels", "4in6-tcp-tls.pcap"),
    ("tcp_ip_tunnels", "mpls-over-udp.pcap"),
    ("tcp_ip_tunnels", "qinq-pppoe-tls.pcap"),
    ("tcp_ip_tunnels", "gre-ppp-ipfrag-crafted.pcap"),
]

TOUCHED = {
    "mixed-android-mobile.pcap",
    "arp-icmp-vlan.pcap",
    "vxlan-ssh-aws-mirror.pcap",
    "6in4-tcp-tls.pcap",
    "mpls-over-udp.pcap",
}


def _need() -> None:
    if os.geteuid() != 0:
        pytest.skip("BPF_PROG_TEST_RUN needs root (CAP_BPF)")
    for tool in ("clang-14", "cc", "tshark", "editcap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (ci/setup.sh --test)")
    if not Path("/usr/include/bpf/libbpf.h").exists():
        pytest.skip("libbpf-dev is not installed (ci/setup.sh --test)")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need()
    out = tmp_path_factory.mktemp("xdp_run") / "xdp_run"
    src = REPO_ROOT / "tests" / "support" / "xdp" / "xdp_run.c"
    subprocess.run(["cc", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(src),
                    "-lbpf"], check=True)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory, runner: Path) -> dict[str, dict[str, Path]]:
    """Each stock stack's XDP object with its rules (built on first use)."""
    cache: dict[str, dict[str, Path]] = {}

    class Lazy(dict):  # type: ignore[type-arg]
        def __missing__(self, stack: str) -> dict[str, Path]:
            d = tmp_path_factory.mktemp(stack)
            rules = d / "rules.yaml"
            rules.write_text(STACK_RULES[stack])
            spec = STACKS / f"{stack}.yaml"
            cmd = [sys.executable, "-m", "rubikgen", "build", str(spec), "--xdp", "--rules",
                   str(rules), "-o", str(d / "b")]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
            assert r.returncode == 0, r.stderr
            # the user-space stack with the same rules, built once (the build cache)
            cmd = [sys.executable, "-m", "rubikgen", "build", str(spec), "--rules", str(rules),
                   "-o", str(d / "user")]  # fmt: skip
            u = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
            assert u.returncode == 0, u.stderr
            got = {"obj": Path(r.stdout.strip()), "run": runner, "rules": rules, "dir": d,
                   "spec": spec, "user": Path(u.stdout.strip().splitlines()[-1])}  # fmt: skip
            self[stack] = got
            return got

    return Lazy(cache)


def _classic(pcap: Path, d: Path) -> Path:
    out = d / (pcap.stem + ".classic.pcap")
    if not out.exists():
        subprocess.run(["editcap", "-F", "pcap", str(pcap), str(out)], check=True)
    return out


def xdp_run(built: dict[str, Path], pcap: Path, *keys: str) -> tuple[list[int], list[str]]:
    r = subprocess.run(
        [str(built["run"]), str(built["obj"]), str(_classic(pcap, built["dir"])), *keys],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode == 3:
        pytest.skip(f"the kernel refuses BPF here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    verdicts = [int(x.split()[2]) for x in lines if x.startswith("frame ")]
    return verdicts, [x for x in lines if not x.startswith("frame ")]


def stats(rest: list[str]) -> list[int]:
    return [int(x.split()[2]) for x in rest if x.startswith("stat ")]


def user_dropped(built: dict[str, Path], pcap: Path) -> set[int]:
    """Frames (1-based) the user-space stack drops with the same rules (compiled in, what
    `rubikgen run --rules R --write` runs): the frames it does not write."""
    out = built["dir"] / (pcap.stem + ".user.pcap")
    cmd = [str(built["user"]), str(pcap), "--write", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    src = [b for _, b in frames(pcap)]
    kept = [b for _, b in frames(out)]
    dropped, j = set(), 0
    for i, b in enumerate(src):  # the written frames are a subsequence of the input
        if j < len(kept) and kept[j] == b:
            j += 1
        else:
            dropped.add(i + 1)
    assert j == len(kept), "the written frames are not the input's, in order"
    return dropped


@pytest.mark.parametrize(("stack", "name"), CAPTURES)
def test_verdicts_equal_user_space(
    builds: dict[str, dict[str, Path]], stack: str, name: str
) -> None:
    built = builds[stack]
    pcap = TRACES / name
    verdicts, rest = xdp_run(built, pcap)
    assert len(verdicts) == len(frames(pcap))
    xdp = {i + 1 for i, v in enumerate(verdicts) if v == XDP_DROP}
    assert all(v in (XDP_DROP, XDP_PASS) for v in verdicts)
    user = user_dropped(built, pcap)
    deferred = stats(rest)[5]
    # a fragment is deferred (passed up): user space decides it once the datagram is whole
    assert xdp <= user
    assert len(user - xdp) <= deferred
    if deferred == 0:
        assert xdp == user
    if (
        stack,
        name,
    ) in TOUCHED:  # captures the rules drop frames of (so the equality is not vacuous)
        assert xdp, f"{name}: the rules drop nothing in it"


def _flow(pcap: Path) -> tuple[str, str, int, int, int, int, int]:
    """The first TCP conversation of the capture: addresses, ports, its frames and bytes."""
    fields = ["tcp.stream", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "frame.len"]
    cmd = ["tshark", "-r", str(pcap), "-Y", "ip && tcp && !icmp", "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    rows = [x.split("\t") for x in subprocess.run(cmd, capture_output=True, text=True,
                                                  check=True).stdout.splitlines()]  # fmt: skip
    s0 = rows[0]
    mine = [r for r in rows if r[0] == s0[0]]
    return (s0[1], s0[2], int(s0[3]), int(s0[4]), len(mine), sum(int(r[5]) for r in mine),
            int(s0[0]))  # fmt: skip


def _key(meta: dict[str, object], sa: str, da: str, sp: int, dp: int) -> str:
    tcp = meta["flow_layers"]["tcp"]  # type: ignore[index]
    names = [k["name"] for k in tcp["key"]]
    assert names == ["ip.header.saddr", "header.sport", "ip.header.daddr", "header.dport"]
    a = bytes(map(int, sa.split("."))) + sp.to_bytes(2, "big")
    p = bytes(map(int, da.split("."))) + dp.to_bytes(2, "big")
    k = min(a + p, p + a)  # both directions: the smaller of the two (docs/xdp.md)
    raw = tcp["index"].to_bytes(4, "little") + len(k).to_bytes(4, "little") + k.ljust(40, b"\0")
    return raw.hex()


@pytest.mark.parametrize("which", ["drop", "bypass"])
def test_flow_maps(builds: dict[str, dict[str, Path]], which: str) -> None:
    built = builds["tcp_ip"]
    pcap = TRACES / "http-post-upload.pcap"
    meta = json.loads((built["obj"].parent / "tcp_ip_xdp.json").read_text())
    sa, da, sp, dp, n, nbytes, stream = _flow(pcap)
    key = _key(meta, sa, da, sp, dp)
    verdicts, rest = xdp_run(built, pcap, f"--{which}", key)
    line = next(x for x in rest if x.startswith(which + " "))
    assert line.split()[2:] == [str(n), str(nbytes)]  # tshark's frames and bytes of the flow
    st = stats(rest)
    assert st[3 if which == "drop" else 4] == n
    # both directions: the flow's frames (tshark) are exactly the frames the map decided
    cmd = ["tshark", "-r", str(pcap), "-Y", f"tcp.stream == {stream} && !icmp", "-T", "fields",
           "-e", "frame.number"]  # fmt: skip
    nums = {int(x) for x in subprocess.run(cmd, capture_output=True, text=True).stdout.split()}
    assert len(nums) == n
    if which == "drop":
        assert {i + 1 for i, v in enumerate(verdicts) if v == XDP_DROP} >= nums


@pytest.mark.parametrize("stack", ["tcp_ip", "tcp_ip_tunnels", "gtp", "sctp", "quic"])
@pytest.mark.parametrize("mode", ["generic", "native"])
def test_verifier_accepts_on_veth(
    builds: dict[str, dict[str, Path]], runner: Path, stack: str, mode: str
) -> None:
    """The kernel's verifier accepts each stock stack's program, attached to a veth in a
    network namespace in generic (skb) and native mode (libbpf: `ip link ... obj` loads one
    program of the file and leaves rg_progs empty)."""
    if stack not in STACK_RULES:
        spec = STACKS / f"{stack}.yaml"
        d = builds["tcp_ip"]["dir"].parent / f"plain-{stack}"
        cmd = [sys.executable, "-m", "rubikgen", "build", str(spec), "--xdp", "-o", str(d)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
        assert r.returncode == 0, r.stderr
        obj = Path(r.stdout.strip())
    else:
        obj = builds[stack]["obj"]
    ns = f"rgxdp{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        pytest.skip("no network namespaces here")
    try:
        ex = ["ip", "netns", "exec", ns]
        subprocess.run([*ex, "ip", "link", "add", "xa", "type", "veth", "peer", "name", "xb"],
                       check=True)  # fmt: skip
        subprocess.run([*ex, "ip", "link", "set", "xa", "up"], check=True)
        r = subprocess.run([*ex, str(runner), str(obj), "--attach", "xa", mode],
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        show = subprocess.run([*ex, "ip", "-d", "link", "show", "xa"], capture_output=True,
                              text=True).stdout  # fmt: skip
        assert ("xdpgeneric" if mode == "generic" else "xdp ") in show, show
        assert "prog/xdp id" in show, show
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
