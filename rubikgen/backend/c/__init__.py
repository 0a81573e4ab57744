"""The C target's renderers, one module per opcode family, registered in `C` (registry.py):
layer.py (enter, header, error), flow.py (keys, lookups, instances), seq.py (reassembly),
psm.py (state machine, events), calls.py (handlers), stmts.py (statements, self-loop),
transform.py (runtime transforms), rules.py (a rules file's opcodes), terms.py (block
terminators and branch conditions).
Importing the package registers them all."""

from __future__ import annotations

from . import calls, flow, layer, psm, rules, seq, stmts, terms, transform
from .registry import C

__all__ = ["C", "calls", "flow", "layer", "psm", "rules", "seq", "stmts", "terms", "transform"]
