"""cheap-first: the operands of && and || in branch conditions are reordered cheapest first."""

from __future__ import annotations

from dataclasses import replace

from rubikgen.expr import build as X
from rubikgen.expr.ast import Binary, Expr, Name, Unary, unparse
from rubikgen.ir import Program
from rubikgen.ir.nodes import Branch, Cond

from .facts import _conjuncts, _disjuncts
from .registry import register


def _cost(e: Expr) -> int:
    """Rough cost of evaluating e: a virtual atom is a call into the sequence, the rest is
    loads and compares."""
    from rubikgen.expr.ast import walk

    return sum(10 if isinstance(n, Name) and n.parts[0] == "__v" else 1 for n in walk(e))


def _reorder(e: Expr) -> Expr:
    if isinstance(e, Binary) and e.op in ("&&", "||"):
        ops = [_reorder(x) for x in (_conjuncts(e) if e.op == "&&" else _disjuncts(e))]
        ops = sorted(ops, key=_cost)  # stable: equal costs keep the spec's order
        out = ops[0]
        for x in ops[1:]:
            out = X.binary(e.op, out, x)
        return out
    if isinstance(e, Unary):
        return replace(e, operand=_reorder(e.operand))
    return e


@register("cheap-first", level=2)
def cheap_first(prog: Program) -> bool:
    """Operands of && and || in branch conditions are tested cheapest first (expressions have
    no side effects, so the order does not change the value): a virtual atom, which asks the
    sequence, is evaluated only when the cheap tests do not already decide."""
    changed = False
    for b in prog.blocks.values():
        t = b.term
        if isinstance(t, Branch) and t.cond.kind == "expr" and t.cond.expr is not None:
            r = _reorder(t.cond.expr)
            if r != t.cond.expr:
                t.cond = Cond(t.cond.kind, r, unparse(r))
                changed = True
    return changed
