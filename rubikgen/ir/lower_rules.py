"""A checked rule set lowered into a stack's Program (docs/rules.md, ir/rules.py).

The rules run once per packet, at the per-packet function's single exit, on what the packet's
layers parsed: after every header program of a layer the rules name, a `RuleRead` stamps the
layer parsed in this packet and copies the fields the rules read (in a reloadable build, every
layer's fixed part: any rule set may read it); after every key build of a layer whose instance
a rule may act on (stateful rules, drop-flow), a `RuleKey` records it; `ApplyRules` at the exit
(`Program.exit`) tries them, first match wins. They are put in after the passes: each is a
command (never moved, never removed), and the passes' copies of a header program or a key
build (tail duplication) each get theirs."""

from __future__ import annotations

from . import instrs as I
from .nodes import Call, Program
from .rules import RulesDesc
from .verify import verify


def depths(prog: Program) -> dict[str, int]:
    """Depth of every layer in the parse tree (entries 0; self-loops ignored)."""
    edges: list[tuple[str, str]] = []
    for blk in prog.blocks.values():
        t = blk.term
        if isinstance(t, Call) and t.child != t.layer:
            edges.append((t.layer, t.child))
    d = {n: 0 for n in prog.layers}
    for _ in range(len(d)):  # longest path; a cycle other than a self-loop stops growing
        changed = False
        for a, b in edges:
            if d[b] < d[a] + 1 <= len(d):
                d[b] = d[a] + 1
                changed = True
        if not changed:
            break
    return d


def instance_layers(prog: Program, desc: RulesDesc) -> list[str]:
    """The layers whose instance the rules act on, deepest first (the first one a packet has
    decides): every layer with instances when a rule may need one, none otherwise."""
    if not desc.need_instance():
        return []
    depth = depths(prog)
    inst = [n for n, lir in prog.layers.items() if lir.desc is not None and lir.desc.has_instance]
    return sorted(inst, key=lambda n: -depth.get(n, 0))


def lower_rules(prog: Program, desc: RulesDesc) -> None:
    """Put the rules into prog (once; a program without rules is left as it is)."""
    if prog.rules is not None:
        raise ValueError(f"{prog.stack}: the rules are lowered already")
    prog.rules = desc
    read = set(prog.layers) if desc.reload else desc.layers()
    fields = desc.fields()
    keyed = set(instance_layers(prog, desc))
    for b in prog.blocks.values():
        out: list[I.Instr] = []
        for ins in b.instrs:
            out.append(ins)
            if isinstance(ins, I.ParseHeader) and ins.layer in read:
                fs = () if desc.reload else tuple(fields.get(ins.layer, ()))
                out.append(I.RuleRead.make(ins.layer, fields=fs, whole=desc.reload))
            elif isinstance(ins, I.BuildKey) and ins.layer in keyed:
                out.append(I.RuleKey.make(ins.layer))
        b.instrs = out
    prog.exit.append(I.ApplyRules.make("", desc=desc))
    problems = verify(prog)
    if problems:
        raise RuntimeError("IR verification failed after the rules: " + "; ".join(problems[:5]))
