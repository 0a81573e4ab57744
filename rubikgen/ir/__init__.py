"""The control-flow-graph IR of a stack's per-packet function (see nodes.py)."""

from .lower import lower_stack
from .lower_rules import lower_rules
from .nodes import Block, Branch, Call, Cond, Done, Instr, Jump, LayerIR, Program, Return, Src
from .printer import to_dot, to_text
from .verify import prune, verify

__all__ = [
    "Block",
    "Branch",
    "Call",
    "Cond",
    "Done",
    "Instr",
    "Jump",
    "LayerIR",
    "Program",
    "Return",
    "Src",
    "lower_rules",
    "lower_stack",
    "prune",
    "to_dot",
    "to_text",
    "verify",
]
