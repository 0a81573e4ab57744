"""IR invariants, checked after lowering and after every pass."""

from __future__ import annotations

from typing import Any

from rubikgen.expr.ast import Assign, CallStmt, Name, walk

from .instrs import ApplyRules, RuleRead
from .nodes import OPCODES, RESOURCE_KINDS, Branch, Call, Instr, Program, Return
from .rules import FieldRef, LayerRef


def unresolved(e: Any) -> str | None:
    """What in an expression or statement is not as sema resolves it (a node without a type,
    a name without a binding), or None: the back-end renders types, it does not infer them."""
    for n in walk(e):
        if isinstance(n, Name) and n.ref is None:
            return f"name {n.dotted!r} is not bound"
        if n.type is None and not isinstance(n, Assign | CallStmt):  # statements have none
            return f"node {type(n).__name__} has no type"
    return None


def reachable(prog: Program) -> set[str]:
    roots = [prog.layers[x].entry for x in set(prog.entries.values()) if x in prog.layers]
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        n = todo.pop()
        if n in seen or n not in prog.blocks:
            continue
        seen.add(n)
        b = prog.blocks[n]
        todo.extend(b.successors())
        if isinstance(b.term, Call):
            todo.append(prog.layers[b.term.child].entry)
    return seen


def prune(prog: Program) -> int:
    """Remove blocks no entry reaches; drop call sites that went with them."""
    live = reachable(prog)
    dead = [n for n in prog.blocks if n not in live]
    for n in dead:
        del prog.blocks[n]
    for lir in prog.layers.values():
        lir.callers = [(c, r) for c, r in lir.callers if c in live]
    return len(dead)


def _instr(prog: Program, name: str, ins: Instr) -> list[str]:
    """Problems with one instruction of block `name` (or of the exit)."""
    if OPCODES.get(ins.op) is not type(ins):
        return [f"{name}: unknown instruction {type(ins).__name__}"]
    errs = [f"{name}: {ins.op}: {p}" for p in ins.check()]
    for x in ins.exprs():
        why = unresolved(x)
        if why:
            errs.append(f"{name}: {ins.op}: {why}")
    errs += [f"{name}: {ins.op}: lacks its declared effect: {u}" for u in ins.undeclared()]
    for r in ins.reads | ins.writes:
        kind, _, layer = r.partition(":")
        if kind not in RESOURCE_KINDS or (kind != "RUNTIME" and layer not in prog.layers):
            errs.append(f"{name}: {ins.op} has a bad resource {r!r}")
    return errs


def _rules(prog: Program) -> list[str]:
    """The rules' invariants: an exit that applies them iff the program has them, every name a
    rule binds to a layer of the program (a field of its header, or a checksum the layer
    declares), every field a RuleRead copies one that the rules read."""
    desc = prog.rules
    applies = [i for i in prog.exit if isinstance(i, ApplyRules)]
    if desc is None:
        return ["exit: apply_rules without rules"] if applies else []
    errs = [] if len(applies) == 1 else [f"exit: {len(applies)} apply_rules (one expected)"]
    read = desc.fields()
    for r in desc.rules.rules if desc.rules is not None else []:
        for v in r.refs.values():
            if not isinstance(v, FieldRef | LayerRef):
                continue
            lir = prog.layers.get(v.layer)
            if lir is None:
                errs.append(f"rule {r.name}: unknown layer {v.layer!r}")
            elif isinstance(v, FieldRef) and not v.virtual and lir.desc is not None:
                if v.field not in lir.desc.fields:
                    errs.append(f"rule {r.name}: layer {v.layer} has no field {v.field!r}")
    for name, b in prog.blocks.items():
        for ins in b.instrs:
            if isinstance(ins, RuleRead):
                extra = [f for f in ins.fields if f not in read.get(ins.layer, [])]
                if extra:
                    errs.append(f"{name}: rule_read copies {extra[0].dotted}, no rule reads it")
    return errs


def verify(prog: Program) -> list[str]:
    """Problems found (empty when the IR is well formed): every block terminated, every target
    defined, every opcode and resource known, every instruction with its class's declared effects
    (ir/instrs.py), calls only into layers, returns only from the
    block's own layer, every reachable layer entered, every expression resolved (typed and
    bound by sema), the rules applied once at the exit and bound to the program's layers."""
    errs: list[str] = []
    for name, b in prog.blocks.items():
        if b.term is None:
            errs.append(f"{name}: not terminated")
            continue
        for s in b.successors():
            if s not in prog.blocks:
                errs.append(f"{name}: jumps to undefined block {s!r}")
        t = b.term
        if isinstance(t, Call):
            if t.child not in prog.layers:
                errs.append(f"{name}: calls unknown layer {t.child}")
            elif prog.layers[t.child].entry not in prog.blocks:
                errs.append(f"{name}: layer {t.child} has no entry block")
        if isinstance(t, Return) and t.layer != b.layer:
            errs.append(f"{name}: returns from {t.layer} inside layer {b.layer}")
        if isinstance(t, Branch) and t.cond.kind in ("expr", "create_if") and t.cond.expr is None:
            errs.append(f"{name}: expression branch without an expression")
        if isinstance(t, Branch) and t.cond.expr is not None:
            why = unresolved(t.cond.expr)
            if why:
                errs.append(f"{name}: branch condition {t.cond.show()!r}: {why}")
        for ins in b.instrs:
            if isinstance(ins, ApplyRules):
                errs.append(f"{name}: apply_rules in a block (it is the exit's)")
            errs += _instr(prog, name, ins)
    for ins in prog.exit:
        if not isinstance(ins, ApplyRules):
            errs.append(f"exit: {ins.op}: only apply_rules runs at the exit")
        errs += _instr(prog, "exit", ins)
    errs += _rules(prog)
    for lname, lir in prog.layers.items():
        if lir.entry not in prog.blocks and (lir.callers or lname in prog.entries.values()):
            errs.append(f"layer {lname}: entry block {lir.entry!r} missing")
        for x in lir.desc.exprs() if lir.desc is not None else []:
            why = unresolved(x)
            if why:
                errs.append(f"layer {lname}: description: {why}")
    for x in prog.desc.exprs() if prog.desc is not None else []:
        why = unresolved(x)
        if why:
            errs.append(f"handlers: {why}")
    return errs
