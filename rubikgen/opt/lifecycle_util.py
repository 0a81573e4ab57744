"""Helpers of the instance and sequence life-cycle passes (fast-forward, fast-destroy): where a
layer is left, and the ``finish`` instruction placed there."""

from __future__ import annotations

from typing import TypeVar

from rubikgen.ir import Program
from rubikgen.ir.instrs import Finish, Instr, Reenter
from rubikgen.ir.nodes import Block, Return

T = TypeVar("T", bound=Instr)


def _exits(prog: Program, layer: str) -> list[tuple[Block, bool]]:
    """Blocks where the layer is left: (block, at_start) — at the end of blocks returning, at
    the start of the self-loop block (before the sdu becomes the next pass's input)."""
    out = []
    for b in prog.blocks.values():
        if b.layer != layer:
            continue
        if isinstance(b.term, Return):
            out.append((b, False))
        elif any(isinstance(i, Reenter) for i in b.instrs):
            out.append((b, True))
    return out


def _finish(prog: Program, layer: str, **flags: bool) -> bool:
    """Set flags on the layer's `finish` instructions, adding them at every exit."""
    changed = False
    for b, at_start in _exits(prog, layer):
        fin = next((i for i in b.instrs if isinstance(i, Finish)), None)
        if fin is None:
            fin = Finish.make(layer)  # its declared effects (ir/instrs.py)
            if at_start:
                b.instrs.insert(0, fin)
            else:
                b.instrs.append(fin)
            changed = True
        for k, v in flags.items():
            if getattr(fin, k) != v:
                setattr(fin, k, v)
                changed = True
    return changed


def _instrs(prog: Program, cls: type[T]) -> list[T]:
    return [i for b in prog.blocks.values() for i in b.instrs if isinstance(i, cls)]
