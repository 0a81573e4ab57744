"""The `reject` and `clamp-mss` rule actions offline (docs/rules.md): rules compiled into the
TCP/IP stack, run with `--write` on real captures of five link types and on a crafted one.
tshark dissects the input and the output: which frames the rules reject and how many replies
each must get is computed here from tshark's fields of the input; in the output every passed
frame is the input's, byte for byte and in order, and in each rejected frame's place are its
replies: RSTs with good checksums whose sequence numbers are acceptable (RFC 5961) to whom
they go, computed from the offending segment's fields; ICMP and ICMPv6 unreachables with good
checksums quoting exactly the first bytes of the dropped datagram (RFC 792, RFC 4443).
Clamped SYNs: tshark's `tcp.options.mss_val` and checksum status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES, tshark_available
from support.reject import (
    Frame,
    Rule,
    check_icmp,
    check_rst,
    crafted_frames,
    dport,
    expected_replies,
    frames,
    l4,
    num,
    protos,
    rejected,
    write_pcap,
)
from support.rules import pcap_frames

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")

RULES = """\
spec: {stack}
rules:
  - name: web
    match: "tcp.dport == 80 || tcp.dport == 8080 || tcp6.dport == 80 || tcp.dport == 81 || tcp6.dport == 81"
    action: {{reject: {{both: true}}}}
  - {{name: smtp, match: "tcp.dport == 25 || tcp.sport == 443", action: reject}}
  - {{name: dns, match: "udp.dport == 53 || udp6.dport == 53", action: reject}}
  - name: admin
    match: "udp.dport == 67 || udp.dport == 9999 || udp6.dport == 9999 || udp6.dport == 547"
    action: {{reject: {{icmp: admin}}}}
  - {{name: ping, match: "icmp.type == 8 || icmp.type == 3", action: reject}}
