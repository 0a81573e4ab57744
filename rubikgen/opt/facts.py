"""Constant analysis over the CFG: the facts const-prop and tail-dup decide branches with.

Facts are what a block knows about its layer's per-packet registers and instance when it
starts: the PSM state (``current_state``), which transition fired (``psm.T``), which events
fired (``event.E``) and whether the packet has an instance (``has_inst``). Instructions set
and kill them (``enter`` clears the fired flags, ``create`` sets the start state, a transition
its target, ``insert_seq`` makes the sequence events unknown, ...), and so do taken branches:
the arm of ``current_state == ESTABLISHED && header.fin`` knows the state, the else arm of
``event.asm || x`` knows ``event.asm`` is 0. Facts meet (agree or are dropped) where paths join.

Handlers, callbacks and observers may not change the PSM state or the fired flags (they are
read-only views of the instance), so they kill no fact; a child layer cannot touch them
either, so facts survive a call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from rubikgen.expr import build as X
from rubikgen.expr.ast import Binary, Bool, Expr, Name, Unary
from rubikgen.expr.fold import is_const
from rubikgen.ir import Program
from rubikgen.ir import instrs as I
from rubikgen.ir.instrs import Instr
from rubikgen.ir.nodes import Block, Branch, Call, Jump

# (kind, layer[, name]) -> value; a value of None is "unknown" and overrides the wildcards
# ("ev*", layer) (every event flag) and ("psm", layer) (the fired transition, 0 for none).
Fact = tuple[str, ...]
Facts = dict[Fact, int | None]

SEQ_EVENTS = ("rexmit", "out_of_wnd", "overlap", "buffer_full")


class _Ctx:
    """What the analysis needs to know about the program beyond the blocks."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.tid: dict[tuple[str, str], int] = {}  # (layer, transition) -> id
        for b in prog.blocks.values():
            for ins in b.instrs:
                if isinstance(ins, I.SetState):
                    self.tid[(ins.layer, ins.name)] = ins.transition
        psm = {L: lir for L, lir in prog.layers.items() if lir.start is not None}
        self.states = {L: lir.states for L, lir in psm.items()}
        self.start = {L: lir.start for L, lir in psm.items()}
        self.accept = {L: lir.accept for L, lir in psm.items()}
        self.entries = {lir.entry for lir in prog.layers.values()}


def _get(f: Facts, key: Fact) -> int | None:
    if key in f:
        return f[key]
    if key[0] == "ev":
        return f.get(("ev*", key[1]))
    return None


def _clear_layer(f: Facts, layer: str) -> None:
    for k in [k for k in f if k[1] == layer]:
        del f[k]


# ---------------------------------------------------------------------------------------------
# Transfer functions


def transfer(ctx: _Ctx, f: Facts, ins: Instr) -> None:
    L = ins.layer
    match ins:
        case I.Enter():
            _clear_layer(f, L)
            f[("psm", L)] = 0
            f[("ev*", L)] = 0
            f[("has_inst", L)] = 0
        case I.Lookup():
            f[("has_inst", L)] = None
        case I.Create():
            f[("has_inst", L)] = 1 if ins.lazy else None
            if L in ctx.start:
                f[("state", L)] = ctx.start[L]
            f[("ev", L, "created")] = 1
        case I.NoInstance():
            f[("has_inst", L)] = 0
            f[("state", L)] = None
        case I.InsertSeq():
            for e in SEQ_EVENTS:
                f[("ev", L, e)] = None
        case I.Assemble():
            f[("ev", L, "gap")] = None  # gap recovery: raised when holes were skipped
        case I.SetState():
            f[("state", L)] = ins.state
            f[("psm", L)] = ins.transition
        case I.Fire():
            f[("ev", L, ins.event)] = 1
        case I.Fail():
            f[("ev", L, "fail")] = 1
            if ins.policy == "reset":
                f[("state", L)] = ins.start
        case I.Destroy():
            f[("has_inst", L)] = 0
            f[("state", L)] = None
        case I.Finish() if ins.commit:
            f[("has_inst", L)] = None  # the commit may fail (pool full)


def _conjuncts(e: Expr) -> Iterator[Expr]:
    if isinstance(e, Binary) and e.op == "&&":
        yield from _conjuncts(e.left)
        yield from _conjuncts(e.right)
    else:
        yield e


