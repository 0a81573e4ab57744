"""fold-branches: constant branches become jumps."""

from __future__ import annotations

from rubikgen.expr.fold import is_const
from rubikgen.ir import Program
from rubikgen.ir.nodes import Branch, Jump

from .registry import register


@register("fold-branches", level=1)
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