"""

# the same rules over tshark's fields
RULESET = [
    Rule("web", lambda f: l4(f) in ("tcp", "tcp6") and dport(f) in (80, 8080, 81)
         and not (l4(f) == "tcp6" and dport(f) == 8080), both=True),
    Rule("smtp", lambda f: l4(f) == "tcp" and (dport(f) == 25 or num(f, "tcp.srcport") == 443)),
    Rule("dns", lambda f: l4(f) in ("udp", "udp6") and dport(f) == 53),
    Rule("admin", lambda f: (l4(f) == "udp" and dport(f) in (67, 9999))
         or (l4(f) == "udp6" and dport(f) in (9999, 547)), admin=True),
    Rule("ping", lambda f: "icmp" in protos(f) and "ipv6" not in protos(f)
         and num(f, "icmp.type") in (8, 3)),
]  # fmt: skip

CAPTURES = [
    "mixed-android-mobile.pcap",  # Ethernet: HTTP, HTTPS, DNS, DHCP, ICMPv6 to multicast
    "http-post-upload.pcap",  # Ethernet: port 8080, retransmissions
    "raw-ipv4-ipv6-http.pcap",  # raw IP: HTTP over IPv4 and IPv6, DNS
    "sll-dns2tcp-tls.pcap",  # Linux cooked: TLS
    "null-smtp-rset.pcap",  # BSD loopback: SMTP
]


def _build(tmp: Path, rules: str, name: str = "b") -> Path:
    r = tmp / f"{name}.rules.yaml"
    r.write_text(rules.format(stack=STACK), encoding="utf-8")
    out = tmp / name
    proc = subprocess.run(
        [sys.executable, "-m", "rubikgen", "build", str(STACK), "--rules", str(r), "-o", str(out)],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out / "tcp_ip"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("reject"), RULES)


def _run(binary: Path, pcap: Path, out: Path, *extra: str) -> dict[str, object]:
    proc = subprocess.run(
        [str(binary), str(pcap), "--nf", "none", "--summary", "json", "--write", str(out), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def _judge(
    pcap: Path, out: Path, rule_of: Callable[[int, Frame], Rule | None] | None = None
) -> tuple[int, int]:
    """Every output frame accounted for: (rejected frames, replies). rule_of(i, frame): the
    rule that rejects input frame i (default: RULESET's)."""
    fin, fout = frames(pcap), frames(out)
    bin_, bout = [b for _, b in pcap_frames(pcap)], [b for _, b in pcap_frames(out)]
    assert len(fin) == len(bin_) and len(fout) == len(bout)
    j = nrej = nrep = 0
    for i, f in enumerate(fin):
        rule = rule_of(i, f) if rule_of else rejected(f, RULESET)
        if rule is None:
            assert j < len(bout) and bout[j] == bin_[i], f"input frame {i + 1}: not passed as is"
            j += 1
            continue
        nrej += 1
        n = expected_replies(f, rule)
        for k in range(n):
            assert j < len(bout), f"input frame {i + 1}: reply {k + 1} of {n} missing"
            rep = fout[j]
            assert bout[j] != bin_[i]
            if "tcp" in protos(f):
                check_rst(f, rep, to_receiver=k == 1)
            else:
                check_icmp(f, bin_[i], rep, bout[j], rule.admin)
            j += 1
            nrep += 1
    assert j == len(bout), f"{len(bout) - j} output frames more than expected"
    return nrej, nrep


@pytest.mark.parametrize("name", CAPTURES)
def test_reject_replies_on_real_captures(binary: Path, tmp_path: Path, name: str) -> None:
    pcap = TRACES / name
    if not pcap.exists():
        pytest.skip(f"{pcap} not found (../shared/traces beside the checkout)")
    out = tmp_path / "out.pcap"
    summary = _run(binary, pcap, out, "--reject-rate", "0")
    nrej, nrep = _judge(pcap, out)
    assert nrej > 0 and nrep > 0
    rej = summary["reject"]
    assert isinstance(rej, dict)
    assert rej["rejected"] == nrej and rej["replies"] == nrep and rej["rate_limited"] == 0
    assert summary["written"] == len(pcap_frames(pcap)) - nrej


def test_reject_replies_with_workers(binary: Path, tmp_path: Path) -> None:
    """--workers 2 --write: the reading thread writes each rejected frame's replies in its
    place, as one context does: the same frames tshark judged above."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    if not pcap.exists():
        pytest.skip(f"{pcap} not found (../shared/traces beside the checkout)")
    out = tmp_path / "out.pcap"
    summary = _run(binary, pcap, out, "--reject-rate", "0", "--workers", "2")
    nrej, nrep = _judge(pcap, out)
    rej = summary["reject"]
    assert isinstance(rej, dict) and (rej["rejected"], rej["replies"]) == (nrej, nrep)


def test_reject_replies_on_a_crafted_capture(binary: Path, tmp_path: Path) -> None:
    pcap = tmp_path / "crafted.pcap"
    write_pcap(pcap, crafted_frames())
    out = tmp_path / "out.pcap"
    summary = _run(binary, pcap, out, "--reject-rate", "0")
    nrej, nrep = _judge(pcap, out)
    # every frame rejected; no reply to the RST, the broadcast and the ICMP error; two RSTs
    # for each of the two synchronised segments (both: true)
    assert (nrej, nrep) == (10, 9)
    fout = frames(out)
    assert "vlan" in protos(fout[3]), fout[3]  # the tagged SYN's RST keeps the tag
    assert summary["reject"] == {"rejected": 10, "answered": 7, "replies": 9,
                                 "rate_limited": 0, "unanswerable": 3, "rate": 0}  # fmt: skip


def test_reject_rate_limit(binary: Path, tmp_path: Path) -> None:
    # 40 answerable rejects 1 ms apart in packet time, 10 a second allowed: the first 10
    # answered (a full bucket: one second's worth), the others counted as rate-limited
    pcap = tmp_path / "burst.pcap"
    one = crafted_frames()[1]
    write_pcap(pcap, [one] * 40, step_us=1000)
    out = tmp_path / "out.pcap"
    summary = _run(binary, pcap, out, "--reject-rate", "10")
    rej = summary["reject"]
    assert isinstance(rej, dict)
    assert (rej["rejected"], rej["answered"], rej["replies"], rej["rate_limited"]) == (
        40, 10, 20, 30)  # fmt: skip
    fout = frames(out)
    assert len(fout) == 20 and all(num(f, "tcp.flags") & 0x04 for f in fout)
    # `rubikgen run --reject-rate` passes the limit on to the binary (the same build reused)
    proc = subprocess.run(
        [sys.executable, "-m", "rubikgen", "run", str(STACK), str(pcap), "--rules",
         str(binary.parent.parent / "b.rules.yaml"), "--build-dir", str(binary.parent), "--nf",
         "none", "--summary", "json", "--quiet", "--write", str(tmp_path / "run.pcap"),
         "--reject-rate", "10"],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["reject"] == rej


CLAMP = """\
spec: {stack}
rules:
  - {{name: clamp, match: "tcp.syn || tcp6.syn", action: {{clamp-mss: 1200}}}}
"""


@pytest.mark.parametrize("name", ["http-post-upload.pcap", "raw-ipv4-ipv6-http.pcap",
                                  "tcp-options-sack-ts-ws.pcap"])  # fmt: skip
def test_clamp_mss_offline(tmp_path: Path, name: str) -> None:
    pcap = TRACES / name
    if not pcap.exists():
        pytest.skip(f"{pcap} not found (../shared/traces beside the checkout)")
    binary = _build(tmp_path, CLAMP)
    out = tmp_path / "out.pcap"
    _run(binary, pcap, out)
    fields = ["tcp.flags.syn", "tcp.options.mss_val", "tcp.checksum.status"]
    from support.oracle.tshark import _tshark

    def rows(p: Path) -> list[list[str]]:
        args = ["-r", str(p), "-o", "tcp.check_checksum:TRUE", "-T", "fields"]
        args += [x for k in fields for x in ("-e", k)]
        return [ln.split("\t") for ln in _tshark(args).splitlines()]

    before, after = rows(pcap), rows(out)
    assert len(before) == len(after)
    bin_, bout = [b for _, b in pcap_frames(pcap)], [b for _, b in pcap_frames(out)]
    clamped = 0
    for k, (b, a) in enumerate(zip(before, after, strict=True)):
        syn = b[0] in ("1", "True")
        if syn and b[1] and int(b[1]) > 1200:
            assert int(a[1]) == 1200, (k, a)
            clamped += 1
            if b[2] == "1":
                assert a[2] == "1", (k, a)  # still good
        else:
            assert bout[k] == bin_[k], f"frame {k + 1} changed"
    assert clamped > 0


# -- diagnostics ---------------------------------------------------------------------------------

BAD = """\
spec: {stack}
rules:
  - {{name: a, match: "tcp.dport == 1", action: {{reject: {{icmp: bogus}}}}}}
  - {{name: b, match: "tcp.dport == 2", action: {{clamp-mss: 70000}}}}
  - {{name: c, match: "tcp.dport == 3", action: {{rejct: {{both: true}}}}}}
  - {{name: d, match: "tcp.dport == 4", action: {{reject: {{bth: true}}}}}}
  - {{name: e, match: "tcp.dport == 5", action: {{clamp-mss: 0}}}}
  - {{name: f, match: "tcp.dport == 6", action: rejectt}}
"""
BAD_EXPECTED = [
    ("3:64", "RG006", "expected one of 'port' or 'admin', got the string 'bogus'", None),
    ("4:60", "RG006", "expected a number at most 65535, got an integer", None),
    ("5:49", "RG005", "unknown key 'rejct' in an action", "did you mean 'reject'"),
    ("6:58", "RG005", "unknown key 'bth' in reject's options", "did you mean 'both'"),
    ("7:60", "RG006", "expected a number at least 1", None),
    ("8:48", "RG006", "'count' or 'reject', got the string 'rejectt'", "did you mean 'reject'"),
]


def test_reject_and_clamp_errors_are_positioned(tmp_path: Path) -> None:
    f = tmp_path / "bad.rules.yaml"
    f.write_text(BAD.format(stack=STACK), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "rubikgen", "validate", "--format", "json",
                           str(f)], capture_output=True, text=True, env=ENV, timeout=300)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    got = json.loads(proc.stdout)
    diags = got["diagnostics"] if isinstance(got, dict) else got
    where = {(f"{d['line']}:{d['col']}", d["code"]): d for d in diags}
    for pos, code, msg, hint in BAD_EXPECTED:
        d = where.get((pos, code))
        assert d is not None, (pos, code, sorted(where))
        assert msg in d["message"], d
        if hint:
            assert hint in (d.get("hint") or ""), d
    assert len(diags) == len(BAD_EXPECTED), diags


def test_clamp_mss_is_refused_in_a_reloadable_set(tmp_path: Path) -> None:
    r = tmp_path / "c.rules.yaml"
    r.write_text(CLAMP.format(stack=STACK), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "rubikgen", "build", str(STACK), "--rules", str(r),
         "--rules-reload", "-o", str(tmp_path / "b")],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{r}:3:" in proc.stderr and "error[RG010]" in proc.stderr, proc.stderr
    assert "clamp-mss is not available in a reloadable rule set" in proc.stderr


# -- RG_REJECT from a network function ------------------------------------------------------------

NF = r"""
#include "rg/rg_nf_api.h"
/* rejects the packet that opens each TCP instance (NF ABI minor 1) */
static int on_open(void *nf, const rg_nf_ev *ev, void *st)
{
    (void)nf, (void)ev, (void)st;
    return RG_REJECT_BOTH;
}
static const rg_nf_sub subs[] = {{"tcp", RG_NF_OPEN, on_open, 0}};
static void *init(const rg_stack_desc *s, const rg_nf_kv *c, unsigned n, const rg_nf_host *h,
                  char *e, size_t el)
{
    (void)s, (void)c, (void)n, (void)h, (void)e, (void)el;
    static int self;
    return &self;
}
static int fini(void *nf, char *e, size_t el)
{
    (void)nf, (void)e, (void)el;
    return RG_OK;
}
RG_NF_EXPORT = {RG_NF_ABI_VERSION, sizeof(rg_nf_abi), "rejectopen", "reject TCP opens",
                subs, 1, 0, init, fini, NULL};
"""


def test_an_nf_rejects(binary: Path, tmp_path: Path) -> None:
    """An NF returning RG_REJECT_BOTH on `open` of the tcp layer: the first frame of every TCP
    connection (tshark's first frame of each tcp.stream over IPv4) is answered like a
    rejecting rule's, the rest pass."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    if not pcap.exists():
        pytest.skip(f"{pcap} not found (../shared/traces beside the checkout)")
    src = tmp_path / "rejectopen.c"
    src.write_text(NF, encoding="utf-8")
    so = tmp_path / "rejectopen.so"
    inc = REPO / "runtime-c" / "include"
    subprocess.run(["cc", "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror",
                    f"-I{inc}", str(src), "-o", str(so)], check=True)  # fmt: skip
    empty = _build(tmp_path, "spec: {stack}\nrules: []\n", "plain")
    out = tmp_path / "out.pcap"
    proc = subprocess.run(
        [str(empty), str(pcap), "--nf", str(so), "--summary", "json", "--write", str(out),
         "--reject-rate", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    from support.oracle.tshark import _tshark

    streams = _tshark(["-r", str(pcap), "-T", "fields", "-e", "tcp.stream", "-e", "ip.src"])
    first: set[int] = set()
    seen: set[str] = set()
    for i, ln in enumerate(streams.splitlines()):
        st, ip = (ln.split("\t") + [""])[:2]
        if st and ip and st not in seen:
            seen.add(st)
            first.add(i)
    opener = Rule("nf", lambda f: True, both=True)
    nrej, nrep = _judge(pcap, out, lambda i, f: opener if i in first else None)
    assert nrej == len(first) > 0 and nrep > 0
