"""NFs subscribe to a user-defined event by its name, as to a handler: the subscription
{layer: "tcp", event: "http_request"} receives the calls of every handler hooked on the UDE
(rg_handler_desc.events; here http_req on tcp and, through "http_request6", http_req6 on
tcp6), and an unknown event name is refused naming it. The calls are compared with the
http_req/http_req6 lines of the events NF on the same capture (whose requests test_ude.py
compares with tshark)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES
from support.ude import STACK

NF = REPO / "tests" / "nf" / "ude_nf.c"
INCLUDE = REPO / "runtime-c" / "include"


@pytest.fixture(scope="module")
def binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_tls_http", quiet=True).binary


def _cc(out: Path, event: str) -> Path:
    argv = ["cc", "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}"]
    subprocess.run([*argv, f'-DUDE_EVENT="{event}"', str(NF), "-o", str(out)], check=True)
    return out


def _run(binary: Path, pcap: Path, nf: str, out: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("name", ["raw-ipv4-ipv6-http.pcap", "mixed-android-mobile.pcap"])
def test_subscription_by_ude_name(binary: Path, name: str, tmp_path: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    so = _cc(tmp_path / "ude.so", "http_request")
    (tmp_path / "a").mkdir()  # the NF writes there; it creates no directory
    p = _run(binary, pcap, str(so), tmp_path / "a")
    assert p.returncode == 0, p.stderr
    got = (tmp_path / "a" / "ude.txt").read_text().splitlines()
    assert _run(binary, pcap, "events", tmp_path / "b").returncode == 0
    want = []
    for line in (tmp_path / "b" / "events.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("handler") in ("http_req", "http_req6"):
            want.append(f"{r['pkt']} {r['handler']}")
    assert got == want and want


def test_unknown_event_is_refused(binary: Path, tmp_path: Path) -> None:
    so = _cc(tmp_path / "bad.so", "http_reqest")
    p = _run(binary, TRACES / "raw-ipv4-ipv6-http.pcap", str(so), tmp_path / "o")
    assert p.returncode != 0
    assert "no event 'http_reqest'" in p.stderr, p.stderr
