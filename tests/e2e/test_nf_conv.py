"""The conv NF (handlers/nf/rg_nf_conv.c, `--nf conv`): tshark's conversation table of the
transport layers, one record per conversation in OUT/conv.jsonl.

It is the seam's proof for stock NFs: one file and one registry word (RG_STOCK_NFS), which
`--nf`, `--help`, chain files (`rubikgen validate`) and --workers pick up.  The reference is
tshark's own table (`-z conv,tcp`, `-z conv,udp`): frames per direction of every address/port
pair, summed over the pair's conversations (tshark and the stack may cut a reused pair in
different places).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.conversations import Node, tshark_frames
from support.oracle.tshark import REPO, TRACES
from support.records import canonical_outputs

CAPTURES = [
    TRACES / "http-post-upload.pcap",
    TRACES / "mixed-android-mobile.pcap",  # TCP and UDP (DNS, QUIC)
    REPO / "captures" / "veth-http-udp-frag.pcap",  # IPv4 and IPv6, a fragmented datagram
]


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conv")
    cmd = [sys.executable, "-m", "rubikgen", "build", str(REPO / "specs/stacks/tcp_ip.yaml")]
    r = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return out / "tcp_ip"


def conv_frames(path: Path) -> Counter[tuple[str, Node, Node]]:
    got: Counter[tuple[str, Node, Node]] = Counter()
    for line in path.read_text().splitlines():
        r = json.loads(line)
        a, b = (r["a"][0], r["a"][1]), (r["b"][0], r["b"][1])
        got[r["proto"], a, b] += r["frames_ab"]
        got[r["proto"], b, a] += r["frames_ba"]
    return +got


def _records(out: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in (out / "conv.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("pcap", CAPTURES, ids=lambda p: p.name)
def test_conv_matches_tsharks_conversation_tables(binary: Path, tmp_path: Path, pcap: Path) -> None:
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "conv", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    want = tshark_frames(pcap)
    assert want, "tshark lists no conversation"
    assert conv_frames(tmp_path / "conv.jsonl") == want
    for rec in _records(tmp_path):  # the record's own arithmetic
        assert isinstance(rec["duration_ns"], int) and rec["duration_ns"] >= 0


def test_conv_in_a_chain_and_on_workers(binary: Path, tmp_path: Path) -> None:
    """The registry line is all it takes: a chain file names it (and validates), and
    --workers writes the records of one context (uids renamed by what they stand for: each
    worker numbers its own, tests/support/records.py)."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    chain = tmp_path / "chain.yaml"
    chain.write_text("chain:\n  - nf: conv\n")
    v = subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", str(chain)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert v.returncode == 0, v.stdout + v.stderr
    one, chained, workers = tmp_path / "one", tmp_path / "chained", tmp_path / "workers"
    runs = [
        (one, ["--nf", "conv"]),
        (chained, ["--nf", "count", "--chain", str(chain)]),
        (workers, ["--nf", "conv", "--workers", "2"]),
    ]
    for out, args in runs:
        r = subprocess.run(
            [str(binary), str(pcap), *args, "--out", str(out)], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
    assert _records(chained) == _records(one) and _records(one)
    w = _records(workers)
    assert all(rec.pop("worker") in (0, 1) for rec in w)
    assert canonical_outputs(workers) == canonical_outputs(one)


def test_conv_is_listed_by_help(binary: Path) -> None:
    h = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    assert any(ln.split()[:1] == ["conv"] for ln in h.splitlines()), h
