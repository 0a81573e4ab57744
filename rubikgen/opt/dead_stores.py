"""Dead-store elimination: updates of per-packet registers nothing reads.

A ``temp.X`` or ``perm.X`` assignment is dead when no expression of any spec in the stack
reads a variable of that kind and name (through any binding: the test is by name, so it
errs on keeping); a ``fire`` of an event or handler flag is dead when no condition reads
``event.E``. Commands (assemble, callbacks, handlers, ...) are never removed, so what a
dead event's ``do:`` does still happens; only the flag store goes.
"""

from __future__ import annotations

from rubikgen.expr.ast import Name, walk
from rubikgen.ir import Program
from rubikgen.ir.instrs import Assign, Create, Fire, InsertSeq, Instr
from rubikgen.ir.nodes import Branch

from .registry import register


def _reads(prog: Program) -> set[tuple[str, str]]:
    """(kind, name) of every temp/perm/event a condition or spec expression may read."""
    names = set(prog.read_names)
    for b in prog.blocks.values():
        exprs = []
        if isinstance(b.term, Branch) and b.term.cond.expr is not None:
            exprs.append(b.term.cond.expr)
        for ins in b.instrs:
            exprs += ins.exprs()
        for e in exprs:
            names |= {n.parts for n in walk(e) if isinstance(n, Name)}
    out = set()
    for parts in names:
        for i in range(len(parts) - 1):
            if parts[i] in ("temp", "perm", "event"):
                out.add((parts[i], parts[i + 1]))
    return out


def _dead(ins: Instr, live: set[tuple[str, str]]) -> bool:
    if isinstance(ins, Assign):
        t = ins.stmt.target.parts
        return len(t) >= 2 and t[-2] in ("temp", "perm") and (t[-2], t[-1]) not in live
    if isinstance(ins, Fire):
        return ("event", ins.event) not in live
    return False


SEQ_FLAGS = ("rexmit", "out_of_wnd", "overlap", "buffer_full")


@register("dead-stores", level=2)
def dead_stores(prog: Program) -> bool:
    """Assignments to temp/perm variables and event flags that nothing reads are removed (the
    flags an insert or a creation raises are set only when read)."""
    live = _reads(prog)
    changed = False
    for b in prog.blocks.values():
        keep = [i for i in b.instrs if not _dead(i, live)]
        if len(keep) != len(b.instrs):
            b.instrs = keep
            changed = True
        for i in keep:
            if isinstance(i, InsertSeq):
                ev = [e for e in SEQ_FLAGS if ("event", e) in live]
                if i.events != ev:
                    i.events = ev
                    changed = True
            elif isinstance(i, Create):
                c = ("event", "created") in live
                if i.flag_created != c:
                    i.flag_created = c
                    changed = True
    return changed
