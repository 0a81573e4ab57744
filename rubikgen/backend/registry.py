"""Renderer registries: what a back-end target writes for each IR node kind.

A target is one `Registry`: a table from an IR class (an instruction of `rubikgen/ir/instrs.py`,
a terminator of `rubikgen/ir/nodes.py`) to the function that renders it. A renderer is a plain
function of the node, its layer's view (`LayerC`) and the target's typed context (`CContext`
for C: the per-program state, and `cx.walk` for the function being written):

    C = Registry("c")

    @C.register(I.Fire)
    def fire(ins: I.Fire, lc: LayerC, cx: CContext) -> str:
        return f"ev_{lc.name}[{lc.ev_index(ins.event)}] = 1;"

A second target is a registry of its own, derived from another to reuse what applies:
`Registry("stage1", base=C)` looks a kind up in its own table first, then in C's (the burst
stage, backend/burst_c.py, is one). `missing(kinds)` says which kinds a target cannot render
(tests/backend/test_backend_registry.py checks that C renders every opcode)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

Ctx = TypeVar("Ctx")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Registry", "UnknownNode"]


class UnknownNode(LookupError):
    """A node kind the target has no renderer for (a bug of the back-end, not of the specs)."""


class Registry(Generic[Ctx]):
    def __init__(self, target: str, base: Registry[Ctx] | None = None) -> None:
        self.target = target
        self.base = base
        self._table: dict[type, Callable[[Any, Any, Ctx], Any]] = {}

    def register(self, *kinds: type) -> Callable[[F], F]:
        """Decorator: the function renders nodes of these classes (one registration per class
        and registry: a second one is a mistake, not an override; derive a registry for that)."""

        def deco(fn: F) -> F:
            for k in kinds:
                if k in self._table:
                    raise ValueError(f"{self.target}: {k.__name__} registered twice")
                self._table[k] = fn
            return fn

        return deco

    def lookup(self, kind: type) -> Callable[[Any, Any, Ctx], Any]:
        reg: Registry[Ctx] | None = self
        while reg is not None:
            fn = reg._table.get(kind)
            if fn is not None:
                return fn
            reg = reg.base
        raise UnknownNode(f"back-end {self.target!r} renders no {kind.__name__}")

    def render(self, node: object, lc: Any, cx: Ctx) -> Any:
        """The rendering of node (its renderer's result: C text, or lines for a terminator)."""
        return self.lookup(type(node))(node, lc, cx)

    def missing(self, kinds: Iterable[type]) -> list[type]:
        out = []
        for k in kinds:
            try:
                self.lookup(k)
            except UnknownNode:
                out.append(k)
        return out
