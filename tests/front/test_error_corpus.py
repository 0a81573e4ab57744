"""The error corpus: one small spec per diagnostic, expected diagnostics in leading comments.

A spec in tests/specs/errors/ starts with one or more lines

    # expect: RG011 12:9
    # expect: RG033 20:7 warning

and validating it must produce exactly those diagnostics (code, line, column, severity; the
severity defaults to error), and nothing else. Protocols and stacks a case refers to may live
beside it in a folder named after the case. A case that is a chain file (`chain:`, NFs) is
checked as `rubikgen validate` checks chain files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.front.chain import check_chain_file
from rubikgen.front.diagnostics import CODES
from rubikgen.front.workspace import Workspace

HERE = REPO_ROOT / "tests" / "specs" / "errors"
EXPECT = re.compile(r"^#\s*expect:\s*(RG\d{3})\s+(\d+):(\d+)(?:\s+(error|warning))?\s*$")
CASES = sorted(p for p in HERE.iterdir() if p.suffix in (".yaml", ".toml"))


def expected(path: Path) -> list[tuple[str, int, int, str]]:
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = EXPECT.match(line)
        if m:
            out.append((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4) or "error"))
    return out


@pytest.mark.parametrize("case", CASES, ids=[p.name for p in CASES])
def test_case(case: Path) -> None:
    want = expected(case)
    assert want, f"{case.name} has no '# expect:' line"
    ws = Workspace()
    if re.search(r"^chain:", case.read_text(encoding="utf-8", errors="replace"), re.M):
        diags = check_chain_file(str(case)).diags
    else:
        ws.check(str(case))
        diags = ws.all_diagnostics()
    got = [(d.code, d.line, d.col, d.severity) for d in diags if d.file.endswith(case.name)]
    assert sorted(got) == sorted(want), "\n".join(
        f"{d.file}:{d.line}:{d.col}: {d.severity}[{d.code}] {d.message}" for d in diags
    )


def test_every_code_has_a_case() -> None:
    covered = {w[0] for c in CASES for w in expected(c)}
    # Codes that cannot be produced by a spec file on its own (internal error, broken install:
    # tests/install/test_install.py).
    untestable = {"RG900", "RG901", "RG080"}  # RG080: build --xdp only (tests/e2e/test_xdp.py)
    missing = sorted(set(CODES) - covered - untestable)
    assert not missing, f"codes without an error-corpus case: {missing}"
