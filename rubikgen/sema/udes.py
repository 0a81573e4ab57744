"""User-defined events of a stack (mOS's UDEs): `events: {NAME: {on: LAYER.EVENT, when: ...}}`.

A UDE is a named filter over one event of one layer: it fires on a packet when its base event
fired and its `when` holds. It runs in the layer's event order like a handler without a C
function (so it costs what a `when` on the base event costs) and sets a fired flag that
handlers hook with `with:` exactly as they hook built-in events. The checks here: the name,
the base event (layer, event, not a lifecycle event), `when` in the layer's scope, `before`;
cycles among UDEs, events and handlers are found with the layer's handlers
(stack.py `_check_handler_order`, which adds :func:`ude_edges`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rubikgen.front.source import Path
from rubikgen.sema import builtins as B
from rubikgen.sema.builtins import lifecycle_hooks
from rubikgen.sema.protocol import _dym
from rubikgen.sema.symbols import check_ident

if TYPE_CHECKING:
    from rubikgen.models.stack import Stack


class _StackCheck(Protocol):
    """What the checks here read of the stack check (sema/stack.py's `_StackCheck`), named
    structurally so that this module does not import stack.py (which imports it)."""

    st: Stack
    smap: Any
    diags: list[Any]
    info: Any
    ws: Any


__all__ = ["check_udes", "ude_edges", "udes_of"]


def udes_of(st: Stack, layer: str) -> list[str]:
    """The UDEs raised on `layer`, in declaration order."""
    return [n for n, ev in st.events.items() if ev.layer == layer]


def _names_on(c: _StackCheck, layer: str) -> set[str]:
    """What `before`/`with` may name on a layer: its protocol's events (built-ins included),
    its handlers and its UDEs."""
    li = c.info.layers[layer]
    return (
        set(li.protocol.all_events())
        | {h for h, hd in c.st.handlers.items() if hd.layer == layer}
        | set(udes_of(c.st, layer))
    )


def check_udes(c: _StackCheck, layer_checker: Callable[..., Any]) -> None:
    """Names, base events, conditions and `before` of the stack's UDEs; `layer_checker(ws, info,
    layer, smap, diags)` gives the expression checker of a layer (stack.py's)."""
    st, smap, diags = c.st, c.smap, c.diags
    for name, ev in st.events.items():
        ep: Path = ("events", name)
        check_ident(name, "event name", smap, ep, diags)
        if name in st.handlers:
            diags.append(
                smap.diag(
                    "RG060",
                    f"event '{name}' has the name of a handler",
                    ep,
                    key=True,
                    hint="'with' and 'before' could not tell them apart; rename one",
                )
            )
        layer, _, base = ev.on.partition(".")
        if not base or "." in base:
            diags.append(
                smap.diag(
                    "RG041",
                    f"'on: {ev.on}' does not name a layer's event",
                    ep + ("on",),
                    hint="write LAYER.EVENT, e.g. 'on: tcp.asm'",
                )
            )
            continue
        if layer not in st.layers:
            diags.append(
                smap.diag(
                    "RG052",
                    f"unknown layer '{layer}'",
                    ep + ("on",),
                    hint=_dym(layer, st.layers),
                )
            )
            continue
        li = c.info.layers.get(layer)
        if li is None:  # its protocol has errors, reported there
            continue
        if name in li.protocol.all_events():
            what = (
                "a built-in event"
                if name in B.BUILTIN_EVENTS and name not in li.protocol.events
                else f"an event of protocol '{li.protocol.name}'"
            )
            diags.append(
                smap.diag(
                    "RG022",
                    f"event '{name}' has the name of {what} on layer '{layer}'",
                    ep,
                    key=True,
                    hint="'with' and 'before' could not tell them apart; rename it",
                )
            )
        _check_base(c, name, layer, base, ep + ("on",))
        ec = layer_checker(c.ws, c.info, li, smap, diags)
        if ev.when is not None:
            ec.expr(ep + ("when",), ev.when, B.HANDLER, "bool")
            ec.virtual_needs_sequence(
                li.protocol.model.sequence is not None,
                f"layer '{layer}' (protocol '{li.protocol.name}')",
            )
        known = _names_on(c, layer)
        for j, b in enumerate(ev.before):
            bp = ep + ("before", j)
            if b in B.LIFECYCLE_EVENTS:
                diags.append(
                    smap.diag(
                        "RG043",
                        f"'before: {b}' orders nothing: '{b}' is raised when the instance ends, "
                        "outside any packet",
                        bp,
                    )
                )
            elif b not in known:
                diags.append(_unknown(c, b, layer, bp, known))


def _check_base(c: _StackCheck, name: str, layer: str, base: str, p: Path) -> None:
    st, smap, diags = c.st, c.smap, c.diags
    if base in B.LIFECYCLE_EVENTS:
        diags.append(
            smap.diag(
                "RG043",
                f"event '{name}' cannot filter '{base}': it is raised when an instance ends, "
                "outside any packet",
                p,
                hint=f"hook it with a lifecycle handler ({{layer: {layer}, with: {base}}})",
            )
        )
        return
    if base == name:
        diags.append(smap.diag("RG040", f"event '{name}' is its own base event", p))
        return
    known = _names_on(c, layer) - {name}
    if base not in known:
        diags.append(_unknown(c, base, layer, p, known))
        return
    if base in st.handlers and st.handlers[base].with_ is not None:
        if lifecycle_hooks(st.handlers[base].with_):
            diags.append(
                smap.diag(
                    "RG060",
                    f"handler '{base}' runs when an instance ends, outside any packet; event "
                    f"'{name}' cannot filter it",
                    p,
                )
            )


def _unknown(c: _StackCheck, what: str, layer: str, p: Path, known: set[str]) -> Any:
    """RG041 for a name that is no event of `layer`; when it is one of another layer (a UDE,
    a handler, a protocol event), RG060 saying which."""
    st, smap = c.st, c.smap
    elsewhere = None
    if what in st.events:
        elsewhere = st.events[what].layer
    elif what in st.handlers:
        elsewhere = st.handlers[what].layer
    if elsewhere is not None and elsewhere != layer:
        return smap.diag(
            "RG060",
            f"'{what}' is raised on layer '{elsewhere}', not on '{layer}'",
            p,
            hint="events are ordered and filtered within one layer",
        )
    hint = _dym(what, known) or (
        f"events of layer '{layer}': "
        + ", ".join(sorted(k for k in known if k not in B.BUILTIN_EVENTS))
        + f"; built-in: {', '.join(e for e in B.BUILTIN_EVENTS if e not in B.LIFECYCLE_EVENTS)}"
    )
    return smap.diag("RG041", f"layer '{layer}' has no event '{what}'", p, hint=hint)


def ude_edges(st: Stack, layer: str) -> dict[str, list[tuple[str, Path]]]:
    """The order the layer's UDEs impose (a -> [(b, path)]: a runs before b), with the path
    of the relation for RG040: each runs after its base event and before its `before`."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for name in udes_of(st, layer):
        ev = st.events[name]
        if ev.base:
            out.setdefault(ev.base, []).append((name, ("events", name, "on")))
        for j, b in enumerate(ev.before):
            out.setdefault(name, []).append((b, ("events", name, "before", j)))
    return out
