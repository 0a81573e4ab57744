"""The C runtime's arrows point down (runtime-c/README.md, "Architecture"): the runtime
(runtime-c/src, include/rg) includes nothing of the driver (runtime-c/main) or the NFs
(handlers/nf), the driver nothing of the NFs, and the built librgrt.a needs no symbol that
only librgmain.a or librgnf.a defines."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.toolchain import build

REPO = REPO_ROOT
RT = REPO / "runtime-c"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _includes(files: list[Path]) -> set[str]:
    return {Path(m).name for f in files for m in INCLUDE.findall(f.read_text())}


def test_includes_point_down() -> None:
    nf = {p.name for p in (REPO / "handlers" / "nf").glob("*.h")}
    main = {p.name for p in (RT / "main").glob("*.h")}
    runtime = [*(RT / "src").glob("*.c"), *(RT / "include" / "rg").glob("*.h")]
    assert nf and main and runtime
    assert not _includes(runtime) & (nf | main)
    assert not _includes([*(RT / "main").glob("*.[ch]")]) & nf


def _defined(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-g", "--defined-only", str(lib)], capture_output=True, text=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if len(line.split()) == 3}


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_runtime_archive_needs_nothing_above() -> None:
    main, nf, rt = build.ensure_runtime(sanitize=False, quiet=True)
    out = subprocess.run(["nm", "-g", "--undefined-only", str(rt)], capture_output=True, text=True)
    undefined = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    above = (_defined(main) | _defined(nf)) - _defined(rt)
    assert "rg_main" in above and "rg_nf_table" in above
    assert not undefined & above
