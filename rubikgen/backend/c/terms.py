"""C renderers of block terminators (Jump, Branch, Call, Return, Done) and of the conditions
branches test. A terminator's renderer takes the block it ends (a Call's return id is the call
block's) and returns the lines after the block's braces."""

from __future__ import annotations

from rubikgen.ir.cond import Cond
from rubikgen.ir.nodes import Block, Branch, Call, Done, Jump, Return

from ..cexpr import cond_to_c
from ..context import CContext, label
from ..layer_c import LayerC
from .registry import C


@C.register(Jump)
def jump(t: Jump, b: Block, cx: CContext) -> list[str]:
    return [f"goto {label(t.target)};"]


@C.register(Branch)
def branch(t: Branch, b: Block, cx: CContext) -> list[str]:
    c = cond(cx, t.cond, cx.layers[t.layer])
    return [f"if ({c}) goto {label(t.then)};", f"goto {label(t.else_)};"]


@C.register(Call)
def call(t: Call, b: Block, cx: CContext) -> list[str]:
    child = cx.layers[t.child]
    k = cx.ret_ids[t.child][b.name]
    gap: list[str] = []
    if child.d.frame is not None:  # framing: did the bytes handed on skip a hole?
        parent = cx.layers[t.layer]
        held = f"sres_{t.layer}.ngaps != 0u" if parent.has_seq else "0"
        gap = [f"gin_{t.child} = {held};"]
    return [
        *gap,
        f"in_{t.child} = sdu_{t.layer};",
        f"ret_{t.child} = {k};",
        f"rep_{t.child} = 0;",
        f"goto {label(cx.prog.layers[child.name].entry)};",
    ]


@C.register(Return)
def return_(t: Return, b: Block, cx: CContext) -> list[str]:
    return return_to_caller(cx, t.layer)


@C.register(Done)
def done(t: Done, b: Block, cx: CContext) -> list[str]:
    return ["goto R_done;"]


def term(cx: CContext, b: Block) -> list[str]:
    """The lines ending block b (its terminator's renderer)."""
    if b.term is None:
        raise ValueError(f"block {b.name} is not terminated")
    lines: list[str] = C.render(b.term, b, cx)
    return lines


def return_to_caller(cx: CContext, layer: str) -> list[str]:
    """The layer returns to the layer that called it (its emulated return address)."""
    lir = cx.prog.layers[layer]
    if cx.opt >= 1 and len(lir.callers) == 1 and layer not in cx.prog.entries.values():
        # one call site and no entry: the return address is a constant (gtp's udp, ip2
        # and tcp; tcp_ip's tcp), no dispatch on ret_
        return [f"goto {label(lir.callers[0][1])}; /* the one caller */"]
    out = [f"switch (ret_{layer}) {{"]
    for i, (_call, ret) in enumerate(lir.callers):
        out.append(f"case {i + 1}: goto {label(ret)};")
    out.append("default: goto R_done;")
    out.append("}")
    return out


def cond(cx: CContext, c: Cond, lc: LayerC) -> str:
    """A branch condition in C."""
    n = lc.name
    if c.kind == "parse_ok":
        return f"err_{n} == 0"
    if c.kind == "found":
        return f"inst_{n} != NULL"
    if c.kind == "has_inst":
        return f"has_inst_{n}"
    if c.kind == "accept":
        acc = " || ".join(f"inst_{n}->fi.state == {s}" for s in lc.d.accept)
        return f"has_inst_{n} && ({acc})"
    if c.kind == "loop":
        mr = cx.max_repeat.get(lc.name, 0)
        return f"loop_{n} && rep_{n} < {mr}u"
    assert c.expr is not None
    return cond_to_c(c.expr, lc.env())
