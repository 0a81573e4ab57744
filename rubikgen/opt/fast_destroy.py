"""fast-destroy (the Fast Destroy of the Rubik paper, R9.4): an instance a packet creates lives
in the layer's scratch record until the layer exits; if the PSM reached an accept state by then
it is closed there and never touches the instance table (a non-fragmented IPv4 datagram: no
insert, no delete), otherwise it is committed into the table."""

from __future__ import annotations

from rubikgen.ir import Program
from rubikgen.ir.instrs import Create, Destroy

from .lifecycle_util import _finish, _instrs
from .registry import register


@register("fast-destroy", level=2)
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
