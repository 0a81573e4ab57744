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
from rubikgen.ir.nodes import Branch, Instr

from .registry import register


def _reads(prog: Program) -> set[tuple[str, str]]:
    """(kind, name) of every temp/perm/event a condition or spec expression may read."""
    names = set(prog.read_names)
    for b in prog.blocks.values():
        exprs = []
        if isinstance(b.term, Branch) and b.term.cond.expr is not None:
            exprs.append(b.term.cond.expr)
        for ins in b.instrs:
            for k in ("expr", "value"):
                if k in ins.args and ins.args[k] is not None and not isinstance(ins.args[k], str):
                    exprs.append(ins.args[k])
            if ins.op == "assign":
                exprs.append(ins.args["stmt"].value)
            c = ins.args.get("cond")
            if c is not None and getattr(c, "expr", None) is not None:
                exprs.append(c.expr)
        for e in exprs:
            names |= {n.parts for n in walk(e) if isinstance(n, Name)}
    out = set()
    for parts in names:
        for i in range(len(parts) - 1):
            if parts[i] in ("temp", "perm", "event"):
                out.add((parts[i], parts[i + 1]))
    return out


def _dead(ins: Instr, live: set[tuple[str, str]]) -> bool:
    if ins.op == "assign":
        t = ins.args["stmt"].target.parts
        return len(t) >= 2 and t[-2] in ("temp", "perm") and (t[-2], t[-1]) not in live
    if ins.op == "fire":
        return ("event", ins.args["event"]) not in live
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
            if i.op == "insert_seq":
                ev = [e for e in SEQ_FLAGS if ("event", e) in live]
                if i.args.get("events") != ev:
                    i.args["events"] = ev
                    changed = True
            elif i.op == "create":
                c = ("event", "created") in live
                if i.args.get("flag_created") != c:
                    i.args["flag_created"] = c
                    changed = True
    return changed
