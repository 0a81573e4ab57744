"""Stack composition: `extends:` a base stack, `remove:` parts of it, `graft:` copies of subtrees.

Composition happens before the semantic checks: the result is one ordinary `Stack` model, so the
checker, the IR and the back-end never see `extends`. Every element of the result keeps the
position of the file that defined it through a `ComposedMap`, a source map that forwards each
layer, edge, handler, entry and subtree to the source map (and path) it came from. Diagnostics
and the generated C's file:line comments therefore name the extending file or the base, whichever
wrote the element.

Order, for a stack S extending B: B is composed first (recursively); then S's `remove:` applies
to it, then S's layers and handlers replace or add by name, S's edges are appended, S's `entry`
replaces B's (a mapping replaces link type by link type), S's subtrees are added, and last S's
grafts copy subtrees of the result.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rubikgen.front import specpath
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Path, Pos, SourceMap
from rubikgen.models.stack import Edge, Graft, Handler, LayerInst, Stack, StackEvent, Subtree

if TYPE_CHECKING:
    from rubikgen.front.document import Document, SpecLoader

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Loc = tuple[SourceMap, Path]  # a leaf source map and the path of the element in it


def resolve_stack_ref(ref: str, from_file: str) -> str:
    """Absolute path of the stack file that `extends: ref` in from_file names (or where it was
    first looked for, to report).

    Resolved like a layer's protocol reference (rubikgen/front/specpath.py): relative to the extending
    file, then in the spec search path; `stock:NAME` names a stock stack (`stock:tcp_ip.yaml`).
    """
    return specpath.locate(ref, os.path.dirname(os.path.abspath(from_file)), ("stacks",))


def stack_ref_hint(ref: str, from_file: str) -> str:
    """Where an unresolved `extends` reference was looked for."""
    base_dir = os.path.dirname(os.path.abspath(from_file))
    res = specpath.resolve(ref, base_dir, ("stacks",))
    return specpath.hint(ref, res, base_dir, "stacks")


class ComposedMap(SourceMap):
    """A source map whose elements may live in other files (see the module docstring)."""

    def __init__(self, own: SourceMap) -> None:
        super().__init__(own.file, own.values, own.keys, own.text, own.reported)
        self.own = own
        self.links: dict[Path, Loc] = {}
        # (subtree, prefix, layers of the copy) per graft, for drawings
        self.grafts: list[tuple[str, str, list[str]]] = []

    def locate(self, path: Path) -> tuple[SourceMap, Path]:
        p = tuple(path)
        for n in range(len(p), 0, -1):
            hit = self.links.get(p[:n])
            if hit is not None:
                return hit[0], hit[1] + p[n:]
        return self.own, p

    def pos(self, path: Path) -> Pos:
        sm, q = self.locate(path)
        return sm.pos(q)

    def key_pos(self, path: Path) -> Pos:
        sm, q = self.locate(path)
        return sm.key_pos(q)

    def expr_pos(self, path: Path, offset: int, value: str | None = None) -> tuple[int, int, bool]:
        sm, q = self.locate(path)
        return sm.expr_pos(q, offset, value)

    def diag(self, code: str, message: str, path: Path, **kw: Any) -> Diagnostic:
        sm, q = self.locate(path)
        d = sm.diag(code, message, q, **kw)
        if sm.file != self.file:
            d.notes.append(f"in stack {self.file}, which composes it")
        return d


def locate(smap: SourceMap, path: Path) -> Loc:
    """The leaf source map and path of an element (itself for a plain source map)."""
    if isinstance(smap, ComposedMap):
        return smap.locate(path)
    return smap, tuple(path)


@dataclass
class _Parts:
    layers: dict[str, tuple[LayerInst, Loc]] = field(default_factory=dict)
    edges: list[tuple[Edge, Loc]] = field(default_factory=list)
    handlers: dict[str, tuple[Handler, Loc]] = field(default_factory=dict)
    events: dict[str, tuple[StackEvent, Loc]] = field(default_factory=dict)
    entry: dict[str, tuple[str, Loc]] = field(default_factory=dict)  # '*' = every link type
    subtrees: dict[str, tuple[Subtree, Loc]] = field(default_factory=dict)
    grafts: list[tuple[str, str, list[str]]] = field(default_factory=list)
    limits: Any = None  # the stack's `limits:` (an extending stack's own replace the base's)


def _parts(st: Stack, smap: SourceMap) -> _Parts:
    out = _Parts()
    for n, layer in st.layers.items():
        out.layers[n] = (layer, locate(smap, ("layers", n)))
    for i, e in enumerate(st.edges):
        out.edges.append((e, locate(smap, ("edges", i))))
    for n, h in st.handlers.items():
        out.handlers[n] = (h, locate(smap, ("handlers", n)))
    for n, ev in st.events.items():
        out.events[n] = (ev, locate(smap, ("events", n)))
    if isinstance(st.entry, str):
        out.entry["*"] = (st.entry, locate(smap, ("entry",)))
    elif st.entry is not None:
        for link, ename in st.entry.items():
            out.entry[link] = (ename, locate(smap, ("entry", link)))
    for n, s in st.subtrees.items():
        out.subtrees[n] = (s, locate(smap, ("subtrees", n)))
    out.limits = st.limits
    return out


def _rebase(layer: LayerInst, from_dir: str, to_dir: str) -> LayerInst:
    """The layer with its protocol path made relative to to_dir instead of from_dir."""
    if from_dir == to_dir:
        return layer
    p = os.path.relpath(os.path.normpath(os.path.join(from_dir, layer.protocol)), to_dir)
    return layer.model_copy(update={"protocol": p})


def _dym(name: str, options: Any) -> str | None:
    import difflib

    best = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f"did you mean '{best[0]}'?" if best else None


def compose(ws: SpecLoader, doc: Document) -> None:
    """Replaces doc.model and doc.smap by the composed stack, or doc.model by None on errors."""
    st: Stack = doc.model  # type: ignore[assignment]
    own = doc.smap
    diags = doc.diags
    n_errors = sum(d.severity == "error" for d in diags)
    if st.extends is None:
        for key in ("entry", "layers"):
            if (key == "entry" and st.entry is None) or (key == "layers" and not st.layers):
                diags.append(
                    own.diag(
                        "RG004",
                        f"missing required key '{key}'"
                        if (key,) not in own.values
                        else "a stack needs at least one layer",
                        (key,) if (key,) in own.values else (),
                        hint=f"add '{key}:', or 'extends: BASE.yaml' to start from another stack",
                    )
                )
        if st.remove is not None:
            diags.append(
                own.diag(
                    "RG052",
                    "'remove' needs a base stack",
                    ("remove",),
                    key=True,
                    hint="add 'extends: BASE.yaml', or delete the elements directly",
                )
            )
        if sum(d.severity == "error" for d in diags) > n_errors:
            doc.model = None
            return
        if not st.graft and not st.subtrees:
            return
        parts = _parts(st, own)
    else:
        base = resolve_stack_ref(st.extends, doc.abspath)
        bdoc = None
        if base in ws.loading:
            diags.append(
                own.diag(
                    "RG050",
                    f"'extends' cycle: '{st.extends}' extends this stack again",
                    ("extends",),
                    hint="a stack cannot extend itself, directly or through others",
                )
            )
        elif (
            res := specpath.resolve(st.extends, os.path.dirname(doc.abspath), ("stacks",))
        ).path is None:
            what = specpath.problem(res, "stack file")
            diags.append(
                own.diag(
                    "RG007",
                    f"base stack '{st.extends}' {what}",
                    ("extends",),
                    hint=stack_ref_hint(st.extends, doc.abspath),
                )
            )
        else:
            bdoc = ws.load(base)
            if bdoc.kind == "protocol":
                diags.append(
                    own.diag("RG051", f"'{st.extends}' is a protocol, not a stack", ("extends",))
                )
                bdoc = None
            elif bdoc.model is None:
                diags.append(
                    own.diag(
                        "RG007",
                        f"base stack '{st.extends}' has errors; see its diagnostics",
                        ("extends",),
                        severity="note",
                    )
                )
                doc.model = None
                return
        if bdoc is None:
            doc.model = None
            return
        doc.sources += [s for s in bdoc.sources if s not in doc.sources]
        bst: Stack = bdoc.model  # type: ignore[assignment]
        parts = _parts(bst, bdoc.smap)
        if isinstance(bdoc.smap, ComposedMap):
            parts.grafts += bdoc.smap.grafts
        bdir, mydir = os.path.dirname(bdoc.abspath), os.path.dirname(doc.abspath)
        parts.layers = {n: (_rebase(li, bdir, mydir), loc) for n, (li, loc) in parts.layers.items()}
        _remove(st, own, parts, diags)
        for n, layer in st.layers.items():
            parts.layers[n] = (layer, (own, ("layers", n)))
        for i, e in enumerate(st.edges):
            parts.edges.append((e, (own, ("edges", i))))
        for n, h in st.handlers.items():
            parts.handlers[n] = (h, (own, ("handlers", n)))
        for n, ev in st.events.items():
            parts.events[n] = (ev, (own, ("events", n)))
        if isinstance(st.entry, str):
            parts.entry = {"*": (st.entry, (own, ("entry",)))}
        elif st.entry is not None:
            if "*" in parts.entry:
                parts.entry = {}
            for link, ename in st.entry.items():
                parts.entry[link] = (ename, (own, ("entry", link)))
        for n, s in st.subtrees.items():
            parts.subtrees[n] = (s, (own, ("subtrees", n)))
    for i, g in enumerate(st.graft):
        _graft(parts, own, ("graft", i), g, diags)
    for sname, (sub, (ssm, spath)) in parts.subtrees.items():
        for j, n in enumerate(sub.layers):
            if n not in parts.layers:
                diags.append(_unknown_in_subtree(sname, n, ssm, spath + ("layers", j), parts))
    if sum(d.severity == "error" for d in diags) > n_errors:
        doc.model = None
        return
    _finish(doc, st, own, parts)


def _remove(st: Stack, own: SourceMap, parts: _Parts, diags: list[Diagnostic]) -> None:
    rm = st.remove
    if rm is None:
        return

    def missing(what: str, name: str, path: Path, options: Any) -> None:
        diags.append(
            own.diag(
                "RG052",
                f"the base stack has no {what} '{name}' to remove",
                path,
                hint=_dym(name, options),
            )
        )

    for j, n in enumerate(rm.layers):
        if n not in parts.layers:
            missing("layer", n, ("remove", "layers", j), parts.layers)
            continue
        del parts.layers[n]
        # The edges into and out of a removed layer and its handlers cannot stand on their own.
        parts.edges = [(e, loc) for e, loc in parts.edges if n not in (e.from_, e.to)]
        parts.handlers = {h: v for h, v in parts.handlers.items() if v[0].layer != n}
        parts.events = {x: v for x, v in parts.events.items() if v[0].layer != n}
        for sn, (sub, loc) in list(parts.subtrees.items()):
            if n in sub.layers:
                rest = [x for x in sub.layers if x != n]
                parts.subtrees[sn] = (sub.model_copy(update={"layers": rest}), loc)
    for j, ref in enumerate(rm.edges):
        keep = [(e, loc) for e, loc in parts.edges if (e.from_, e.to) != (ref.from_, ref.to)]
        if len(keep) == len(parts.edges):
            missing("edge", f"{ref.from_} -> {ref.to}", ("remove", "edges", j), [])
        parts.edges = keep
    for key, table, what in (
        ("handlers", parts.handlers, "handler"),
        ("events", parts.events, "event"),
        ("entry", parts.entry, "entry for link type"),
        ("subtrees", parts.subtrees, "subtree"),
    ):
        for j, n in enumerate(getattr(rm, key)):
            if n not in table:
                missing(what, n, ("remove", key, j), table)
            else:
                del table[n]


def _graft(parts: _Parts, own: SourceMap, gp: Path, g: Graft, diags: list[Diagnostic]) -> None:
    if g.subtree not in parts.subtrees:
        diags.append(
            own.diag(
                "RG052",
                f"unknown subtree '{g.subtree}'",
                gp + ("subtree",),
                hint=_dym(g.subtree, parts.subtrees)
                or (
                    f"subtrees: {', '.join(parts.subtrees)}"
                    if parts.subtrees
                    else "define it under 'subtrees:' (here or in the base stack)"
                ),
            )
        )
        return
    if not IDENT.match(g.prefix):
        diags.append(
            own.diag(
                "RG019",
                f"prefix '{g.prefix}' does not make identifiers",
                gp + ("prefix",),
                hint="use letters, digits and '_', not starting with a digit",
            )
        )
        return
    sub, (ssm, spath) = parts.subtrees[g.subtree]
    group: list[str] = []
    for n in sub.layers:
        if n in parts.layers:
            group.append(n)  # unknown names are reported once, after every graft
    ren = {n: g.prefix + n for n in group}
    clash = [ren[n] for n in group if ren[n] in parts.layers]
    hren = {h: g.prefix + h for h, (hd, _) in parts.handlers.items() if hd.layer in ren}
    if not g.handlers:
        hren = {}
    clash += [hren[h] for h in hren if hren[h] in parts.handlers]
    if clash:
        diags.append(
            own.diag(
                "RG022",
                f"the copy of subtree '{g.subtree}' would redefine {', '.join(sorted(clash))}",
                gp + ("prefix",),
                hint="choose another prefix",
            )
        )
        return
    parts.grafts.append((g.subtree, g.prefix, [ren[n] for n in group]))
    for n in group:
        layer, loc = parts.layers[n]
        args = {p: ren.get(t, t) for p, t in layer.args.items()}
        parts.layers[ren[n]] = (layer.model_copy(update={"args": args}), loc)
    for e, loc in list(parts.edges):
        if e.from_ in ren and e.to in ren:
            parts.edges.append((e.model_copy(update={"from_": ren[e.from_], "to": ren[e.to]}), loc))
    for h, nh in hren.items():
        hd, loc = parts.handlers[h]

        def rn(x: Any) -> Any:
            if isinstance(x, list):
                return [hren.get(y, y) for y in x]
            return hren.get(x, x) if isinstance(x, str) else x

        parts.handlers[nh] = (
            hd.model_copy(
                update={"layer": ren[hd.layer], "before": rn(hd.before), "with_": rn(hd.with_)}
            ),
            loc,
        )


def _unknown_in_subtree(
    sname: str, n: str, ssm: SourceMap, path: Path, parts: _Parts
) -> Diagnostic:
    return ssm.diag(
        "RG052", f"subtree '{sname}' names unknown layer '{n}'", path, hint=_dym(n, parts.layers)
    )


def _finish(doc: Document, st: Stack, own: SourceMap, parts: _Parts) -> None:
    cmap = ComposedMap(own)
    cmap.grafts = [(s, p, [n for n in ls if n in parts.layers]) for s, p, ls in parts.grafts]
    for n, (_, loc) in parts.layers.items():
        cmap.links[("layers", n)] = loc
    for i, (_, loc) in enumerate(parts.edges):
        cmap.links[("edges", i)] = loc
    for n, (_, loc) in parts.handlers.items():
        cmap.links[("handlers", n)] = loc
    for n, (_, loc) in parts.subtrees.items():
        cmap.links[("subtrees", n)] = loc
    for n, (_, loc) in parts.events.items():
        cmap.links[("events", n)] = loc
    entry: str | dict[str, str] | None
    if set(parts.entry) == {"*"}:
        entry = parts.entry["*"][0]
        cmap.links[("entry",)] = parts.entry["*"][1]
    else:
        entry = {k: v[0] for k, v in parts.entry.items()}
        for k, (_, loc) in parts.entry.items():
            cmap.links[("entry", k)] = loc
    if not entry or not parts.layers:
        key = "entry" if not entry else "layers"
        doc.diags.append(
            own.diag(
                "RG004",
                f"the composed stack has no {'entry' if key == 'entry' else 'layers'}",
                (),
                hint=f"add '{key}:'",
            )
        )
        doc.model = None
        return
    doc.model = Stack(
        stack=st.stack,
        doc=st.doc,
        entry=entry,
        layers={n: v[0] for n, v in parts.layers.items()},
        edges=[e for e, _ in parts.edges],
        handlers={n: v[0] for n, v in parts.handlers.items()},
        events={n: v[0] for n, v in parts.events.items()},
        subtrees={n: v[0] for n, v in parts.subtrees.items()},
        limits=st.limits if st.limits is not None else parts.limits,
    )
    doc.smap = cmap
