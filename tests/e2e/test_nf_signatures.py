"""The signatures NF (handlers/nf/rg_nf_signatures.c) with the example rules file
(handlers/nf/signatures.rules) on the tcp_ip stack, against Python's `re` run over tshark's
reassembled TCP streams, on every capture of `oracle.ELIGIBLE`.

Reference: for every TCP stream tshark follows (`oracle.reference_streams`, both directions,
gap markers removed: the bytes the stack delivers, as test_e2e_tshark checks), every rule whose
pattern `re.search`es the direction's bytes (re.DOTALL | re.MULTILINE, the NF's Hyperscan
flags). Compared as sets of (sender, sender port, receiver, receiver port, rule): the NF reports
each rule once per instance and direction. Skipped when Hyperscan is missing (the NF is
optional): then `--nf signatures` must say so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO, STACK, flow_key
from support.oracle import ELIGIBLE, TRACES, reference_streams, tshark_available

RULES = REPO / "handlers" / "nf" / "signatures.rules"

Hit = tuple[str, int, str, int, str]


def _rules() -> list[tuple[str, re.Pattern[bytes]]]:
    out = []
    for line in RULES.read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        name, pattern = re.split(r"[ \t]+", s, maxsplit=1)
        out.append((name, re.compile(pattern.encode(), re.DOTALL | re.MULTILINE)))
    return out


@pytest.fixture(scope="module")
def binary() -> Path:
    if not tshark_available():
        pytest.skip("tshark not installed")
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary


def _run(binary: Path, pcap: Path, out: Path, rules: Path = RULES) -> subprocess.CompletedProcess:
    env = dict(os.environ, RG_SIGNATURES=str(rules))
    argv = [str(binary), str(pcap), "--nf", "signatures", "--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


def _hyperscan(binary: Path, tmp_path: Path) -> None:
    p = _run(binary, TRACES / sorted(ELIGIBLE)[0], tmp_path / "probe")
    if "built without Hyperscan" in p.stderr or "Hyperscan library not found" in p.stderr:
        pytest.skip("Hyperscan not available: " + p.stderr.strip())


def _nf_hits(binary: Path, pcap: Path, out: Path) -> set[Hit]:
    p = _run(binary, pcap, out)
    assert p.returncode == 0, p.stderr[-2000:]
    hits = set()
    for line in (out / "signatures.jsonl").read_text().splitlines():
        r: dict[str, Any] = json.loads(line)
        _, s, sp, d, dp = flow_key("tcp", r["src"], r["sport"], r["dst"], r["dport"])
        hits.add((s, sp, d, dp, r["rule"]))
    return hits


def _re_hits(pcap: Path) -> set[Hit]:
    rules = _rules()
    hits = set()
    for st in reference_streams(pcap):
        if st.proto != "tcp":
            continue
        for d in st.directions:
            f = d.flow
            _, s, sp, dst, dp = flow_key("tcp", f.src, f.sport, f.dst, f.dport)
            for name, rx in rules:
                if rx.search(d.data):
                    hits.add((s, sp, dst, dp, name))
    return hits


@pytest.mark.parametrize("name", sorted(ELIGIBLE))
def test_signatures_match_python_re_on_tshark_streams(
    binary: Path, name: str, tmp_path: Path
) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    _hyperscan(binary, tmp_path)
    got, want = _nf_hits(binary, pcap, tmp_path / "out"), _re_hits(pcap)
    assert got == want, f"{name}: NF only {sorted(got - want)}, re only {sorted(want - got)}"


def test_signatures_hit_something(binary: Path, tmp_path: Path) -> None:
    """The comparison is not vacuous: most rules match somewhere in the captures."""
    _hyperscan(binary, tmp_path)
    rules: set[str] = set()
    for name in sorted(ELIGIBLE):
        if (TRACES / name).is_file():
            rules |= {h[4] for h in _nf_hits(binary, TRACES / name, tmp_path / name)}
    assert len(rules) >= len(_rules()) // 2, rules


def test_bad_rules_are_refused_with_their_line(binary: Path, tmp_path: Path) -> None:
    _hyperscan(binary, tmp_path)
    bad = tmp_path / "bad.rules"
    bad.write_text("# comment\nok ^GET\n\nbroken (unclosed\n")
    p = _run(binary, TRACES / sorted(ELIGIBLE)[0], tmp_path / "o", bad)
    assert p.returncode != 0
    assert f"{bad}:4: rule 'broken'" in p.stderr, p.stderr
    bad.write_text("no_pattern\n")
    p = _run(binary, TRACES / sorted(ELIGIBLE)[0], tmp_path / "o", bad)
    assert p.returncode != 0 and f"{bad}:1: expected 'NAME PATTERN'" in p.stderr, p.stderr
