"""The middle-end: passes over the CFG IR, run by a pass manager.

Every pass is a function ``Program -> bool`` (did it change anything) in a module of its own,
registered (``registry.register``) with a name, the lowest ``-O`` level that runs it and a
one-line description (its docstring). ``-O0`` runs none: the generated code is the plain
per-layer pipeline. The pipeline is declared in ``PIPELINE``; a tuple in it is a group of
passes run again until none of them changes anything (bounded). IR invariants
(``rubikgen.ir.verify``) are checked after every pass when ``check`` is set (the tests,
``rubikgen ir``, ``rubikgen build --check-ir`` and ``RUBIKGEN_CHECK_IR=1``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from rubikgen.ir import Program, to_text, verify

from .registry import PASSES, Pass, PassFn, register

# One module per pass; importing it registers the pass. This order is --list-passes' order.
PASS_MODULES = (
    "fold_branches",
    "dead_blocks",
    "jump_threading",
    "header_zeroing",
    "fast_forward",
    "fast_destroy",
    "const_prop",
    "tail_dup",
    "cheap_first",
    "dead_stores",
    "fresh_seq",
)
for _module in PASS_MODULES:
    importlib.import_module(f"{__name__}.{_module}")

# The pipeline: a name is one pass; a tuple is a group repeated until it changes nothing.
PIPELINE: list[str | tuple[str, ...]] = [
    ("fold-branches", "jump-threading", "dead-blocks"),
    "header-zeroing",
    "fast-forward",
    "fast-destroy",
    ("const-prop", "tail-dup", "fold-branches", "jump-threading", "dead-blocks"),
    "dead-stores",
    "cheap-first",
    "fresh-seq",
]
MAX_ROUNDS = 16


class PassError(Exception):
    pass


@dataclass
class PassRecord:
    name: str
    seconds: float
    changed: bool


@dataclass
class OptResult:
    records: list[PassRecord] = field(default_factory=list)
    dumps: dict[str, str] = field(default_factory=dict)  # pass name -> IR text after it


def check_names(names: Iterable[str]) -> None:
    for n in names:
        if n not in PASSES:
            raise PassError(f"unknown pass '{n}' (passes: {', '.join(PASSES)})")


def optimize(
    prog: Program,
    level: int = 2,
    *,
    disable: Iterable[str] = (),
    dump_after: Iterable[str] = (),
    check: bool = False,
) -> OptResult:
    disabled = set(disable)
    dumps = set(dump_after)
    check_names(disabled | dumps)
    res = OptResult()

    def run(name: str) -> bool:
        p = PASSES[name]
        if p.level > level or name in disabled:
            return False
        t0 = time.perf_counter()
        changed = p.run(prog)
        res.records.append(PassRecord(name, time.perf_counter() - t0, changed))
        if check:
            problems = verify(prog)
            if problems:
                raise PassError(f"IR invalid after pass {name}: " + "; ".join(problems[:5]))
        if name in dumps:
            res.dumps[name] = to_text(prog)
        return changed

    for step in PIPELINE:
        if isinstance(step, str):
            run(step)
            continue
        for _ in range(MAX_ROUNDS):
            changed = False
            for name in step:
                changed = run(name) or changed
            if not changed:
                break
    return res


def describe() -> str:
    lines = []
    for p in PASSES.values():
        first = " ".join(p.doc.split()).split(". ")[0].rstrip(".")
        lines.append(f"{p.name:16} -O{p.level}  {first}")
    return "\n".join(lines)


__all__ = [
    "PASSES",
    "PassFn",
    "register",
    "PIPELINE",
    "OptResult",
    "Pass",
    "PassError",
    "check_names",
    "describe",
    "optimize",
]
