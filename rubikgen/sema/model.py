"""The semantic model of a checked stack: what sema computed, as the later stages read it.

`Compilation.resolved` (rubikgen/pipeline.py) builds it once (sema/resolve.py); lowering copies
it into the IR (`Program.exprs`, `Program.read_names`) and nothing after lowering computes any
of it again. This module holds data only, so that the IR may import it while the checkers
(sema/resolve.py, sema/protocol.py, sema/scope.py) stay out of reach of lowering, the passes and
the back-ends (the `reads-the-model` contract of setup.cfg).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.expr.table import ExprTable

__all__ = ["Resolution"]


@dataclass
class Resolution:
    # per layer: its expressions, statements and names, typed and bound in the layer's scope
    layers: dict[str, ExprTable] = field(default_factory=dict)
    # every name any spec expression reads (statements: their values), as written; a superset
    # of what the per-packet function reads, for dead-store elimination
    read_names: set[tuple[str, ...]] = field(default_factory=set)
