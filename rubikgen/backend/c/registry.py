"""The C target's renderer registry (filled by the family modules of this package)."""

from __future__ import annotations

from rubikgen.ir.nodes import Instr

from ..context import CContext
from ..layer_c import LayerC
from ..registry import Registry

#: IR class -> its C renderer: `(node, LayerC, CContext) -> str` for an instruction, a list
#: of lines for a terminator (terms.py).
C: Registry[CContext] = Registry("c")


def render_instr(ins: Instr, lc: LayerC | None, cx: CContext) -> str:
    """One instruction in C (its renderer's text; lc None for the exit's, of no layer)."""
    text: str = C.render(ins, lc, cx)
    return text


__all__ = ["C", "render_instr"]
