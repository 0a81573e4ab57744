"""header-zeroing: only fields of layouts that may be skipped (under an ``if`` or in an
``any_until``) are cleared when a layer starts; the others are always written by the parse
before anything reads them, or the layer ends with an error."""

from __future__ import annotations

from rubikgen.ir import Program
from rubikgen.ir.instrs import Enter

from .lifecycle_util import _instrs
from .registry import register


@register("header-zeroing", level=1)
def header_zeroing(prog: Program) -> bool:
    """Clear only the header fields of layouts a packet may skip."""
    changed = False
    for ins in _instrs(prog, Enter):
        if ins.zero != "conditional":
            ins.zero = "conditional"
            changed = True
    return changed
