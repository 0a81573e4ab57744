"""Graphviz drawings: a stack's parse tree and a protocol's PSM."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from rubikgen.front.diagnostics import render
from rubikgen.models.common import expr_text
from rubikgen.models.stack import entries_of


def _q(s: str) -> str:
    # Quote for DOT; real newlines in labels become DOT line breaks.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tree_dot(ws, doc) -> str:  # type: ignore[no-untyped-def]
    st = doc.model
    info = doc.stack_info
    lines = [
        f"digraph {_q(st.stack)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    # Grafted copies of a subtree (stack composition) are drawn as one labelled cluster.
    cluster_of: dict[str, int] = {}
    grafts = getattr(doc.smap, "grafts", [])
    for k, (_, _, names) in enumerate(grafts):
        for n in names:
            cluster_of.setdefault(n, k)
    node_lines: dict[int, list[str]] = {}
    for lname in st.layers:
        proto = info.layers[lname].protocol.name if info and lname in info.layers else "?"
        label = lname if proto == lname else f"{lname}\n({proto})"
        extra = ", penwidth=2" if lname in entries_of(st.entry).values() else ""
        node_lines.setdefault(cluster_of.get(lname, -1), []).append(
            f"  {_q(lname)} [label={_q(label)}{extra}];"
        )
    lines += node_lines.pop(-1, [])
    for k, body in node_lines.items():
        sub, prefix, _ = grafts[k]
        lines.append(f"  subgraph {_q(f'cluster_graft{k}')} {{")
        lines.append(f"    label={_q(f'graft: subtree {sub}, prefix {prefix}')}; style=dashed;")
        lines += ["  " + ln for ln in body]
        lines.append("  }")
    for lst in (info.children if info else {}).values():
        for rank, (_, e) in enumerate(lst, start=1):
            label = expr_text(e.when) if e.when is not None else "always"
            if len(lst) > 1:
                label = f"{rank}. {label}"
            if e.from_ == e.to:
                label += f" (x{e.max_repeat or 16})"
            lines.append(f"  {_q(e.from_)} -> {_q(e.to)} [label={_q(label)}];")
    if isinstance(st.entry, dict):
        for link, ename in st.entry.items():
            lid = f"link:{link}"
            lines.append(f'  {_q(lid)} [label={_q(link)}, shape=plaintext, style=""];')
            lines.append(f"  {_q(lid)} -> {_q(ename)} [style=dotted];")
    for hname, h in st.handlers.items():
        hid = f"handler:{hname}"
        lines.append(f'  {_q(hid)} [label={_q(hname + "()")}, shape=note, fillcolor="#fff6d5"];')
        lines.append(f"  {_q(h.layer)} -> {_q(hid)} [style=dashed, arrowhead=none];")
    lines.append("}")
    return "\n".join(lines) + "\n"


GUARD_WIDTH = 24  # characters per line of a guard label (the TCP PSM fits A4 at 24)


def wrap_guard(text: str, width: int = GUARD_WIDTH) -> list[str]:
    """A guard split into lines of about `width` characters, after a top-level '&&' or '||'
    where possible (then after any space), so long conditions do not widen the drawing."""
    parts: list[str] = []
    depth = 0
    cur = ""
    i = 0
    while i < len(text):
        ch = text[i]
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and text.startswith((" && ", " || "), i):
            parts.append(cur + text[i : i + 3])
            cur = ""
            i += 4
            continue
        cur += ch
        i += 1
    parts.append(cur)
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
            continue
        while len(part) > width and " " in part[:width]:
            cut = part.rindex(" ", 0, width)
            lines.append(part[:cut])
            part = "  " + part[cut + 1 :]
        lines.append(part)
    return lines


def psm_dot(info) -> str:  # type: ignore[no-untyped-def]
    """A PSM as DOT, each transition drawn once: `from: "*"` leaves one 'any state' box, a
    transition with several sources joins them at a point before its one labelled edge, and
    transitions with the same sources and target share that edge, their labels stacked."""
    psm = info.model.psm
    lines = [
        f"digraph {_q(info.name + '_psm')} {{",
        "  rankdir=TB; nodesep=0.3; ranksep=0.35;",
        '  node [shape=ellipse, fontname="Helvetica", fontsize=11, margin="0.04,0.02"];',
        '  edge [fontname="Helvetica", fontsize=9];',
        "  __start [shape=point];",
    ]
    start = psm.start[0] if isinstance(psm.start, list) and psm.start else psm.start
    for s in psm.states:
        shape = "doubleoctagon" if s in psm.accept else "ellipse"
        lines.append(f"  {_q(s)} [shape={shape}];")
    if isinstance(start, str):
        lines.append(f"  __start -> {_q(start)};")
    # transitions with the same sources and target share one edge, their labels stacked:
    # side by side they would widen the drawing by a label each
    groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for i, t in enumerate(psm.transitions, start=1):
        guard = expr_text(t.when) if t.when is not None else ""
        rows = wrap_guard(guard) if guard else []
        if rows:
            rows[0] = "[" + rows[0]
            rows[-1] += "]"
        srcs = (
            ("*",) if t.from_ == "*" else tuple([t.from_] if isinstance(t.from_, str) else t.from_)
        )
        groups.setdefault((srcs, t.to), []).append("\n".join([f"{i}. {t.name}", *rows]))
    if any(srcs == ("*",) for srcs, _to in groups):
        lines.append(
            '  "__any" [label="any state", shape=box, style="dashed,rounded", fontsize=9];'
        )
    for k, ((srcs, to), labels) in enumerate(groups.items(), start=1):
        label = "\n\n".join(labels)
        if srcs == ("*",):
            srcs = ("__any",)
        if len(srcs) == 1:
            lines.append(f"  {_q(srcs[0])} -> {_q(to)} [label={_q(label)}];")
            continue
        tid = f"t{k}"
        lines.append(f'  {_q(tid)} [shape=point, width=0.06, label=""];')
        for s in srcs:
            lines.append(f"  {_q(s)} -> {_q(tid)} [arrowhead=none];")
        lines.append(f"  {_q(tid)} -> {_q(to)} [label={_q(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_command(args: argparse.Namespace) -> int:
    from rubikgen.pipeline import Compilation

    comp = Compilation(args.spec)
    ws = comp.workspace
    doc = comp.checked_document
    errors = [d for d in comp.diagnostics if d.severity == "error"]
    if doc.model is None or (errors and doc.info is None and doc.stack_info is None):
        render(errors, ws.sources, "text", sys.stderr)
        return 1
    if doc.kind == "stack":
        if args.psm is not None:
            if not args.psm:
                sys.stderr.write("rubikgen graph: --psm needs a LAYER for a stack\n")
                return 2
            li = doc.stack_info.layers.get(args.psm) if doc.stack_info is not None else None
            if li is None:
                sys.stderr.write(f"rubikgen graph: no layer '{args.psm}' in this stack\n")
                return 2
            if li.protocol.model.psm is None:
                sys.stderr.write(f"rubikgen graph: layer '{args.psm}' has no PSM\n")
                return 1
            dot = psm_dot(li.protocol)
        else:
            dot = tree_dot(ws, doc)
    else:
        if args.tree:
            sys.stderr.write("rubikgen graph: --tree needs a stack\n")
            return 2
        if doc.info is None or doc.info.model.psm is None:
            sys.stderr.write("rubikgen graph: this protocol has no PSM\n")
            return 1
        dot = psm_dot(doc.info)
    data: bytes = dot.encode()
    if args.format == "svg":
        exe = shutil.which("dot")
        if exe is None:
            sys.stderr.write(
                "rubikgen graph: SVG needs Graphviz's 'dot' (apt-get install graphviz)\n"
            )
            return 1
        data = subprocess.run([exe, "-Tsvg"], input=data, capture_output=True, check=True).stdout
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0
