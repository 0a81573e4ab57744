"""Resolution of a checked stack: every expression and statement typed once, per layer.

The validator checks each protocol with the protocols its parameters may name; a stack binds
each parameter to one layer, whose fields may have other types (tcp over ipv4 or over ipv6).
So, once the stack is valid, each layer's protocol is checked again with its parameters bound
to the stack's layers, and the checker keeps every typed tree (``Node.type``, ``Name.ref``)
in the layer's :class:`LayerModel`, by where the spec writes it (document and path, never its
text): the one symbol table lowering, the passes and the back-end read. Nothing after this
parses or type-checks an expression.
"""

from __future__ import annotations

from typing import Any

from rubikgen.expr import parse_expr, parse_stmt
from rubikgen.expr.ast import Assign, Name, walk
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import SourceMap
from rubikgen.models.protocol import Linger
from rubikgen.models.stack import Stack
from rubikgen.sema import builtins as B
from rubikgen.sema.builtins import lifecycle_hooks
from rubikgen.sema.checksums import fixed_offsets
from rubikgen.sema.limits import parse_duration, resolved_limits
from rubikgen.sema.model import LayerModel, Resolution
from rubikgen.sema.protocol import ExprChecker, check_protocol
from rubikgen.sema.scope import ProtocolScope
from rubikgen.sema.stack_info import StackInfo
from rubikgen.sema.symbols import ProtocolInfo

__all__ = ["Resolution", "resolve_stack"]

_ANY = B.Context("any context", virtual=True)  # names lowering writes: every context open


def resolve_stack(stack: Stack, info: StackInfo, smap: SourceMap) -> Resolution:
    """Resolve every layer of a stack that passed validation; ValueError if some expression
    does not check in its layer (the validator should have said so)."""
    res = Resolution()
    for L, li in info.layers.items():
        params = {p: info.layers[t].protocol for p, t in li.bindings.items() if t in info.layers}
        scope = ProtocolScope(li.protocol, params, _ANY, dict(li.bindings))
        table = LayerModel(L)
        _bind_lowering_names(table, scope, li.protocol)
        m = li.protocol.model
        table.fixed_bits = fixed_offsets(li.protocol)
        if m.timeout is not None:
            table.timeout_s = parse_duration(m.timeout) or 0.0
        if m.linger is not None:
            lg = m.linger
            table.linger_s = parse_duration(lg.time if isinstance(lg, Linger) else lg) or 0.0
        diags: list[Diagnostic] = []
        ec = ExprChecker(li.protocol, params, li.protocol.smap, diags, table, dict(li.bindings))
        check_protocol(li.protocol, params, ec)
        # the stack's expressions on this layer: its edges and its handlers
        sc = ExprChecker(li.protocol, params, smap, diags, table, dict(li.bindings), "stack")
        for i, e in info.children.get(L, []):
            if e.when is not None:
                sc.expr(("edges", i, "when"), e.when, B.EDGE, "bool")
            if e.input is not None and e.to == L:
                sc.expr(("edges", i, "input"), e.input, B.EDGE, "bytes")
        for hn, h in stack.handlers.items():
            if h.layer != L:
                continue
            ctx = B.LIFECYCLE if lifecycle_hooks(h.with_) else B.HANDLER
            hp = ("handlers", hn)
            if h.when is not None:
                sc.expr(hp + ("when",), h.when, ctx, "bool")
            sc.args(hp + ("args",), h.args, B.Context(**{**ctx.__dict__, "virtual": False}))
        for un, u in stack.events.items():  # user-defined events: their filters
            if u.layer == L and u.when is not None:
                sc.expr(("events", un, "when"), u.when, B.HANDLER, "bool")
        errors = [d for d in diags if d.severity == "error"]
        if errors:
            d = errors[0]
            raise ValueError(f"layer {L}: {d.file}:{d.line}:{d.col}: {d.code} {d.message}")
        res.layers[L] = table
    res.limits = resolved_limits(stack.limits)
    _scan_reads(res.read_names, stack.model_dump())
    models = {id(li.protocol.model): li.protocol.model for li in info.layers.values()}
    for model in models.values():
        _scan_reads(res.read_names, model.model_dump(by_alias=True))
    return res


def _bind_lowering_names(table: LayerModel, scope: ProtocolScope, info: ProtocolInfo) -> None:
    """The names lowering writes itself, bound now so that nothing after this stage asks the
    scope: the PSM's state and states, every event's fired flag, every variable."""
    wanted: list[tuple[str, ...]] = [("event", e) for e in info.all_events()]
    if info.states:
        wanted += [("current_state",), *((s,) for s in info.states)]
    wanted += [("temp", v) for v in info.temps] + [("perm", v) for v in info.perms]
    for parts in wanted:
        r = scope.resolve(parts)
        if r is not None:
            table.names[parts] = r


def _scan_reads(out: set[tuple[str, ...]], node: Any) -> None:
    """Every name read by any expression or statement value among the model's strings (a
    string that parses as neither reads nothing): names in `with` lists and header steps
    count too, so the set errs on keeping."""
    if isinstance(node, dict):
        for v in node.values():
            _scan_reads(out, v)
    elif isinstance(node, list | tuple):
        for v in node:
            _scan_reads(out, v)
    elif isinstance(node, str):
        try:
            st: Any = parse_stmt(node)
            e: Any = st.value if isinstance(st, Assign) else st
        except Exception:
            try:
                e = parse_expr(node)
            except Exception:
                return
        for n in walk(e):
            if isinstance(n, Name):
                out.add(n.parts)
