"""Semantic checks of a stack document: layers, bindings, the parse tree and handlers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rubikgen.expr import ExprSyntaxError, parse_expr
from rubikgen.front import specpath
from rubikgen.front.source import Path
from rubikgen.models import Stack
from rubikgen.models.common import Callback, expr_text
from rubikgen.models.stack import Edge, entries_of
from rubikgen.sema import builtins as B
from rubikgen.sema.builtins import lifecycle_hooks
from rubikgen.sema.protocol import (
    ExprChecker,
    _dym,
    _key_size,
    check_event_cycles,
    event_order_edges,
)
from rubikgen.sema.stack_info import LayerInfo, StackInfo
from rubikgen.sema.symbols import ProtocolInfo, check_ident
from rubikgen.sema.udes import check_udes, ude_edges, udes_of

if TYPE_CHECKING:
    from rubikgen.front.document import Document, SpecLoader


@dataclass
class _StackCheck:
    """What the steps of check_stack share: the stack, where its diagnostics go, and what
    earlier steps found (the layer table in `info`, the parse tree's roots)."""

    ws: SpecLoader
    doc: Document
    st: Stack
    smap: Any
    diags: list[Any]
    entries: dict[str, str]
    info: StackInfo
    base: str  # the stack file's directory
    roots: list[str] = field(default_factory=list)  # distinct entry layers that exist


def check_stack(ws: SpecLoader, doc: Document) -> None:
    """The semantic checks of a stack; its StackInfo goes into doc.stack_info, its
    diagnostics into doc.diags (in the order of the steps)."""
    st: Stack = doc.model  # type: ignore[assignment]
    entries = entries_of(st.entry)
    info = StackInfo(st.stack, entries)
    doc.stack_info = info
    check_ident(st.stack, "stack name", doc.smap, ("stack",), doc.diags, key=False)
    base = os.path.dirname(doc.abspath)
    c = _StackCheck(ws, doc, st, doc.smap, doc.diags, entries, info, base)
    _check_layers(c)
    _check_entries(c)
    _check_bindings(c)
    _check_options(c)
    _check_edges(c)
    _check_tree(c)
    _check_parameter_order(c)
    _check_lookup_keys(c)
    check_udes(c, _layer_checker)
    _check_handlers(c)


def _check_layers(c: _StackCheck) -> None:
    """Load each layer's protocol (checked once per file) into the stack's layer table."""
    ws, st, smap, diags, info, base = c.ws, c.st, c.smap, c.diags, c.info, c.base
    # Layers and their protocols.
    for lname, layer in st.layers.items():
        lp: Path = ("layers", lname)
        check_ident(lname, "layer name", smap, lp, diags)
        res = specpath.resolve(layer.protocol, base)
        if res.path is None:
            what = specpath.problem(res, "protocol file")
            diags.append(
                smap.diag(
                    "RG007",
                    f"protocol file '{layer.protocol}' {what}",
                    lp + ("protocol",),
                    hint=specpath.hint(layer.protocol, res, "the stack file"),
                )
            )
            continue
        f = res.path
        pdoc = ws.check_protocol(f)
        if pdoc.kind == "stack":
            diags.append(
                smap.diag(
                    "RG051", f"'{layer.protocol}' is a stack, not a protocol", lp + ("protocol",)
                )
            )
            continue
        if pdoc.info is None:
            diags.append(
                smap.diag(
                    "RG007",
                    f"protocol '{layer.protocol}' has errors; see its diagnostics",
                    lp + ("protocol",),
                    severity="note",
                )
            )
            continue
        info.layers[lname] = LayerInfo(lname, pdoc.info, dict(layer.args), lp, dict(layer.options))


def _check_entries(c: _StackCheck) -> None:
    """Entry layers must be layers; the distinct ones are the roots of the parse tree."""
    st, smap, diags, entries = c.st, c.smap, c.diags, c.entries
    for link, ename in entries.items():
        epath: Path = ("entry",) if link == "*" else ("entry", link)
        if ename not in st.layers:
            diags.append(
                smap.diag(
                    "RG052",
                    f"entry layer '{ename}' is not defined",
                    epath,
                    hint=_dym(ename, st.layers),
                )
            )
    c.roots = [e for e in dict.fromkeys(entries.values()) if e in st.layers]


def _check_bindings(c: _StackCheck) -> None:
    """Each layer binds exactly its protocol's parameters, to layers of the allowed protocols."""
    ws, st, smap, diags, info, base = c.ws, c.st, c.smap, c.diags, c.info, c.base
    # Arguments against parameters.
    for lname, li in info.layers.items():
        params = li.protocol.param_files
        lp = li.path
        unbound = [p for p in params if p not in li.bindings]
        # A misspelt argument is reported once, as itself, not also as a missing parameter.
        unknown = [a for a in li.bindings if a not in params]
        if len(unknown) == 1 and len(unbound) == 1:  # one wrong name where one is missing: that one
            misspelt: dict[str, str | None] = {unknown[0]: unbound[0]}
        else:
            misspelt = {a: _dym_name(a, unbound) for a in unknown}
        for pname in unbound:
            if pname not in misspelt.values():
                diags.append(
                    smap.diag(
                        "RG051",
                        f"layer '{lname}' does not bind parameter '{pname}' of protocol '{li.protocol.name}'",
                        lp,
                        key=True,
                        hint=f"add args: {{{pname}: LAYER}}",
                    )
                )
        for pname, target in li.bindings.items():
            ap = lp + ("args", pname)
            if pname not in params:
                guess = misspelt.get(pname) or _dym_name(pname, params)
                diags.append(
                    smap.diag(
                        "RG051",
                        f"protocol '{li.protocol.name}' has no parameter '{pname}'",
                        ap,
                        key=True,
                        hint=f"did you mean '{guess}'?"
                        if guess
                        else (
                            f"its parameters: {', '.join(params)}"
                            if params
                            else "it takes no parameters; remove args"
                        ),
                    )
                )
                continue
            if target not in st.layers:
                diags.append(
                    smap.diag(
                        "RG052", f"unknown layer '{target}'", ap, hint=_dym(target, st.layers)
                    )
                )
                continue
            tl = info.layers.get(target)
            if (
                tl is not None
                and os.path.abspath(tl.protocol.file) not in params[pname]
                and ws.docs.get(specpath.locate(st.layers[target].protocol, base)) is not None
            ):
                tfile = specpath.locate(st.layers[target].protocol, base)
                if tfile not in params[pname]:
                    allowed = ", ".join(os.path.basename(x) for x in params[pname])
                    diags.append(
                        smap.diag(
                            "RG051",
                            f"parameter '{pname}' of '{lname}' must be a layer of {allowed}; "
                            f"'{target}' is {os.path.basename(tfile)}",
                            ap,
                        )
                    )


def _check_options(c: _StackCheck) -> None:
    """Options are declared by the layer's protocol and have the default's kind."""
    smap, diags, info = c.smap, c.diags, c.info
    # Options against the protocols' declarations: a known name, a value of the default's kind.
    for li in info.layers.values():
        declared = li.protocol.model.options
        for oname, value in li.options.items():
            op = li.path + ("options", oname)
            if oname not in declared:
                guess = _dym_name(oname, list(declared))
                diags.append(
                    smap.diag(
                        "RG051",
                        f"protocol '{li.protocol.name}' has no option '{oname}'",
                        op,
                        key=True,
                        hint=f"did you mean '{guess}'?"
                        if guess
                        else (
                            f"its options: {', '.join(declared)}"
                            if declared
                            else "it has no options; remove options"
                        ),
                    )
                )
            elif isinstance(value, bool) != isinstance(declared[oname].default, bool):
                want = "true or false" if isinstance(declared[oname].default, bool) else "a number"
                diags.append(
                    smap.diag(
                        "RG051",
                        f"option '{oname}' of protocol '{li.protocol.name}' takes {want}",
                        op,
                    )
                )


def _check_edges(c: _StackCheck) -> None:
    """Edges name layers, their conditions and inputs check; repeated edges are reported."""
    ws, st, smap, diags, entries, info = c.ws, c.st, c.smap, c.diags, c.entries, c.info
    # Edges.
    children: dict[str, list[tuple[int, Edge]]] = {}
    for i, e in enumerate(st.edges):
        ep: Path = ("edges", i)
        ok = True
        for key, name in (("from", e.from_), ("to", e.to)):
            if name not in st.layers:
                diags.append(
                    smap.diag(
                        "RG052", f"unknown layer '{name}'", ep + (key,), hint=_dym(name, st.layers)
                    )
                )
                ok = False
        if e.max_repeat is not None and e.from_ != e.to:
            diags.append(
                smap.diag("RG006", "max_repeat applies to self-loops only", ep + ("max_repeat",))
            )
        if e.input is not None and e.from_ != e.to:
            diags.append(
                smap.diag(
                    "RG006",
                    "input applies to self-loops only",
                    ep + ("input",),
                    key=True,
                    hint="a child parses its parent's sdu; set the sdu in the parent",
                )
            )
        if e.max_repeat is not None and not 1 <= e.max_repeat <= 1024:
            diags.append(
                smap.diag(
                    "RG015",
                    f"max_repeat {e.max_repeat} is out of range 1..1024",
                    ep + ("max_repeat",),
                )
            )
        if e.to in entries.values() and e.from_ != e.to and e.from_ in st.layers:
            # An entry may also sit below another entry (raw IP captures enter at ip, Ethernet
            # ones reach ip through eth); only a path back to it is a cycle, found below.
            pass
        if not ok:
            continue
        children.setdefault(e.from_, []).append((i, e))
        src = info.layers.get(e.from_)
        if e.when is not None and src is not None:
            ec = _layer_checker(ws, info, src, smap, diags)
            dst = info.layers.get(e.to)
            if dst is not None and dst.protocol is not src.protocol:
                ec.missing_hint = _edge_hint(src, dst)
            ec.expr(ep + ("when",), e.when, B.EDGE, "bool")
        if e.input is not None and src is not None and e.from_ == e.to:
            ec = _layer_checker(ws, info, src, smap, diags)
            ec.expr(ep + ("input",), e.input, B.EDGE, "bytes")
    for lname, lst in children.items():
        lst.sort(key=lambda ie: (-ie[1].priority, ie[0]))
        seen: dict[tuple[str, Any], int] = {}
        for i, e in lst:
            k = (e.to, _cond_key(e.when))
            if k in seen:
                diags.append(
                    smap.diag(
                        "RG055",
                        f"edge {lname} -> {e.to} repeats the edge at line {smap.pos(('edges', seen[k])).line} with the same condition",
                        ("edges", i, "when") if e.when is not None else ("edges", i),
                        severity="warning",
                        hint="the later edge is never taken; remove it or change its condition",
                    )
                )
            seen.setdefault(k, i)
    info.children = children


def _check_tree(c: _StackCheck) -> None:
    """The parse tree has no cycle but self-loops, and every layer is reachable."""
    st, smap, diags, entries, roots = c.st, c.smap, c.diags, c.entries, c.roots
    children = c.info.children
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
                cyc = path_stack[path_stack.index(e.to) :] + [e.to]
                diags.append(
                    smap.diag(
                        "RG050",
                        f"parse-tree cycle: {' -> '.join(cyc)}",
                        ("edges", i, "to"),
                        hint="only self-loops (from == to) may repeat; use a second layer instance instead",
                    )
                )
            elif state.get(e.to) is None:
                visit(e.to)
        path_stack.pop()
        state[n] = 2

    # An edge or entry naming an unknown layer was reported above: reachability is unknown
    # (the misspelt name was meant to reach some layer), so "unreachable" would only echo it.
    broken = any(name not in st.layers for e in st.edges for name in (e.from_, e.to)) or any(
        e not in st.layers for e in entries.values()
    )
    if roots:
        for r in roots:
            if r not in state:
                visit(r)
        for lname in st.layers:
            if lname not in state and not broken:
                diags.append(
                    smap.diag(
                        "RG053",
                        f"layer '{lname}' is unreachable from the entry layer(s) {', '.join(roots)}",
                        ("layers", lname),
                        key=True,
                        severity="warning",
                        hint="add an edge into it or remove it",
                    )
                )
        for n in st.layers:
            if n not in state:
                visit(n)


def _check_parameter_order(c: _StackCheck) -> None:
    """A layer's parameters are parsed before it on every path (they dominate it)."""
    st, smap, diags, info, roots = c.st, c.smap, c.diags, c.info, c.roots
    children = c.info.children
    # Parameters must be parsed before the layer: the bound layer dominates it.
    if roots:
        dom = _dominators(roots, list(st.layers), children)
        for lname, li in info.layers.items():
            lk = li.protocol.model.lookup
            for pname, target in li.bindings.items():
                if lk is not None and pname == lk.table:
                    continue  # only its instance table is read, whatever path led here
                if (
                    target in st.layers
                    and lname in dom
                    and (target == lname or target not in dom[lname])
                ):
                    around = _path_avoiding(roots, lname, target, children)
                    why = (
                        f" (the path {' -> '.join(around)} skips it)"
                        if around and target != lname
                        else ""
                    )
                    diags.append(
                        smap.diag(
                            "RG054",
                            f"layer '{target}' (parameter '{pname}' of '{lname}') is not parsed before "
                            f"'{lname}' on every path{why}",
                            li.path + ("args", pname),
                            hint="bind a layer that every path from the entry passes through first",
                        )
                    )


def _key_items(sel: Any, what: str) -> list[tuple[Path, str]]:
    """A selector's (or lookup's) key items in key order, each with its path."""
    if isinstance(sel, list):
        return [((what, i), x) for i, x in enumerate(sel)]
    out: list[tuple[Path, str]] = [((what, "key", i), x) for i, x in enumerate(sel.key or [])]
    for j, side in enumerate(sel.sides or []):
        out += [((what, "sides", j, i), x) for i, x in enumerate(side)]
    return out + [((what, "common", i), x) for i, x in enumerate(sel.common)]


def _check_lookup_keys(c: _StackCheck) -> None:
    """A lookup's key items have the sizes of its table's selector items, item by item, once
    the stack binds both layers' parameters (an IPv4 quote cannot find a TCP-over-IPv6 flow):
    the key bytes are compared as they are laid out."""
    for lname, li in c.info.layers.items():
        lk = li.protocol.model.lookup
        tl = c.info.layers.get(li.bindings.get(lk.table, "")) if lk is not None else None
        if lk is None or tl is None or tl.protocol.model.selector is None:
            continue
        mine = _key_items(lk, "lookup")
        theirs = _key_items(tl.protocol.model.selector, "selector")
        if len(mine) != len(theirs):  # the protocol's own check reported the shape (RG029)
            continue
        scratch: list[Any] = []  # the items' own errors were reported with their protocols
        ec = _layer_checker(c.ws, c.info, li, li.protocol.smap, scratch)
        tc = _layer_checker(c.ws, c.info, tl, tl.protocol.smap, scratch)
        for k, ((mp, mx), (tp, tx)) in enumerate(zip(mine, theirs, strict=True), start=1):
            mt, _ = ec.expr(mp, mx, B.SELECTOR)
            tt, _ = tc.expr(tp, tx, B.SELECTOR)
            if mt is None or tt is None:
                continue
            ms, ts = _key_size(mt)[1], _key_size(tt)[1]
            if ms is None or ts is None or ms == ts:
                continue
            mpos = f"{os.path.basename(li.protocol.file)}:{li.protocol.smap.pos(mp).line}"
            tpos = f"{os.path.basename(tl.protocol.file)}:{tl.protocol.smap.pos(tp).line}"
            c.diags.append(
                c.smap.diag(
                    "RG029",
                    f"layer '{lname}': item {k} of its lookup's key, '{mx}' ({mpos}), is "
                    f"{ms} bytes, item {k} of the selector of '{tl.name}', '{tx}' ({tpos}), "
                    f"{ts} bytes",
                    li.path + ("args", lk.table),
                    hint="bind the lookup's table to a layer whose key items have the sizes "
                    "of the lookup's (the same IP version)",
                )
            )
            break  # one per layer: the first item that differs says it


def _check_handlers(c: _StackCheck) -> None:
    """Handlers: names, layers, relations, conditions and arguments; then their order."""
    ws, st, smap, diags, info = c.ws, c.st, c.smap, c.diags, c.info
    # Handlers.
    callbacks = _callbacks(info)
    layer_of = {hname: h.layer for hname, h in st.handlers.items()}
    layer_of |= {n: ev.layer for n, ev in st.events.items() if ev.layer in st.layers}
    rel: dict[str, dict[str, tuple[list[str], Any]]] = {}
    lifecycle_handlers = {hn for hn, h in st.handlers.items() if lifecycle_hooks(h.with_)}
    for hname, h in st.handlers.items():
        hp: Path = ("handlers", hname)
        check_ident(hname, "handler name", smap, hp, diags)
        if hname in callbacks:
            proto, cpath = callbacks[hname]
            d = smap.diag(
                "RG060",
                f"handler '{hname}' has the name of a callback of protocol '{proto.name}'",
                hp,
                key=True,
                hint="both become C functions of that name in the generated stub; rename the handler",
            )
            cp = proto.smap.pos(cpath)
            d.notes.append(f"the callback is at {proto.file}:{cp.line}:{cp.col}")
            diags.append(d)
        if h.layer not in st.layers:
            diags.append(
                smap.diag(
                    "RG052",
                    f"unknown layer '{h.layer}'",
                    hp + ("layer",),
                    hint=_dym(h.layer, st.layers),
                )
            )
            continue
        li = info.layers.get(h.layer)
        if li is None:
            continue
        if hname in li.protocol.all_events():
            what = (
                "a built-in event"
                if hname in B.BUILTIN_EVENTS and hname not in li.protocol.events
                else f"an event of protocol '{li.protocol.name}'"
            )
            diags.append(
                smap.diag(
                    "RG060",
                    f"handler '{hname}' has the name of {what} on layer '{h.layer}'",
                    hp,
                    key=True,
                    hint="'with' and 'before' could not tell them apart; rename the handler",
                )
            )
        # Relations name events and handlers of the same layer only.
        for key, names in (("before", h.before), ("with", h.with_)):
            lst = [names] if isinstance(names, str) else list(names or [])
            for j, other in enumerate(lst):
                if (
                    other in layer_of
                    and layer_of[other] != h.layer
                    and other not in li.protocol.all_events()
                ):
                    p = hp + (key,) + ((j,) if not isinstance(names, str) else ())
                    diags.append(
                        smap.diag(
                            "RG060",
                            f"{'event' if other in st.events else 'handler'} '{other}' runs on "
                            f"layer '{layer_of[other]}', not on '{h.layer}'",
                            p,
                            hint="'before' and 'with' order the events and handlers of one layer"
                            + (
                                f"; put the handler on layer '{layer_of[other]}'"
                                if other in st.events
                                else ""
                            ),
                        )
                    )
        life = _check_lifecycle(hname, h, li, lifecycle_handlers, smap, diags)
        ctx = B.LIFECYCLE if life else B.HANDLER
        ec = _layer_checker(ws, info, li, smap, diags)
        if h.when is not None:
            ec.expr(hp + ("when",), h.when, ctx, "bool")
        ec.args(hp + ("args",), h.args, B.Context(**{**ctx.__dict__, "virtual": False}))
        ec.virtual_needs_sequence(
            li.protocol.model.sequence is not None,
            f"layer '{h.layer}' (protocol '{li.protocol.name}')",
        )
        rel.setdefault(h.layer, {})[hname] = (h.before, h.with_)
    _check_handler_order(c, rel, layer_of)


def _check_handler_order(
    c: _StackCheck, rel: dict[str, dict[str, tuple[Any, Any]]], layer_of: dict[str, str]
) -> None:
    """`before`/`with` among a layer's handlers and its protocol's events form no cycle."""
    smap, diags, info = c.smap, c.diags, c.info
    ude_layers = [ev.layer for ev in c.st.events.values() if ev.layer in info.layers]
    for lname in dict.fromkeys([*rel, *ude_layers]):
        r = rel.get(lname, {})
        li = info.layers[lname]
        # Names of other layers' handlers were reported above (RG060).
        others = {o for o, lay in layer_of.items() if lay != lname} - set(li.protocol.all_events())
        known = set(li.protocol.all_events()) | set(r) | set(udes_of(c.st, lname))
        edges = event_order_edges(r, known, smap, ("handlers",), diags, skip=others)
        for a, bs in ude_edges(c.st, lname).items():
            edges.setdefault(a, []).extend((b, p) for b, p in bs if b in known and a in known)
        # Protocol-level relations take part in cycle detection too.
        for ev, e in li.protocol.model.events.items():
            for b in e.before:
                edges.setdefault(ev, []).append((b, ("handlers",)))
            for w in [e.with_] if isinstance(e.with_, str) else list(e.with_ or []):
                edges.setdefault(w, []).append((ev, ("handlers",)))
        check_event_cycles(edges, smap, ("handlers",), diags)


def _check_lifecycle(
    hname: str,
    h: Any,
    li: LayerInfo,
    lifecycle_handlers: set[str],
    smap: Any,
    diags: list[Any],
) -> bool:
    """Checks what only lifecycle handlers may do and what they may not; True if `hname` is
    one (it runs when its layer's instance ends, outside the per-packet pipeline)."""
    hp: Path = ("handlers", hname)
    withs = [h.with_] if isinstance(h.with_, str) else list(h.with_ or [])
    idx = (lambda j: ()) if isinstance(h.with_, str) else (lambda j: (j,))
    life = bool(lifecycle_hooks(h.with_))
    if life:
        for j, w in enumerate(withs):
            if w not in B.LIFECYCLE_EVENTS:
                diags.append(
                    smap.diag(
                        "RG060",
                        f"handler '{hname}' hooks a lifecycle event and '{w}', which fires "
                        "while a packet is processed",
                        hp + ("with",) + idx(j),
                        hint="a lifecycle handler (with: timeout, evicted or destroyed) runs when "
                        "the instance ends, outside any packet; use two handlers",
                    )
                )
        hooks = lifecycle_hooks(h.with_)
        ends = set.intersection(*(set(B.LIFECYCLE_EVENTS[w]) for w in hooks))
        if not ends:
            diags.append(
                smap.diag(
                    "RG060",
                    f"handler '{hname}' can never run: no end of an instance raises "
                    + " and ".join(f"'{w}'" for w in hooks),
                    hp + ("with",),
                    hint="'with' needs every event it names; use one handler per event",
                )
            )
        if h.before:
            diags.append(
                smap.diag(
                    "RG060",
                    f"lifecycle handler '{hname}' cannot run 'before' anything",
                    hp + ("before",),
                    hint="lifecycle handlers run in declaration order, those hooked on timeout or "
                    "evicted before those hooked on destroyed alone",
                )
            )
        if not li.protocol.has_instance:
            diags.append(
                smap.diag(
                    "RG043",
                    f"layer '{li.name}' (protocol '{li.protocol.name}') has no selector: no "
                    f"instance ever ends, so handler '{hname}' would never run",
                    hp + ("with",),
                    hint="hook lifecycle events on a layer with a selector",
                )
            )
        return True
    for key, names in (("before", h.before), ("with", h.with_)):
        lst = [names] if isinstance(names, str) else list(names or [])
        for j, other in enumerate(lst):
            p = hp + (key,) + ((j,) if not isinstance(names, str) else ())
            if key == "before" and other in B.LIFECYCLE_EVENTS:
                diags.append(
                    smap.diag(
                        "RG043",
                        f"'before: {other}' orders nothing: '{other}' is raised when the "
                        "instance ends, outside any packet",
                        p,
                        hint="drop it; a handler with 'with: " + other + "' runs at that moment",
                    )
                )
            elif other in lifecycle_handlers:
                diags.append(
                    smap.diag(
                        "RG060",
                        f"handler '{other}' runs when an instance ends, outside any packet; "
                        f"'{key}' cannot order '{hname}' with it",
                        p,
                        hint="relations order the events and handlers of one packet",
                    )
                )
    return False


def _callbacks(info: StackInfo) -> dict[str, tuple[ProtocolInfo, Path]]:
    """C callbacks the stack's protocols call (callback: NAME), with where the first is."""
    out: dict[str, tuple[ProtocolInfo, Path]] = {}

    def walk(proto: ProtocolInfo, path: Path, stmts: list[Any]) -> None:
        for i, s in enumerate(stmts):
            if isinstance(s, Callback):
                out.setdefault(s.callback, (proto, path + (i, "callback")))
            for key, attr in (("then", "then"), ("else", "else_")):
                sub = getattr(s, attr, None)
                if isinstance(sub, list):
                    walk(proto, path + (i, key), sub)

    for li in info.layers.values():
        m = li.protocol.model
        walk(li.protocol, ("prep",), m.prep)
        for name, ev in m.events.items():
            walk(li.protocol, ("events", name, "do"), ev.do)
        if m.psm is not None:
            for i, t in enumerate(m.psm.transitions):
                walk(li.protocol, ("psm", "transitions", i, "do"), t.do)
    return out


def _cond_key(when: Any) -> Any:
    """A condition compared by meaning of its syntax: spacing, parentheses and number bases
    do not matter ('x==0x1' is 'x == 1')."""
    if when is None:
        return None
    text = expr_text(when)
    try:
        return parse_expr(text)
    except ExprSyntaxError:
        return text


def _edge_hint(src: LayerInfo, dst: LayerInfo) -> Any:
    """For an edge condition naming a field of the child layer instead of the parent's."""

    def hint(parts: tuple[str, ...]) -> str | None:
        p = dst.protocol
        tables: dict[str, Any] = {"header": p.fields, "temp": p.temps, "perm": p.perms}
        table = tables.get(parts[0]) if len(parts) == 2 else None
        if table is not None and parts[1] in table:
            return (
                f"an edge condition is evaluated in the 'from' layer '{src.name}'; '{parts[1]}' belongs to "
                f"'{dst.name}', which is not parsed yet"
            )
        return None

    return hint


def _path_avoiding(
    roots: list[str], goal: str, avoid: str, children: dict[str, list[tuple[int, Edge]]]
) -> list[str] | None:
    """A path from an entry to goal that does not pass through avoid (breadth first)."""
    prev: dict[str, str | None] = {r: None for r in roots if r != avoid}
    todo = list(prev)
    while todo:
        n = todo.pop(0)
        if n == goal:
            out = [n]
            while prev[out[-1]] is not None:
                out.append(prev[out[-1]])  # type: ignore[arg-type]
            return out[::-1]
        for _, e in children.get(n, []):
            if e.to not in prev and e.to != avoid:
                prev[e.to] = n
                todo.append(e.to)
    return None


def _dym_name(name: str, options: Any) -> str | None:
    import difflib

    best = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return best[0] if best else None


def _layer_checker(
    ws: SpecLoader, info: StackInfo, li: LayerInfo, smap: Any, diags: list[Any]
) -> ExprChecker:
    params = {p: info.layers[t].protocol for p, t in li.bindings.items() if t in info.layers}
    return ExprChecker(li.protocol, params, smap, diags)


def _dominators(
    roots: list[str], nodes: list[str], children: dict[str, list[tuple[int, Edge]]]
) -> dict[str, set[str]]:
    # A virtual root above every entry layer: a layer dominates another when every path from
    # any entry passes through it.
    entry = "<capture>"
    children = {
        **children,
        entry: [(-1, Edge.model_validate({"from": entry, "to": r})) for r in roots],
    }
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
