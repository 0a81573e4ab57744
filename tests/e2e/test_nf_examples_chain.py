"""The example NFs (hostlog, flowexport, signatures) are chainable: run together in one chain
(`--chain`, the signatures rules given as the chain's `rules` parameter) each writes byte for
byte what it writes alone with `--nf` (their contents are checked against tshark by
test_nf_hostlog.py, test_nf_flowexport.py and test_nf_signatures.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES
from support.ude import STACK

RULES = REPO / "handlers" / "nf" / "signatures.rules"
CAPTURES = ["mixed-android-mobile.pcap", "raw-ipv4-ipv6-http.pcap"]
OUTPUTS = {"hostlog": "hostlog.jsonl", "flowexport": "flows.ipfix.jsonl"}
OUTPUTS["signatures"] = "signatures.jsonl"


@pytest.fixture(scope="module")
def binary() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_tls_http", quiet=True).binary


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("name", CAPTURES)
def test_example_nfs_in_one_chain_write_what_they_write_alone(
    binary: Path, name: str, tmp_path: Path
) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    chain = tmp_path / "chain.yaml"
    chain.write_text(
        "chain:\n  - nf: hostlog\n  - nf: flowexport\n"
        f"  - nf: signatures\n    params: {{rules: {RULES}}}\n"
    )
    _run([str(binary), str(pcap), "--chain", str(chain), "--out", str(tmp_path / "chain")])
    env = dict(os.environ, RG_SIGNATURES=str(RULES))
    for nf, out in OUTPUTS.items():
        alone = tmp_path / nf
        _run([str(binary), str(pcap), "--nf", nf, "--out", str(alone)], env)
        together = (tmp_path / "chain" / out).read_bytes()
        assert together == (alone / out).read_bytes(), f"{name}: {nf} differs in the chain"
        assert together, f"{name}: {nf} wrote nothing"


def test_chain_files_naming_them_validate(tmp_path: Path) -> None:
    import sys

    chain = tmp_path / "chain.yaml"
    chain.write_text(
        "chain:\n  - nf: hostlog\n  - nf: flowexport\n"
        "  - nf: signatures\n    params: {rules: sig.rules}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "rubikgen", "validate", "--strict", str(chain)]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
