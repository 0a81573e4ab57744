"""Running a stack binary with one stock NF on a capture and reading one of its line outputs
(shared by the TLS and DNS end-to-end tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.quic_captures import SANITIZER


def nf_lines(binary: Path, pcap: Path, out: Path, nf: str, output: str) -> list[str]:
    """The lines of OUT/OUTPUT after `BINARY PCAP --nf NF --out OUT`, which must exit 0
    without a sanitizer report (the binaries may be ASan/UBSan builds)."""
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", nf, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    return (out / output).read_text().splitlines()