def _disjuncts(e: Expr) -> Iterator[Expr]:
    if isinstance(e, Binary) and e.op == "||":
        yield from _disjuncts(e.left)
        yield from _disjuncts(e.right)
    else:
        yield e


def _learn(ctx: _Ctx, f: Facts, L: str, atom: Expr, value: bool) -> None:
    """Record what `atom` being true (value) or false says about the layer's registers."""
    if isinstance(atom, Unary) and atom.op == "!":
        _learn(ctx, f, L, atom.operand, not value)
        return
    if isinstance(atom, Name) and len(atom.parts) == 2:
        kind, name = _kind(atom), atom.parts[1]
        if kind == "event":
            f[("ev", L, name)] = int(value)
        elif kind == "transition" and value and (L, name) in ctx.tid:
            f[("psm", L)] = ctx.tid[(L, name)]
        return
    if isinstance(atom, Binary) and atom.op in ("==", "!=") and value == (atom.op == "=="):
        a, b = atom.left, atom.right
        if isinstance(b, Name) and b.parts == ("current_state",):
            a, b = b, a
        if isinstance(a, Name) and a.parts == ("current_state",):
            k = _state_value(ctx, L, b)
            if k is not None:
                f[("state", L)] = k


def _kind(e: Expr) -> str | None:
    """What sema bound a name to (expr.types.Resolved.kind)."""
    return e.ref.kind if isinstance(e, Name) and e.ref is not None else None


def _state_value(ctx: _Ctx, L: str, e: Expr) -> int | None:
    if isinstance(e, Name) and _kind(e) == "state" and e.parts[0] in ctx.states.get(L, []):
        return ctx.states[L].index(e.parts[0])
    return is_const(e)


def edge_facts(ctx: _Ctx, f: Facts, t: Branch, taken: bool) -> Facts:
    """The facts along one arm of a branch."""
    g = dict(f)
    L = t.layer
    c = t.cond
    if c.kind in ("found", "has_inst"):
        g[("has_inst", L)] = int(taken)
    elif c.kind == "accept" and taken and len(ctx.accept.get(L, [])) == 1:
        g[("state", L)] = ctx.accept[L][0]
        g[("has_inst", L)] = 1
    elif c.kind == "expr" and c.expr is not None:
        if taken:
            for a in _conjuncts(c.expr):
                _learn(ctx, g, L, a, True)
        else:
            for a in _disjuncts(c.expr):
                _learn(ctx, g, L, a, False)
    return g


# ---------------------------------------------------------------------------------------------
# Simplification of conditions under facts


def _is_bool(e: Expr) -> bool:
    if isinstance(e, Unary) and e.op == "!":
        return True
    if isinstance(e, Binary) and e.op in ("&&", "||", "==", "!=", "<", "<=", ">", ">="):
        return True
    return isinstance(e, Name) and len(e.parts) == 2 and _kind(e) in ("event", "transition")


def _truth(e: Expr) -> Expr:
    return e if _is_bool(e) else X.unary("!", X.unary("!", e))


def simplify(ctx: _Ctx, f: Facts, L: str, e: Expr) -> Expr:
    """e with known names replaced by their values and constant parts folded (expressions have
    no side effects, so a constant operand of && or || decides or drops the other one)."""
    if isinstance(e, Name):
        p = e.parts
        kind = _kind(e)
        if p == ("current_state",):
            v = _get(f, ("state", L))
            return X.num(v) if v is not None else e
        k = _state_value(ctx, L, e)
        if k is not None:
            return X.num(k)
        if len(p) == 2 and kind == "event":
            v = _get(f, ("ev", L, p[1]))
            return X.num(v) if v is not None else e
        if len(p) == 2 and kind == "transition" and (L, p[1]) in ctx.tid:
            v = _get(f, ("psm", L))
            return X.num(int(v == ctx.tid[(L, p[1])])) if v is not None else e
        return e
    if isinstance(e, Unary):
        o = simplify(ctx, f, L, e.operand)
        n = replace(e, operand=o)
        k = is_const(n)
        return X.num(k) if k is not None else n
    if isinstance(e, Binary):
        a = simplify(ctx, f, L, e.left)
        b = simplify(ctx, f, L, e.right)
        ka, kb = is_const(a), is_const(b)
        if e.op in ("&&", "||"):
            short = 0 if e.op == "&&" else 1  # the operand value that decides
            for k, other in ((ka, b), (kb, a)):
                if k is None:
                    continue
                if bool(k) == bool(short):
                    return X.num(short)
                return (
                    X.num(int(bool(is_const(other))))
                    if is_const(other) is not None
                    else _truth(other)
                )
        nb = replace(e, left=a, right=b)
        k = is_const(nb)
        return X.num(k) if k is not None else nb
    if isinstance(e, Bool):
        return X.num(int(e.value))
    return e


