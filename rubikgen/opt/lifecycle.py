"""Instance and sequence life-cycle passes: the peephole patterns of the Rubik paper (R9.4)
made safe for every packet order, plus header initialisation.

* fast-forward: a segment that lands exactly at the assembled offset of an empty sequence is
  referenced, not copied (``RG_SEQ_BORROW``); if nothing assembles it during the packet, the
  layer's exit copies it (``rg_seq_settle``). An in-order TCP segment or a whole IPv4 datagram
  then costs no copy and no allocation, and ``assemble()`` hands the payload through (the
  paper's Fast Forward and Direct Fast Forward, with the same observable result).
* fast-destroy: an instance a packet creates lives in the layer's scratch record until the
  layer exits; if the PSM reached an accept state by then it is closed there and never touches
  the instance table (a non-fragmented IPv4 datagram: no insert, no delete), otherwise it is
  committed into the table (the paper's Fast Destroy).
* header-zeroing: only fields of layouts that may be skipped (under an ``if`` or in an
  ``any_until``) are cleared when a layer starts; the others are always written by the parse
  before anything reads them, or the layer ends with an error.
"""

from __future__ import annotations

from typing import TypeVar

from rubikgen.ir import Program
from rubikgen.ir.instrs import Create, Destroy, Enter, Finish, InsertSeq, Instr, Reenter
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
            fin = Finish(
                layer=layer,
                reads=frozenset({f"INST:{layer}", f"SEQ:{layer}"}),
                writes=frozenset({f"INST:{layer}", f"SEQ:{layer}", "RUNTIME"}),
            )
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


def fast_forward(prog: Program) -> bool:
    """In-order data into an empty sequence is referenced, not copied (settled at exit)."""
    changed = False
    for ins in _instrs(prog, InsertSeq):
        if not ins.borrow:
            ins.borrow = True
            changed = True
        changed = _finish(prog, ins.layer, settle=True) or changed
    return changed


def fast_destroy(prog: Program) -> bool:
    """Instances created and destroyed by the same packet never enter the instance table."""
    changed = False
    destroying = {i.layer for i in _instrs(prog, Destroy)}
    for ins in _instrs(prog, Create):
        if ins.layer not in destroying or ins.lazy:
            continue
        ins.lazy = True
        for d in _instrs(prog, Destroy):
            if d.layer == ins.layer:
                d.lazy = True
        _finish(prog, ins.layer, commit=True)
        changed = True
    return changed


def header_zeroing(prog: Program) -> bool:
    """Clear only the header fields of layouts a packet may skip."""
    changed = False
    for ins in _instrs(prog, Enter):
        if ins.zero != "conditional":
            ins.zero = "conditional"
            changed = True
    return changed
