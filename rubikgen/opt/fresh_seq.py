"""fresh-seq: an insert into the sequence of an instance this packet created in the scratch
record (fast-destroy) finds every sequence of that instance fresh (all zero), when no other
instruction wrote a sequence of the layer on the way. The backend then inserts with
``rg_seq_insert_fresh``: none of the sequence state tests of ``rg_seq_insert``, and the insert's
statistics reduced to the two counters an in-order segment changes (the general insert when
its preconditions do not hold)."""

from __future__ import annotations

from rubikgen.ir import Program
from rubikgen.ir.instrs import Create, Enter, InsertSeq, Instr
from rubikgen.ir.nodes import Block

from .registry import register


def _step(s: set[str], ins: Instr) -> None:
    L = ins.layer
    if isinstance(ins, Enter):
        s.discard(L)
    elif isinstance(ins, Create):
        # only the scratch record is known zeroed here (rg_zero in the lazy create)
        (s.add if ins.lazy else s.discard)(L)
    elif f"SEQ:{L}" in ins.writes:
        s.discard(L)


def _out(b: Block, fresh: frozenset[str]) -> frozenset[str]:
    s = set(fresh)
    for ins in b.instrs:
        _step(s, ins)
    return frozenset(s)


def fresh_at(prog: Program) -> dict[str, frozenset[str]]:
    """Layers whose instance is fresh at the start of every block: a must-analysis (the
    intersection over predecessors), layer entries and unreached blocks knowing nothing."""
    preds: dict[str, list[str]] = {n: [] for n in prog.blocks}
    for n, b in prog.blocks.items():
        for s in b.successors():
            if s in preds:
                preds[s].append(n)
    entries = {lir.entry for lir in prog.layers.values()}
    outs: dict[str, frozenset[str]] = {}
    ins_: dict[str, frozenset[str]] = {}
    for _ in range(4 * len(prog.blocks) + 8):
        changed = False
        for n, b in prog.blocks.items():
            acc: frozenset[str] | None = None
            if n not in entries:
                for p in preds[n]:
                    if p in outs:  # not reached yet: optimistic
                        acc = outs[p] if acc is None else acc & outs[p]
            fin = acc or frozenset()
            if ins_.get(n) != fin or n not in outs:
                ins_[n] = fin
                outs[n] = _out(b, fin)
                changed = True
        if not changed:
            break
    return ins_


@register("fresh-seq", level=2)
def fresh_seq(prog: Program) -> bool:
    """Inserts into the fresh sequences of an instance created by the packet use the fast form."""
    at = fresh_at(prog)
    changed = False
    for n, b in prog.blocks.items():
        s = set(at.get(n, frozenset()))
        for ins in b.instrs:
            if isinstance(ins, InsertSeq):
                want = ins.layer in s
                if ins.fresh != want:
                    ins.fresh = want
                    changed = True
            _step(s, ins)
    return changed
