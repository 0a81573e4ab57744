"""const-prop: every branch condition is simplified under the facts that hold at the branch
(``facts.py``); one that becomes constant is a jump to the arm it selects (the other arm is
left to dead-blocks), one that only shrinks keeps the rest (``current_state == 0 && !mf`` with
the state known to be 0 tests ``!mf``)."""

from __future__ import annotations

from rubikgen.expr.ast import unparse
from rubikgen.ir import Program
from rubikgen.ir.nodes import Branch, Cond, Jump

from .facts import _context, analyse, block_out, decide
from .registry import register


@register("const-prop", level=2)
def const_prop(prog: Program) -> bool:
    """Branch conditions are simplified under the facts known where they are tested (the PSM
    state, fired transitions and events, whether there is an instance, including what taken
    branches imply); constant ones become jumps to the arm they select."""
    ctx = _context(prog)
    facts = analyse(ctx)
    changed = False
    for b in prog.blocks.values():
        t = b.term
        if not isinstance(t, Branch) or b.name not in facts:
            continue
        arm, s = decide(ctx, block_out(ctx, facts[b.name], b), t)
        if arm is not None:
            b.term = Jump(t.then if arm else t.else_)
            changed = True
        elif s is not None and t.cond.expr is not None and s != t.cond.expr:
            t.cond = Cond(t.cond.kind, s, unparse(s))
            changed = True
    return changed
