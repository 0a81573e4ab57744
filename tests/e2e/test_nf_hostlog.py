"""The hostlog NF (handlers/nf/rg_nf_hostlog.c) on the tcp_tls_http stack against tshark, on
every capture of `oracle.ELIGIBLE` (their TCP streams are on paths the stack parses).

Reference: tshark's TLS and HTTP dissectors, on their own reassembly.
- TLS: every ClientHello (`tls.handshake.type == 1`) over TCP to port 443 (the port tcp_tls
  sends to its ClientHello layers), with `tls.handshake.extensions_server_name` (none: null);
- HTTP: every `http.request`, with `http.host` (no Host header: null; an empty one: "").
The records are compared as sets of (src, sport, dst, dport, proto, host), exactly.
EXCLUDED (shared with test_ude.py) lists the captures whose HTTP requests tshark does not
report, with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO
from support.oracle import ELIGIBLE, TRACES, tshark_available
from support.oracle.tshark import _tshark
from support.ude import EXCLUDED, STACK

Record = tuple[str, int, str, int, str, str | None]


@pytest.fixture(scope="module")
def built() -> Any:
    if not tshark_available():
        pytest.skip("tshark not installed")
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_tls_http", quiet=True)


def _hostlog(binary: Path, pcap: Path, out: Path) -> list[Record]:
    argv = [str(binary), str(pcap), "--nf", "hostlog", "--out", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = []
    for line in (out / "hostlog.jsonl").read_text().splitlines():
        r = json.loads(line)
        recs.append((r["src"], r["sport"], r["dst"], r["dport"], r["proto"], r["host"]))
    return recs


def _reference(pcap: Path) -> set[Record]:
    fields = ["ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport"]
    fields += ["http.request", "http.host", "tls.handshake.type"]
    fields += ["tls.handshake.extensions_server_name", "http.request.line"]
    flt = "tcp && (http.request || tls.handshake.type == 1)"
    args = ["-r", str(pcap), "-Y", flt, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a"]
    text = _tshark([*args, *[x for f in fields for x in ("-e", f)]])
    out: set[Record] = set()
    for line in text.splitlines():
        f = line.split("\t")
        src, sport, dst, dport = f[0] or f[1], int(f[2]), f[3] or f[4], int(f[5])
        if f[6]:
            assert "," not in f[7], f"several requests in one frame: {line!r}"
            # an empty Host header ("Host: ") is "", a request without one null
            has_host = re.search(r"(^|,)host:", f[10], re.I) is not None
            out.add((src, sport, dst, dport, "http", f[7] if f[7] or has_host else None))
        hellos = [t for t in f[8].split(",") if t == "1"]
        if hellos and dport == 443:
            assert len(hellos) == 1, f"several ClientHellos in one frame: {line!r}"
            out.add((src, sport, dst, dport, "tls", f[9] or None))
    return out


CAPTURES = [n for n in sorted(ELIGIBLE) if n not in EXCLUDED]


@pytest.mark.parametrize("name", CAPTURES)
def test_hostlog_matches_tshark(built: Any, name: str, tmp_path: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    got = _hostlog(built.binary, pcap, tmp_path)
    ref = _reference(pcap)
    assert set(got) == ref, (
        f"{name}: hostlog only {sorted(set(got) - ref)}, tshark only {sorted(ref - set(got))}"
    )


def test_hostlog_sees_both_protocols(built: Any, tmp_path: Path) -> None:
    """The comparison above is not vacuous: over the captures, both kinds of records occur."""
    kinds: set[str] = set()
    for name in CAPTURES:
        if (TRACES / name).is_file():
            kinds |= {r[4] for r in _hostlog(built.binary, TRACES / name, tmp_path / name)}
    if not kinds:
        pytest.skip("captures missing")
    assert kinds == {"http", "tls"}
