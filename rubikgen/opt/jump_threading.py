"""jump-threading: jumps through empty blocks go straight to their final target."""

from __future__ import annotations

from rubikgen.ir import Program
from rubikgen.ir.nodes import Branch, Call, Jump

from .registry import register


def _final(prog: Program, name: str, entries: set[str]) -> str:
    """Follow empty blocks that only jump on, stopping at layer entries and cycles."""
    seen = {name}
    while True:
        b = prog.blocks[name]
        if b.instrs or not isinstance(b.term, Jump) or name in entries:
            return name
        nxt = b.term.target
        if nxt in seen:
            return name
        seen.add(nxt)
        name = nxt


@register("jump-threading", level=1)
def jump_threading(prog: Program) -> bool:
    """Every jump, branch arm and return target that leads to an empty block which only jumps
    on is pointed at the final target."""
    entries = {lir.entry for lir in prog.layers.values()}
    changed = False
    for b in prog.blocks.values():
        t = b.term
        if isinstance(t, Jump):
            f = _final(prog, t.target, entries)
            if f != t.target:
                t.target, changed = f, True
        elif isinstance(t, Branch):
            for arm in ("then", "else_"):
                cur = getattr(t, arm)
                f = _final(prog, cur, entries)
                if f != cur:
                    setattr(t, arm, f)
                    changed = True
        elif isinstance(t, Call):
            f = _final(prog, t.ret, entries)
            if f != t.ret:
                lir = prog.layers[t.child]
                lir.callers = [(c, f if c == b.name else r) for c, r in lir.callers]
                t.ret, changed = f, True
    return changed