def decide(ctx: _Ctx, f: Facts, t: Branch) -> tuple[bool | None, Expr | None]:
    """(the arm a branch takes under the facts or None, the simplified expression if any)."""
    L = t.layer
    c = t.cond
    if c.kind == "has_inst":
        v = _get(f, ("has_inst", L))
        return (None if v is None else bool(v)), None
    if c.kind == "accept":
        if _get(f, ("has_inst", L)) == 0:
            return False, None
        s = _get(f, ("state", L))
        if s is not None and _get(f, ("has_inst", L)) == 1:
            return s in ctx.accept.get(L, []), None
        return None, None
    if c.kind == "expr" and c.expr is not None:
        se = simplify(ctx, f, L, c.expr)
        k = is_const(se)
        return (None if k is None else bool(k)), se
    return None, None


# ---------------------------------------------------------------------------------------------
# The analysis


def _preds(prog: Program) -> dict[str, list[tuple[str, bool | None]]]:
    """block -> [(predecessor, arm)]: arm True/False for a branch, None for a jump or call."""
    out: dict[str, list[tuple[str, bool | None]]] = {n: [] for n in prog.blocks}
    for b in prog.blocks.values():
        t = b.term
        if isinstance(t, Jump):
            out[t.target].append((b.name, None))
        elif isinstance(t, Branch):
            out[t.then].append((b.name, True))
            out[t.else_].append((b.name, False))
        elif isinstance(t, Call):
            out[t.ret].append((b.name, None))
    return out


def _meet(a: Facts | None, b: Facts) -> Facts:
    if a is None:
        return dict(b)
    keys = set(a) | set(b)
    out: Facts = {}
    for k in keys:
        va = a[k] if k in a else _get(a, k)
        vb = b[k] if k in b else _get(b, k)
        if va is not None and va == vb:
            out[k] = va
        elif k[0] == "ev" and (("ev*", k[1]) in a or ("ev*", k[1]) in b):
            out[k] = None  # an explicit unknown, so a wildcard kept elsewhere does not apply
    return out


def block_out(ctx: _Ctx, f: Facts, b: Block) -> Facts:
    g = dict(f)
    for ins in b.instrs:
        transfer(ctx, g, ins)
    return g


def analyse(ctx: _Ctx) -> dict[str, Facts]:
    """Facts at the start of every block (a forward data-flow problem solved to a fixpoint;
    layer entries start knowing nothing)."""
    prog = ctx.prog
    preds = _preds(prog)
    facts_in: dict[str, Facts] = {}
    outs: dict[str, Facts] = {}
    order = list(prog.blocks)
    for _ in range(4 * len(order) + 8):
        changed = False
        for n in order:
            b = prog.blocks[n]
            if n in ctx.entries:
                fin: Facts = {}
            else:
                acc: Facts | None = None
                for p, arm in preds[n]:
                    if p not in outs:
                        continue  # not reached yet: optimistic
                    pt = prog.blocks[p].term
                    pf = outs[p]
                    if arm is not None and isinstance(pt, Branch):
                        pf = edge_facts(ctx, pf, pt, arm)
                    acc = _meet(acc, pf)
                fin = acc or {}
            if facts_in.get(n) != fin or n not in outs:
                facts_in[n] = fin
                outs[n] = block_out(ctx, fin, b)
                changed = True
        if not changed:
            return facts_in
    # not converged (cannot happen: apart from layer entries the graph is acyclic): know nothing
    return {n: {} for n in order}


def _context(prog: Program) -> _Ctx:
    return _Ctx(prog)


__all__ = ["analyse", "block_out", "decide", "edge_facts", "simplify", "transfer"]
