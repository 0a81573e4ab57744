"""`rubikgen build STACK --xdp`: the stack's XDP program (backend/ebpf) written to
OUT/STACK_xdp.c with its description (STACK_xdp.json: layers, flow keys, rules, maps) and
compiled with clang -target bpf into OUT/STACK_xdp.o (docs/xdp.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from rubikgen.front.diagnostics import Diagnostic, GenerateError
from rubikgen.pipeline import Compilation

CLANG = ("clang-14", "clang")


class XdpBuildError(Exception):
    pass


def _diag(comp: Compilation, e: object) -> Diagnostic:
    from rubikgen.backend.ebpf import Unlowerable

    assert isinstance(e, Unlowerable)
    file, line = comp.stack_path, 1
    if e.src is not None:
        f = e.src.file
        base = os.path.dirname(os.path.abspath(comp.stack_path))
        cand = f if os.path.isabs(f) or os.path.exists(f) else os.path.join(base, f)
        file, line = os.path.normpath(cand), e.src.line
    msg = f"cannot be lowered to XDP: {e.what}"
    return Diagnostic("RG080", msg, file, line, 1, hint=e.hint or "see docs/xdp.md")


def clang() -> str:
    for c in CLANG:
        if shutil.which(c):
            return c
    raise XdpBuildError("no clang for -target bpf (install clang-14: ci/setup.sh --test)")


def build_xdp(comp: Compilation, out_dir: Path) -> Path:
    """The compiled object's path (GenerateError with RG080 when something cannot be
    lowered, XdpBuildError when clang fails)."""
    from rubikgen.backend.ebpf import Unlowerable, generate_xdp

    prog = comp.program  # with the rules file's rules lowered into it
    try:
        x = generate_xdp(prog)
    except Unlowerable as e:
        raise GenerateError([_diag(comp, e)]) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{comp.stack_name}_xdp.c"
    obj = out_dir / f"{comp.stack_name}_xdp.o"
    src.write_text(x.c, encoding="utf-8")
    meta = dict(x.meta, object=obj.name, section="xdp", program="rg_xdp")
    (out_dir / f"{comp.stack_name}_xdp.json").write_text(json.dumps(meta, indent=1) + "\n")
    cc = clang()
    arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True)
    inc = [f"-I/usr/include/{arch.stdout.strip()}"] if arch.returncode == 0 else []
    cmd = [cc, "-O2", "-g", "-target", "bpf", "-Wall", *inc, "-c", str(src), "-o", str(obj)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise XdpBuildError(f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}")
    return obj
