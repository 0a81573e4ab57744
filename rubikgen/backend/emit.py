"""C back-end entry points: the optimised IR -> S_gen.h, S_gen.c (one big per-packet function),
S_main.c and the handler stubs S_handlers.c (rendered by cgen.generate_c from the IR alone,
each node by its renderer in the C registry, backend/c/; file skeletons are Jinja2 templates in
templates/). The stages before it run in
rubikgen.pipeline.Compilation."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rubikgen import __version__
from rubikgen.front.diagnostics import GenerateError  # a front-end error, named here as before

from .cgen import Generated, generate_c

# Bump when the generated code changes for the same specs (part of the spec hash).
GENERATOR_VERSION = "1"


def spec_hash(files: list[str], opt_level: int = 2) -> str:
    h = hashlib.sha256()
    h.update(f"rubikgen {__version__} gen {GENERATOR_VERSION} -O{opt_level}\n".encode())
    # absolute paths: protocol paths may be relative to the working directory, and their order
    # (hence the hash) must not depend on where rubikgen runs
    for f in sorted({os.path.abspath(f) for f in files}):
        h.update(os.path.basename(f).encode() + b"\0")
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:16]


__all__ = [
    "GENERATOR_VERSION",
    "GenerateError",
    "Generated",
    "generate_c",
    "spec_hash",
]
