"""Shared by tests; moved from front/test_validate_mutants.py."""

from __future__ import annotations

import subprocess
import sys

from support import REPO_ROOT as REPO


def rubikgen_fails(*args: str) -> str:
    """`rubikgen ARGS` in a new process: exit 1, no traceback, no internal error; its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "rubikgen", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "RG900" not in out and "internal error" not in out, out
    return out


def validate_fails(*args: str) -> str:
    return rubikgen_fails("validate", *args)
