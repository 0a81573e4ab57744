"""A stack's `limits:` (memory caps, issue 14): validated with positions, inherited through
`extends`, and compiled into the stack's descriptor as the run's defaults.

The binary side (the caps in force, the policies, what the summary says) is
tests/runtime/test_flood_memory.py's; here the spec front-end and the generated descriptor."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.hostile import REPO, STACK

from rubikgen.pipeline import generate
from rubikgen.sema.limits import DEFAULT_FLOWS, DEFAULT_REASSEMBLY, UNLIMITED, size_bytes


def _stack(tmp: Path, name: str, limits: str, extends: str | None = None) -> Path:
    base = f"extends: {extends or STACK}\n"
    p = tmp / f"{name}.yaml"
    p.write_text(f"stack: {name}\n{base}{limits}")
    return p


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def _desc_limits(path: Path) -> tuple[int, int, str]:
    """The memcap defaults the generated descriptor carries (the three members after verdict)."""
    gen = generate(str(path))
    c = next(text for name, text in gen.files.items() if name.endswith("_gen.c"))
    m = re.search(r"_verdict,\s*UINT64_C\((\d+)\),\s*UINT64_C\((\d+)\),\s*RG_MEMCAP_(\w+),", c)
    assert m, "no memcap defaults in the descriptor"
    return int(m[1]), int(m[2]), m[3].lower().replace("_", "-")


@pytest.mark.parametrize(
    ("text", "want"),
    [("64M", 64 << 20), ("1G", 1 << 30), ("512K", 512 << 10), ("2TB", 2 << 40), (65536, 65536)],
)
def test_sizes(text: int | str, want: int) -> None:
    assert size_bytes(text) == want
    assert size_bytes(0) == size_bytes("0M") == UNLIMITED


def test_bad_limits_name_their_position(tmp_path: Path) -> None:
    p = _stack(
        tmp_path,
        "bad",
        "limits:\n  memcap_reassembly: 64X\n  memcap_flows: -1\n  memcap_policy: evict-newest\n"
        "  memcap_other: 1\n",
    )
    proc = _validate(p)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    for line, col in ((4, 22), (5, 17), (6, 18), (7, 3)):
        assert f"{p}:{line}:{col}: error" in err, err
    assert "did you mean 'evict-oldest'?" in err


def test_defaults_and_inheritance(tmp_path: Path) -> None:
    assert _desc_limits(STACK) == (DEFAULT_REASSEMBLY, DEFAULT_FLOWS, "evict-oldest")
    base = _stack(
        tmp_path,
        "base",
        "limits: {memcap_reassembly: 32M, memcap_flows: 0, memcap_policy: bypass}\n",
    )
    assert _validate(base).returncode == 0
    assert _desc_limits(base) == (32 << 20, UNLIMITED, "bypass")
    child = _stack(tmp_path, "child", "", extends=str(base))
    assert _desc_limits(child) == (32 << 20, UNLIMITED, "bypass")  # inherited whole
    own = _stack(tmp_path, "own", "limits: {memcap_policy: drop-flow}\n", extends=str(base))
    # an extending stack's own limits replace the base's whole: unset keys are the defaults
    assert _desc_limits(own) == (DEFAULT_REASSEMBLY, DEFAULT_FLOWS, "drop-flow")


def test_run_passes_memcaps(tmp_path: Path) -> None:
    """`rubikgen run` takes the memcap options and hands them to the binary (the sanitized
    build the hostile-traffic tests share)."""
    from support.floods import flood

    pcap = tmp_path / "far.pcap"
    flood.write_pcap(pcap, flood.frames("far-ahead", 700, seed=2))
    argv = [sys.executable, "-m", "rubikgen", "run", str(STACK), str(pcap), "--sanitize"]
    argv += ["--nf", "count", "--summary", "json", "--out", str(tmp_path / "out")]
    caps = ["--memcap-reassembly", "16K", "--memcap-flows", "1M", "--memcap-policy", "bypass"]
    proc = subprocess.run([*argv, *caps], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["memcap"]["reassembly"] == 16 << 10
    assert summary["memcap"]["flows"] == 1 << 20
    assert summary["memcap"]["policy"] == "bypass"
    assert summary["layers"]["tcp"]["memory"]["actions"]["bypass"] > 0
    bad = subprocess.run([*argv, "--memcap", "12Q"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode != 0 and "invalid size '12Q'" in bad.stderr
