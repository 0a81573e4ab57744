"""Semantic checks of a stack document: layers, bindings, the parse tree and handlers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rubikgen.models import Stack
from rubikgen.models.stack import Edge, entries_of
from rubikgen.sema import builtins as B
from rubikgen.sema.protocol import ExprChecker, _dym, check_event_cycles, event_order_edges
from rubikgen.sema.symbols import ProtocolInfo, check_ident
from rubikgen.source import Path

if TYPE_CHECKING:
    from rubikgen.workspace import Document, Workspace

DEFAULT_MAX_REPEAT = 16


@dataclass
class LayerInfo:
    name: str
    protocol: ProtocolInfo
    bindings: dict[str, str]  # param -> layer name
    path: Path


@dataclass
class StackInfo:
    name: str
    entries: dict[str, str]  # link type ('*' = any) -> entry layer
    layers: dict[str, LayerInfo] = field(default_factory=dict)
    # layer -> outgoing edges in the order they are tried
    children: dict[str, list[tuple[int, Edge]]] = field(default_factory=dict)


def check_stack(ws: Workspace, doc: Document) -> None:
    st: Stack = doc.model  # type: ignore[assignment]
    smap, diags = doc.smap, doc.diags
    entries = entries_of(st.entry)
    info = StackInfo(st.stack, entries)
    doc.stack_info = info
    check_ident(st.stack, "stack name", smap, ("stack",), diags, key=False)
    base = os.path.dirname(doc.abspath)

    # Layers and their protocols.
    for lname, layer in st.layers.items():
        lp: Path = ("layers", lname)
        check_ident(lname, "layer name", smap, lp, diags)
        f = os.path.abspath(os.path.join(base, layer.protocol))
        if not os.path.exists(f):
            diags.append(smap.diag("RG007", f"protocol file '{layer.protocol}' not found", lp + ("protocol",),
                                   hint="paths are relative to the stack file"))
            continue
        pdoc = ws.check_protocol(f)
        if pdoc.kind == "stack":
            diags.append(smap.diag("RG051", f"'{layer.protocol}' is a stack, not a protocol", lp + ("protocol",)))
            continue
        if pdoc.info is None:
            diags.append(smap.diag("RG007", f"protocol '{layer.protocol}' has errors; see its diagnostics", lp + ("protocol",),
                                   severity="note"))
            continue
        info.layers[lname] = LayerInfo(lname, pdoc.info, dict(layer.args), lp)

    for link, ename in entries.items():
        epath: Path = ("entry",) if link == "*" else ("entry", link)
        if ename not in st.layers:
            diags.append(smap.diag("RG052", f"entry layer '{ename}' is not defined", epath, hint=_dym(ename, st.layers)))
    roots = [e for e in dict.fromkeys(entries.values()) if e in st.layers]

    # Arguments against parameters.
    for lname, li in info.layers.items():
        params = li.protocol.param_files
        lp = li.path
        for pname, files in params.items():
            if pname not in li.bindings:
                diags.append(smap.diag("RG051", f"layer '{lname}' does not bind parameter '{pname}' of protocol '{li.protocol.name}'",
                                       lp, key=True, hint=f"add args: {{{pname}: LAYER}}"))
        for pname, target in li.bindings.items():
            ap = lp + ("args", pname)
            if pname not in params:
                diags.append(smap.diag("RG051", f"protocol '{li.protocol.name}' has no parameter '{pname}'", ap, key=True,
                                       hint=_dym(pname, params) or (f"its parameters: {', '.join(params)}" if params else "it takes no parameters")))
                continue
            if target not in st.layers:
                diags.append(smap.diag("RG052", f"unknown layer '{target}'", ap, hint=_dym(target, st.layers)))
                continue
            tl = info.layers.get(target)
            if tl is not None and os.path.abspath(tl.protocol.file) not in params[pname] and \
                    ws.docs.get(os.path.abspath(os.path.join(base, st.layers[target].protocol))) is not None:
                tfile = os.path.abspath(os.path.join(base, st.layers[target].protocol))
                if tfile not in params[pname]:
                    allowed = ", ".join(os.path.basename(x) for x in params[pname])
                    diags.append(smap.diag("RG051", f"parameter '{pname}' of '{lname}' must be a layer of {allowed}; "
                                           f"'{target}' is {os.path.basename(tfile)}", ap))

    # Edges.
    children: dict[str, list[tuple[int, Edge]]] = {}
    for i, e in enumerate(st.edges):
        ep: Path = ("edges", i)
        ok = True
        for key, name in (("from", e.from_), ("to", e.to)):
            if name not in st.layers:
                diags.append(smap.diag("RG052", f"unknown layer '{name}'", ep + (key,), hint=_dym(name, st.layers)))
                ok = False
        if e.max_repeat is not None and e.from_ != e.to:
            diags.append(smap.diag("RG006", "max_repeat applies to self-loops only", ep + ("max_repeat",)))
        if e.max_repeat is not None and not 1 <= e.max_repeat <= 1024:
            diags.append(smap.diag("RG015", f"max_repeat {e.max_repeat} is out of range 1..1024", ep + ("max_repeat",)))
        if e.to in entries.values() and e.from_ != e.to and e.from_ in st.layers:
            # An entry may also sit below another entry (raw IP captures enter at ip, Ethernet
            # ones reach ip through eth); only a path back to it is a cycle, found below.
            pass
        if not ok:
            continue
        children.setdefault(e.from_, []).append((i, e))
        src = info.layers.get(e.from_)
        if e.when is not None and src is not None:
            _layer_checker(ws, info, src, smap, diags).expr(ep + ("when",), e.when, B.EDGE, "bool")
    for lname, lst in children.items():
        lst.sort(key=lambda ie: (-ie[1].priority, ie[0]))
        seen: dict[tuple[str, str], int] = {}
        for i, e in lst:
            k = (e.to, str(e.when))
            if k in seen:
                diags.append(smap.diag("RG055", f"edge {lname} -> {e.to} repeats edge {seen[k] + 1} with the same condition",
                                       ("edges", i), severity="warning"))
            seen.setdefault(k, i)
    info.children = children

    # Cycles other than self-loops.
    state: dict[str, int] = {}
    path_stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        path_stack.append(n)
        for i, e in children.get(n, []):
            if e.to == n:
                continue
            if state.get(e.to) == 1:
                cyc = path_stack[path_stack.index(e.to):] + [e.to]
                diags.append(smap.diag("RG050", f"parse-tree cycle: {' -> '.join(cyc)}", ("edges", i),
                                       hint="only self-loops (from == to) may repeat; use a second layer instance instead"))
            elif state.get(e.to) is None:
                visit(e.to)
        path_stack.pop()
        state[n] = 2

    if roots:
        for r in roots:
            if r not in state:
                visit(r)
        for lname in st.layers:
            if lname not in state:
                diags.append(smap.diag("RG053", f"layer '{lname}' is unreachable from the entry layer(s) {', '.join(roots)}",
                                       ("layers", lname), key=True, severity="warning", hint="add an edge into it or remove it"))
        for n in st.layers:
            if n not in state:
                visit(n)

    # Parameters must be parsed before the layer: the bound layer dominates it.
    if roots:
        dom = _dominators(roots, list(st.layers), children)
        for lname, li in info.layers.items():
            for pname, target in li.bindings.items():
                if target in st.layers and lname in dom and (target == lname or target not in dom[lname]):
                    diags.append(smap.diag("RG054", f"layer '{target}' (parameter '{pname}' of '{lname}') is not parsed before "
                                           f"'{lname}' on every path", li.path + ("args", pname),
                                           hint="bind a layer that every path from the entry passes through first"))

    # Handlers.
    rel: dict[str, dict[str, tuple[list[str], Any]]] = {}
    for hname, h in st.handlers.items():
        hp: Path = ("handlers", hname)
        check_ident(hname, "handler name", smap, hp, diags)
        if h.layer not in st.layers:
            diags.append(smap.diag("RG052", f"unknown layer '{h.layer}'", hp + ("layer",), hint=_dym(h.layer, st.layers)))
            continue
        li = info.layers.get(h.layer)
        if li is None:
            continue
        ec = _layer_checker(ws, info, li, smap, diags)
        if h.when is not None:
            ec.expr(hp + ("when",), h.when, B.HANDLER, "bool")
        ec.args(hp + ("args",), h.args, B.Context(**{**B.HANDLER.__dict__, "virtual": False}))
        rel.setdefault(h.layer, {})[hname] = (h.before, h.with_)
    for lname, r in rel.items():
        li = info.layers[lname]
        known = set(li.protocol.all_events()) | set(r)
        edges = event_order_edges(r, known, smap, ("handlers",), diags)
        # Protocol-level relations take part in cycle detection too.
        for ev, e in li.protocol.model.events.items():
            for b in e.before:
                edges.setdefault(ev, []).append((b, ("handlers",)))
        check_event_cycles(edges, smap, ("handlers",), diags)


def _layer_checker(ws: Workspace, info: StackInfo, li: LayerInfo, smap: Any, diags: list[Any]) -> ExprChecker:
    params = {p: info.layers[t].protocol for p, t in li.bindings.items() if t in info.layers}
    return ExprChecker(li.protocol, params, smap, diags)


def _dominators(roots: list[str], nodes: list[str], children: dict[str, list[tuple[int, Edge]]]) -> dict[str, set[str]]:
    # A virtual root above every entry layer: a layer dominates another when every path from
    # any entry passes through it.
    entry = "<capture>"
    children = {**children, entry: [(-1, Edge.model_validate({"from": entry, "to": r})) for r in roots]}
    nodes = [*nodes, entry]
    preds: dict[str, set[str]] = {n: set() for n in nodes}
    for n, lst in children.items():
        for _, e in lst:
            if e.to != n and e.to in preds:
                preds[e.to].add(n)
    reach = {entry}
    todo = [entry]
    while todo:
        n = todo.pop()
        for _, e in children.get(n, []):
            if e.to not in reach:
                reach.add(e.to)
                todo.append(e.to)
    dom = {n: set(reach) for n in reach}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for n in reach:
            if n == entry:
                continue
            ps = [dom[p] for p in preds[n] if p in reach]
            new = set.intersection(*ps) if ps else set()
            new = new | {n}
            if new != dom[n]:
                dom[n] = new
                changed = True
    return dom
