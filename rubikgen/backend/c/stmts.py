"""C renderers of statements and the self-loop (Assign, SetSdu, LoopDecide, Reenter)."""

from __future__ import annotations

from rubikgen.expr.ast import unparse
from rubikgen.ir import instrs as I

from ..cexpr import cond_to_c, stmt_to_c, to_c
from ..context import CContext
from ..layer_c import LayerC, c_comment
from .registry import C


@C.register(I.Assign)
def assign(ins: I.Assign, lc: LayerC, cx: CContext) -> str:
    return stmt_to_c(ins.stmt, lc.env())


@C.register(I.SetSdu)
def set_sdu(ins: I.SetSdu, lc: LayerC, cx: CContext) -> str:
    return f"sdu_{lc.name} = {to_c(ins.value, lc.env()).text};"


@C.register(I.LoopDecide)
def loop_decide(ins: I.LoopDecide, lc: LayerC, cx: CContext) -> str:
    c = ins.cond
    n = lc.name
    if c is None or c.expr is None:
        s = f"loop_{n} = 1;"
    else:
        s = f"loop_{n} = ({cond_to_c(c.expr, lc.env())}) ? 1u : 0u; /* {c_comment(unparse(c.expr))} */"
    inp = ins.input
    # the next pass's input: the sdu, or the edge's `input` (evaluated now: the instance
    # may be destroyed before the self-loop runs)
    src = to_c(inp, lc.env()).text if inp is not None else f"sdu_{n}"
    return s + f"\nlin_{n} = {src};"


@C.register(I.Reenter)
def reenter(ins: I.Reenter, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    return f"in_{n} = lin_{n};\nrep_{n}++;"
