"""Control-flow clean-up passes: constant branches, empty jump blocks, unreachable blocks."""

from __future__ import annotations

from rubikgen.expr.check import is_const
from rubikgen.ir import Program, prune
from rubikgen.ir.nodes import Branch, Call, Jump


def fold_branches(prog: Program) -> bool:
    """Branches whose condition is a constant, or whose arms agree, become jumps to the arm
    that is taken (the successor of the arm the constant selects, never the other one)."""
    changed = False
    for b in prog.blocks.values():
        t = b.term
        if not isinstance(t, Branch):
            continue
        if t.then == t.else_:
            b.term = Jump(t.then)
            changed = True
            continue
        if t.cond.kind in ("expr", "create_if") and t.cond.expr is not None:
            k = is_const(t.cond.expr)
            if k is not None:
                b.term = Jump(t.then if k else t.else_)
                changed = True
    return changed


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


def dead_blocks(prog: Program) -> bool:
    """Blocks that no entry reaches are removed."""
    return prune(prog) > 0
