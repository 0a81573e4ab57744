"""Bad checksums as a rule input (docs/rules.md): `LAYER.checksum_bad`, on a real capture
whose checksums the test corrupts, against tshark's own verification
(`ip.checksum.status`, `tcp.checksum.status`, `udp.checksum.status`); compiled in and in a
`--rules-reload` build."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES, tshark_available
from support.oracle.tshark import _tshark
from support.paced_feed import pcap_records
from support.rules import pcap_frames, run_json

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))
SOURCE = TRACES / "mixed-android-mobile.pcap"

RULES = """\
rules:
  - {name: bad-ip, match: "ip.checksum_bad", action: drop}
  - {name: bad-l4, match: "tcp.checksum_bad || udp.checksum_bad", action: drop}
  - {name: good, match: "true", action: count}
"""
CHECKS = ["-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
          "-o", "udp.check_checksum:TRUE"]  # fmt: skip


def corrupt(src: Path, dst: Path) -> None:
    """Every 7th Ethernet/IPv4 TCP or UDP frame gets a wrong transport checksum, every 11th a
    wrong IPv4 header checksum (an independent parse of the bytes: offsets of RFC 791/793/768)."""
    head, records = pcap_records(src)
    out = [head]
    for i, rec in enumerate(records, 1):
        b = bytearray(rec)
        p = 16  # the frame after the record header
        if b[p + 12 : p + 14] == b"\x08\x00" and b[p + 14] >> 4 == 4:
            ip = p + 14
            ihl = (b[ip] & 15) * 4
            frag = struct.unpack(">H", b[ip + 6 : ip + 8])[0] & 0x3FFF
            l4 = ip + ihl
            off = {6: 16, 17: 6}.get(b[ip + 9])
            if i % 7 == 0 and off is not None and not frag and l4 + off + 2 <= len(b):
                if b[l4 + off : l4 + off + 2] != b"\x00\x00":  # UDP 0: no checksum
                    b[l4 + off] ^= 0x5A
            if i % 11 == 0:
                b[ip + 10] ^= 0x01
        out.append(bytes(b))
    dst.write_bytes(b"".join(out))


def rubikgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args], capture_output=True, text=True, env=ENV,
        timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module", params=["compiled-in", "reloadable"])
def csum_binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rules-csum")
    r = d / "csum.rules.yaml"
    r.write_text(RULES, encoding="utf-8")
    extra = ["--rules-reload"] if request.param == "reloadable" else []
    p = rubikgen("build", str(STACK), "--rules", str(r), *extra, "-o", str(d / "b"))
    assert p.returncode == 0, p.stderr
    return d / "b" / "tcp_ip"


def _numbers(pcap: Path, flt: str) -> set[int]:
    out = _tshark(["-r", str(pcap), *CHECKS, "-Y", flt, "-T", "fields", "-e", "frame.number"])
    return {int(x) for x in out.split()}


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_bad_checksums_drop_tsharks_frames(csum_binary: Path, tmp_path: Path) -> None:
    if not SOURCE.is_file():
        pytest.skip(f"{SOURCE.name} is not in {TRACES}")
    pcap, out = tmp_path / "bad.pcap", tmp_path / "out.pcap"
    corrupt(SOURCE, pcap)
    bad_ip = _numbers(pcap, "ip.checksum.status == 0")
    bad_l4 = _numbers(pcap, "tcp.checksum.status == 0 || udp.checksum.status == 0") - bad_ip
    assert len(bad_ip) > 10 and len(bad_l4) > 10, "too few bad checksums: the test proves little"
    got = run_json(csum_binary, pcap, "--write", str(out))
    frames = pcap_frames(pcap)
    want = [f for i, f in enumerate(frames, 1) if i not in bad_ip | bad_l4]
    assert pcap_frames(out) == want
    hits = {r["name"]: r["hits"] for r in got["rules"]}  # type: ignore[attr-defined]
    assert hits == {"bad-ip": len(bad_ip), "bad-l4": len(bad_l4), "good": len(want)}


def test_checksum_bad_needs_a_checksummed_layer(tmp_path: Path) -> None:
    r = tmp_path / "r.rules.yaml"
    r.write_text('rules:\n  - {name: a, match: "eth.checksum_bad", action: drop}\n')
    p = rubikgen("validate", str(STACK), "--rules", str(r))
    assert p.returncode == 1
    head = f"{r}:2:23: error[RG011]: layer 'eth' (eth) declares no checksum"
    assert head in p.stdout, p.stdout  # validate reports on standard output
