"""Where IR elements come from in the specs, and branch conditions (used by blocks and by
instructions, so they sit below both)."""

from __future__ import annotations

from dataclasses import dataclass

from rubikgen.expr.ast import Expr

__all__ = ["Cond", "Src"]


@dataclass(frozen=True)
class Src:
    """Where something comes from in the specs: file (as displayed) and line."""

    file: str
    line: int
    what: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" {self.what}" if self.what else "")


@dataclass(frozen=True)
class Cond:
    """A branch condition.

    kind ``expr``: ``expr`` (a typed, resolved AST over the layer's names, virtual atoms
    already replaced by ``__v.K`` names); ``parse_ok``: the header parsed; ``found``: the lookup hit;
    ``has_inst``: the packet has a real instance; ``accept``: the state is an accept state;
    ``loop``: the self-loop decision holds and the repeat bound is not reached;
    ``create_if``: like expr, for the selector's guard."""

    kind: str
    expr: Expr | None = None
    text: str = ""  # the source text, for dumps

    def show(self) -> str:
        return self.text if self.kind in ("expr", "create_if") else self.kind
