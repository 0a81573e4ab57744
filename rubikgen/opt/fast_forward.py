"""fast-forward, one of the peephole patterns of the Rubik paper (R9.4) made safe for every
packet order: a segment that lands exactly at the assembled offset of an empty sequence is
referenced, not copied (``RG_SEQ_BORROW``); if nothing assembles it during the packet, the
layer's exit copies it (``rg_seq_settle``). An in-order TCP segment or a whole IPv4 datagram
then costs no copy and no allocation, and ``assemble()`` hands the payload through (the
paper's Fast Forward and Direct Fast Forward, with the same observable result)."""

from __future__ import annotations

from rubikgen.ir import Program
from rubikgen.ir.instrs import InsertSeq

from .lifecycle_util import _finish, _instrs
from .registry import register


@register("fast-forward", level=2)
def fast_forward(prog: Program) -> bool:
    """In-order data into an empty sequence is referenced, not copied (settled at exit)."""
    changed = False
    for ins in _instrs(prog, InsertSeq):
        if not ins.borrow:
            ins.borrow = True
            changed = True
        changed = _finish(prog, ins.layer, settle=True) or changed
    return changed
