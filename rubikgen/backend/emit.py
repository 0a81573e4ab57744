"""C back-end: a checked stack -> S_gen.h, S_gen.c (one big per-packet function), S_main.c
and the handler stubs S_handlers.c. File skeletons are Jinja2 templates in templates/."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from rubikgen import __version__
from rubikgen.diagnostics import Diagnostic
from rubikgen.ir import Program, lower_stack, prune, verify
from rubikgen.workspace import Workspace

from .cgen import CGen, Generated

# Bump when the generated code changes for the same specs (part of the spec hash).
GENERATOR_VERSION = "1"


class GenerateError(Exception):
    def __init__(self, diagnostics: list[Diagnostic], message: str = "") -> None:
        super().__init__(message or f"{len(diagnostics)} error(s) in the specs")
        self.diagnostics = diagnostics


def spec_hash(files: list[str], opt_level: int = 2) -> str:
    h = hashlib.sha256()
    h.update(f"rubikgen {__version__} gen {GENERATOR_VERSION} -O{opt_level}\n".encode())
    # absolute paths: protocol paths may be relative to the working directory, and their order
    # (hence the hash) must not depend on where rubikgen runs
    for f in sorted({os.path.abspath(f) for f in files}):
        h.update(os.path.basename(f).encode() + b"\0")
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:16]


def lower_checked(stack_path: str) -> tuple[Program, Any]:
    """Check the stack like `rubikgen validate` and lower it to verified IR.
    GenerateError carries the diagnostics when the specs have errors."""
    ws = Workspace()
    doc = ws.check_stack(stack_path)
    errors = [d for d in ws.all_diagnostics() if d.severity == "error"]
    if errors or doc.kind != "stack" or doc.stack_info is None:
        if not errors:
            errors = doc.diags or [
                Diagnostic("RG001", f"'{stack_path}' is not a stack", doc.path, 1, 1)
            ]
        raise GenerateError(errors)
    prog = lower_stack(doc.model, doc.stack_info, doc.smap, doc.abspath, display=doc.path)
    prune(prog)
    problems = verify(prog)
    if problems:
        raise RuntimeError("IR verification failed: " + "; ".join(problems[:5]))
    return prog, doc


def generate(
    stack_path: str,
    *,
    opt_level: int = 2,
    disable: tuple[str, ...] = (),
    dump_after: tuple[str, ...] = (),
    timings: dict[str, float] | None = None,
) -> Generated:
    import time

    from rubikgen.opt import optimize

    t0 = time.perf_counter()
    prog, doc = lower_checked(stack_path)
    t1 = time.perf_counter()
    res = optimize(prog, opt_level, disable=disable, dump_after=dump_after)
    t2 = time.perf_counter()
    files = list(doc.sources) + [li.protocol.file for li in doc.stack_info.layers.values()]
    gen = CGen(prog, doc, spec_hash(files, opt_level), opt_level).render()
    gen.dumps = res.dumps
    if timings is not None:
        timings["check+lower"] = t1 - t0
        for r in res.records:
            timings[f"pass {r.name}"] = timings.get(f"pass {r.name}", 0.0) + r.seconds
        timings["C back-end"] = time.perf_counter() - t2
    return gen


__all__ = [
    "GENERATOR_VERSION",
    "CGen",
    "GenerateError",
    "Generated",
    "generate",
    "lower_checked",
    "spec_hash",
]
