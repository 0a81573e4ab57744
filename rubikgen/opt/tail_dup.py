"""tail-dup (branch lifting): a join block whose branch would fold on one incoming path is
copied onto that path, so the decision is taken where the facts are known — the created
instance's path learns its start state, each PSM transition learns which events its firing
implies. Bounded: copied blocks are small and a layer grows by at most ``BUDGET``
instructions."""

from __future__ import annotations

import copy

from rubikgen.ir import Program
from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import Block, Branch, Call, Jump

from .facts import Facts, _context, _Ctx, _preds, analyse, block_out, decide, edge_facts
from .registry import register

BUDGET = 64  # instructions a layer may gain by tail duplication
MAX_COPY = 8  # instructions of a block that may be copied


def _weight(b: Block) -> int:
    return sum(4 if isinstance(i, I.Handler | I.Callback) else 1 for i in b.instrs)


def _folds_ahead(ctx: _Ctx, f: Facts, prog: Program, b: Block, depth: int = 3) -> bool:
    """Whether, entering b with facts f, a branch is decided or its condition shrinks within
    `depth` jump-linked blocks (the first of them is the one worth copying)."""
    for _ in range(depth):
        f = block_out(ctx, f, b)
        t = b.term
        if isinstance(t, Branch):
            arm, s = decide(ctx, f, t)
            return arm is not None or (s is not None and s != t.cond.expr)
        if not isinstance(t, Jump) or t.target in ctx.entries:
            return False
        b = prog.blocks[t.target]
    return False


@register("tail-dup", level=2)
def tail_dup(prog: Program) -> bool:
    """Branch lifting: a small join block that leads to a branch which folds on one incoming
    path is copied onto that path (within a per-layer budget), so that const-prop can decide
    the branch there."""
    ctx = _context(prog)
    facts = analyse(ctx)
    preds = _preds(prog)
    spent = prog.dup_spent
    changed = False
    for name in list(prog.blocks):
        b = prog.blocks.get(name)
        if b is None or name in ctx.entries or not isinstance(b.term, (Branch, Jump)):
            continue
        if len(preds[name]) < 2 or _weight(b) > MAX_COPY:
            continue
        for p, arm in preds[name]:
            pb = prog.blocks[p]
            if p not in facts:
                continue
            f = block_out(ctx, facts[p], pb)
            if arm is not None and isinstance(pb.term, Branch):
                f = edge_facts(ctx, f, pb.term, arm)
            if not _folds_ahead(ctx, f, prog, b):
                continue
            if spent.get(b.layer, 0) + _weight(b) > BUDGET:
                continue
            clone = Block(_fresh(prog, name), b.layer, copy.deepcopy(b.instrs),
                          copy.deepcopy(b.term), b.src)  # fmt: skip
            prog.add(clone)
            spent[b.layer] = spent.get(b.layer, 0) + max(1, _weight(b))
            t = pb.term
            if isinstance(t, Jump):
                t.target = clone.name
            elif isinstance(t, Branch):
                if arm:
                    t.then = clone.name
                else:
                    t.else_ = clone.name
            elif isinstance(t, Call):
                lir = prog.layers[t.child]
                lir.callers = [(c, clone.name if c == p else r) for c, r in lir.callers]
                t.ret = clone.name
            changed = True
    return changed


def _fresh(prog: Program, name: str) -> str:
    i = 1
    while f"{name}.d{i}" in prog.blocks:
        i += 1
    return f"{name}.d{i}"
