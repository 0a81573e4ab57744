"""The semantic model of a checked stack: what sema computed, as the later stages read it.

`Compilation.resolved` (rubikgen/pipeline.py) builds it once (sema/resolve.py): per layer, every
expression and statement typed and bound in the layer's scope (``Node.type``, ``Name.ref``),
keyed by where the spec writes it — its document and its path in that document
(``("protocol", ("psm", "transitions", 2, "when"))``, ``("stack", ("handlers", "h", "when"))``)
— never by its text: two equal texts at two places are two entries. Lowering asks by the path
it is lowering and copies the trees into the IR; nothing after the check stage computes any of
it again. This module holds data only, so that the IR may import it while the checkers
(sema/resolve.py, sema/protocol.py, sema/scope.py) stay out of reach of lowering, the passes and
the back-ends (the `reads-the-model` contract of setup.cfg).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rubikgen.expr.ast import Expr, Name, Stmt
from rubikgen.expr.types import Resolved
from rubikgen.front.source import Path

__all__ = ["Key", "LayerModel", "Origin", "Resolution", "ResolvedLimits"]

# The document an expression is written in: the layer's protocol, or the stack (its edges,
# handlers and user-defined events on the layer).
Origin = Literal["protocol", "stack"]
Key = tuple[Origin, Path]


@dataclass
class LayerModel:
    layer: str
    exprs: dict[Key, Expr] = field(default_factory=dict)
    stmts: dict[Key, Stmt] = field(default_factory=dict)
    # the names lowering writes itself (``current_state``, the states, ``event.E``, the
    # variables), bound by sema in the layer's scope with every context open
    names: dict[tuple[str, ...], Resolved] = field(default_factory=dict)
    # what else sema computes from the layer's protocol for the later stages: each field's bit
    # offset from the header's start where it is fixed (sema/checksums.py), and `timeout:` and
    # `linger:` in seconds (None: not written; 0: not a duration, which the check rejected)
    fixed_bits: dict[str, int] = field(default_factory=dict)
    timeout_s: float | None = None
    linger_s: float | None = None

    def name(self, parts: tuple[str, ...]) -> Name:
        """A bound, typed name of this layer (``current_state``, a state, ``event.E``)."""
        r = self.names.get(parts)
        if r is None:
            raise KeyError(f"layer {self.layer}: name {'.'.join(parts)!r} was not bound by sema")
        return Name(parts, type=r.type, ref=r)

    def expr(self, path: Path, origin: Origin = "protocol") -> Expr:
        """The typed expression written at ``path`` of the layer's protocol (or of the stack)."""
        e = self.exprs.get((origin, path))
        if e is None:
            raise KeyError(f"layer {self.layer}: no expression resolved at {origin} {path}")
        return e

    def stack_expr(self, path: Path) -> Expr:
        return self.expr(path, "stack")

    def stmt(self, path: Path) -> Stmt:
        """The typed statement written at ``path`` of the layer's protocol."""
        s = self.stmts.get(("protocol", path))
        if s is None:
            raise KeyError(f"layer {self.layer}: no statement resolved at {path}")
        return s


@dataclass(frozen=True)
class ResolvedLimits:
    """A stack's memcaps per context (`limits:`) with the defaults filled in: reassembly and
    flows in bytes (UINT64_MAX: none), and the policy (sema/limits.py computes it)."""

    reassembly: int
    flows: int
    policy: str


@dataclass
class Resolution:
    # per layer: its expressions, statements and names, typed and bound in the layer's scope
    layers: dict[str, LayerModel] = field(default_factory=dict)
    # every name any spec expression reads (statements: their values), as written; a superset
    # of what the per-packet function reads, for dead-store elimination
    read_names: set[tuple[str, ...]] = field(default_factory=set)
    limits: ResolvedLimits | None = None
