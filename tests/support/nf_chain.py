"""Shared by tests; moved from runtime/test_nf_chain.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from support.captures import REPO


def _cc(src: Path | str, out: Path, *defs: str) -> Path:
    argv = ["cc", "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}"]
    subprocess.run([*argv, *defs, str(src), "-o", str(out)], check=True)
    return out


def _run(binary: Path, *args: str | Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), *map(str, args)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if ok:
        assert p.returncode == 0, f"{' '.join(argv)}: exit {p.returncode}\n{p.stderr[-2000:]}"
    return p


def _chain(path: Path, items: list[dict[str, Any]]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"chain": items}, sort_keys=False))
    return path


INCLUDE = REPO / "runtime-c" / "include"
