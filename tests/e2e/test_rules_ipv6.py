"""IPv6 addresses in rules (docs/rules.md): `ipv6.saddr == 2001:db8::1`, prefixes, `!=`,
checked against tshark's `ipv6.src`/`ipv6.dst` filters of a real IPv6 capture, compiled into
the stack and as a reloadable rule set (`--rules-reload`); the diagnostics of bad uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES, tshark_available
from support.rules import pcap_frames, run_json, tshark_numbers

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))
CAPTURE = TRACES / "ipv6-http-gquic.pcap"

RULES = """\
rules:
  - {name: v6-host, match: "ipv6.saddr == 2a03:b0c0:3:d0::70:1001", action: drop}
  - {name: v6-net, match: "ipv6.daddr == 2a00:1450::/32", action: drop}
  - {name: v6-other, match: "ipv6.daddr != 2a00::/16", action: drop}
  - {name: rest, match: "true", action: count}
"""
# each rule in tshark's filter language (first match wins: the test takes earlier ones out)
FILTERS = [
    ("v6-host", "ipv6.src == 2a03:b0c0:3:d0::70:1001"),
    ("v6-net", "ipv6.dst == 2a00:1450::/32"),
    ("v6-other", "ipv6 && !(ipv6.dst == 2a00::/16)"),
]

BAD = """\
rules:
  - {name: a, match: "ipv6.saddr == 2a03:b0c0:3:d0::70:1001:1:2:3", action: drop}
  - {name: b, match: "ipv6.daddr == 2a00:1450::/8", action: drop}
  - {name: c, match: "ipv6.daddr > 2a00::1", action: drop}
  - {name: d, match: "ip.saddr == 2a00::1", action: drop}
  - {name: e, match: "ipv6.saddr + 1 == 3", action: drop}
"""
EXPECTED = [
    "2:37: error[RG015]: bad IPv6 literal '2a03:b0c0:3:d0::70:1001:1:2:3'",
    "3:37: error[RG015]: bad IPv6 literal '2a00:1450::/8': 2a00:1450::/8 has host bits set",
    "4:23: error[RG012]: 'ipv6.daddr' is a 16-byte field: it is only compared with == or !=",
    "4:36: error[RG012]: an IPv6 address or prefix is only compared with == or !=",
    "5:35: error[RG012]: an IPv6 address or prefix is only compared with == or !=",
    "6:23: error[RG012]: 'ipv6.saddr' is a 16-byte field",
]


def rubikgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args], capture_output=True, text=True, env=ENV,
        timeout=600, check=False,
    )  # fmt: skip


def test_ipv6_errors_are_positioned(tmp_path: Path) -> None:
    r = tmp_path / "bad.rules.yaml"
    r.write_text(BAD, encoding="utf-8")
    p = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(tmp_path / "b"))
    assert p.returncode == 1
    for want in EXPECTED:
        assert f"{r}:{want}" in p.stderr, (want, p.stderr)
    assert not (tmp_path / "b").exists()  # refused before generating anything


@pytest.fixture(scope="module", params=["compiled-in", "reloadable"])
def v6_binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rules-v6")
    r = d / "v6.rules.yaml"
    r.write_text(RULES, encoding="utf-8")
    extra = ["--rules-reload"] if request.param == "reloadable" else []
    p = rubikgen("build", str(STACK), "--rules", str(r), *extra, "-o", str(d / "b"))
    assert p.returncode == 0, p.stderr
    return d / "b" / "tcp_ip"


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_ipv6_drops_are_tsharks_frames(v6_binary: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    out = tmp_path / "out.pcap"
    got = run_json(v6_binary, CAPTURE, "--write", str(out))
    taken: set[int] = set()
    want_hits = {}
    for name, flt in FILTERS:
        mine = tshark_numbers(CAPTURE, flt) - taken
        assert mine, f"{name}: nothing in the capture: the test would prove nothing"
        want_hits[name] = len(mine)
        taken |= mine
    frames = pcap_frames(CAPTURE)
    want = [f for i, f in enumerate(frames, 1) if i not in taken]
    assert pcap_frames(out) == want  # the frames tshark's filters select are gone, exactly
    hits = {r["name"]: r["hits"] for r in got["rules"]}  # type: ignore[attr-defined]
    assert hits == {**want_hits, "rest": len(want)}
