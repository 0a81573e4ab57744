"""Shared by the hostile-traffic tests (test_clock, test_flood): the sanitized tcp_ip binary,
built once (in build/tcp_ip, where `rubikgen run --sanitize` builds it too) and run with
its summary as JSON."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

from support import REPO_ROOT
from support.captures import SANITIZER_REPORT, rubikgen_command

REPO = REPO_ROOT
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"


@functools.cache
def sanitized_tcp_ip() -> Path:
    argv = [*rubikgen_command(), "build", str(STACK.relative_to(REPO)), "--sanitize"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return REPO / proc.stdout.strip().splitlines()[-1]


def run_json(binary: Path, pcap: Path, nf: str, *args: str) -> tuple[dict[str, Any], Path, str]:
    """Run with `--nf nf --summary json`: the summary, the output directory and stderr."""
    out = pcap.parent / f"out-{pcap.stem}-{nf}"
    argv = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert not any(s in proc.stderr for s in SANITIZER_REPORT), proc.stderr
    return json.loads(proc.stdout), out, proc.stderr
