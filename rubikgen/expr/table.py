"""The resolved expressions of one layer, as sema typed them (the one place later stages ask).

Sema checks every expression and statement of a layer once, in the layer's scope (its
protocol with the parameters bound to the stack's layers), and keeps the typed tree
(``Node.type``, ``Name.ref``) by its source text: within one layer a text always means the
same thing, so lowering and the back-end look expressions up by the text the model holds
instead of parsing and checking it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ast import Expr, Name, Stmt
from .types import Resolved

__all__ = ["ExprTable", "text_of"]


def text_of(value: Any) -> str:
    """The source text of an expression value as the models hold it (a string, or a YAML
    number or boolean written without quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class ExprTable:
    layer: str
    exprs: dict[str, Expr] = field(default_factory=dict)
    stmts: dict[str, Stmt] = field(default_factory=dict)
    # the names lowering writes itself (``current_state``, the states, ``event.E``, the
    # variables), bound by sema in the layer's scope with every context open
    names: dict[tuple[str, ...], Resolved] = field(default_factory=dict)

    def name(self, parts: tuple[str, ...]) -> Name:
        """A bound, typed name of this layer (``current_state``, a state, ``event.E``)."""
        r = self.names.get(parts)
        if r is None:
            raise KeyError(f"layer {self.layer}: name {'.'.join(parts)!r} was not bound by sema")
        return Name(parts, type=r.type, ref=r)

    def expr(self, value: Any) -> Expr:
        text = text_of(value)
        e = self.exprs.get(text)
        if e is None:
            raise KeyError(f"layer {self.layer}: expression {text!r} was not resolved by sema")
        return e

    def stmt(self, text: str) -> Stmt:
        s = self.stmts.get(text)
        if s is None:
            raise KeyError(f"layer {self.layer}: statement {text!r} was not resolved by sema")
        return s
