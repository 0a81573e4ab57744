"""IR dumps: text (one block per paragraph) and Graphviz."""

from __future__ import annotations

from rubikgen.expr.ast import unparse

from .nodes import Block, Branch, Call, Done, Instr, Jump, Program, Return


def _args(ins: Instr) -> str:
    parts = []
    for k, v in ins.operands().items():
        if k in ("call", "args"):
            continue
        if k == "input" and v is None:
            continue
        if k == "desc":  # apply_rules: the set (its rules: exit_text)
            rs = v.rules
            v = f"{rs.file}({len(rs.rules)})" if rs is not None else "none"
            parts.append(f"rules={v}" + (" reload" if ins.desc.reload else ""))  # type: ignore[attr-defined]
            continue
        if k == "fields":
            v = ",".join(f.dotted for f in v)
        if k in ("stmt", "value", "expr", "input"):
            v = unparse(v)
        elif k == "cond":
            v = v.show() if v is not None else "always"
        parts.append(f"{k}={v}")
    return " ".join(parts)


def _effects(reads: frozenset[str], writes: frozenset[str]) -> str:
    r = ",".join(sorted(reads)) or "-"
    w = ",".join(sorted(writes)) or "-"
    return f"reads {r}; writes {w}"


def term_text(b: Block) -> str:
    t = b.term
    if isinstance(t, Jump):
        return f"jump {t.target}"
    if isinstance(t, Branch):
        return f"branch ({t.cond.show()}) ? {t.then} : {t.else_}"
    if isinstance(t, Call):
        return f"call {t.child} -> {t.ret}"
    if isinstance(t, Return):
        return f"return {t.layer}"
    if isinstance(t, Done):
        return "done"
    return "<unterminated>"


def block_text(b: Block, effects: bool = True) -> str:
    head = f"{b.name}:" + (f"    ; {b.src}" if b.src else "")
    lines = [head]
    for ins in b.instrs:
        line = f"    {ins.op} {_args(ins)}".rstrip()
        if effects:
            line += f"    ; {_effects(ins.reads, ins.writes)}"
        lines.append(line)
    lines.append(f"    {term_text(b)}")
    return "\n".join(lines)


def exit_text(prog: Program, effects: bool = True) -> str:
    """The function's exit (the rules applied after every layer), each rule a comment."""
    lines = ["exit:"]
    for ins in prog.exit:
        line = f"    {ins.op} {_args(ins)}".rstrip()
        if effects:
            line += f"    ; {_effects(ins.reads, ins.writes)}"
        lines.append(line)
    rs = prog.rules.rules if prog.rules is not None else None
    for r in rs.rules if rs is not None else []:
        assert rs is not None
        what = " stateful" if r.stateful else ""
        lines.append(f"    ; rule {r.index} {r.name} ({rs.file}:{r.line}): {r.match_text} -> "
                     f"{r.action}{what}")  # fmt: skip
    return "\n".join(lines)


def to_text(prog: Program, layer: str | None = None, effects: bool = True) -> str:
    head = [f"; stack {prog.stack}"] + [f"; entry {k}: {v}" for k, v in prog.entries.items()]
    for lir in prog.layers.values():  # run by the layer's lifecycle entry, not by a block
        if layer is None or lir.name == layer:
            head += [f"; lifecycle {lir.name}: {h} on {'|'.join(r)}" for h, r in lir.lifecycle]
    out = ["\n".join(head)]
    for b in prog.blocks.values():
        if layer is None or b.layer == layer:
            out.append(block_text(b, effects))
    if prog.exit and layer is None:
        out.append(exit_text(prog, effects))
    return "\n\n".join(out) + "\n"


def _q(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(prog: Program, layer: str | None = None) -> str:
    out = [f'digraph "{_q(prog.stack)}" {{', "  node [shape=box, fontname=monospace, fontsize=9];"]
    names = [n for n, b in prog.blocks.items() if layer is None or b.layer == layer]
    for n in names:
        b = prog.blocks[n]
        body = [n] + [f"{i.op} {_args(i)}".strip() for i in b.instrs] + [term_text(b)]
        label = "\\l".join(_q(x) for x in body) + "\\l"
        out.append(f'  "{_q(n)}" [label="{label}"];')
    for n in names:
        b = prog.blocks[n]
        t = b.term
        if isinstance(t, Branch):
            out.append(f'  "{_q(n)}" -> "{_q(t.then)}" [label="T"];')
            out.append(f'  "{_q(n)}" -> "{_q(t.else_)}" [label="F"];')
        elif isinstance(t, Call):
            entry = prog.layers[t.child].entry
            if layer is None:
                out.append(f'  "{_q(n)}" -> "{_q(entry)}" [style=bold, label="call"];')
            out.append(f'  "{_q(n)}" -> "{_q(t.ret)}" [style=dashed, label="return"];')
        else:
            for s in b.successors():
                out.append(f'  "{_q(n)}" -> "{_q(s)}";')
    out.append("}")
    return "\n".join(out) + "\n"
