"""The middle-end: passes over the CFG IR, run by a pass manager.

Every pass is a function ``Program -> bool`` (did it change anything) registered with a name,
the lowest ``-O`` level that runs it and a one-line description. ``-O0`` runs none: the
generated code is the plain per-layer pipeline. The pipeline is declared in ``PIPELINE``;
groups of passes in ``REPEAT`` run again until none of them changes anything (bounded).
IR invariants (``rubikgen.ir.verify``) are checked after every pass when ``check`` is set
(the tests always set it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rubikgen.ir import Program, to_text, verify

from . import cleanup, constprop, deadstore, lifecycle

PassFn = Callable[[Program], bool]


@dataclass(frozen=True)
class Pass:
    name: str
    level: int
    run: PassFn
    doc: str


PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass("fold-branches", 1, cleanup.fold_branches, cleanup.fold_branches.__doc__ or ""),
        Pass("dead-blocks", 1, cleanup.dead_blocks, cleanup.dead_blocks.__doc__ or ""),
        Pass("jump-threading", 1, cleanup.jump_threading, cleanup.jump_threading.__doc__ or ""),
        Pass("header-zeroing", 1, lifecycle.header_zeroing, lifecycle.header_zeroing.__doc__ or ""),
        Pass("fast-forward", 2, lifecycle.fast_forward, lifecycle.fast_forward.__doc__ or ""),
        Pass("fast-destroy", 2, lifecycle.fast_destroy, lifecycle.fast_destroy.__doc__ or ""),
        Pass("const-prop", 2, constprop.const_prop, constprop.const_prop.__doc__ or ""),
        Pass("tail-dup", 2, constprop.tail_dup, constprop.tail_dup.__doc__ or ""),
        Pass("cheap-first", 2, constprop.cheap_first, constprop.cheap_first.__doc__ or ""),
        Pass("dead-stores", 2, deadstore.dead_stores, deadstore.dead_stores.__doc__ or ""),
    )
}

# The pipeline: a name is one pass; a tuple is a group repeated until it changes nothing.
PIPELINE: list[str | tuple[str, ...]] = [
    ("fold-branches", "jump-threading", "dead-blocks"),
    "header-zeroing",
    "fast-forward",
    "fast-destroy",
    ("const-prop", "tail-dup", "fold-branches", "jump-threading", "dead-blocks"),
    "dead-stores",
    "cheap-first",
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
    "PIPELINE",
    "OptResult",
    "Pass",
    "PassError",
    "check_names",
    "describe",
    "optimize",
]
