"""The control-flow-graph IR: blocks of typed instructions ending in one terminator.

One :class:`Program` holds the whole per-packet function of a stack: every layer's pipeline
(REQUIREMENTS R8.1) as blocks, joined by :class:`Call` terminators (enter a child layer with
an emulated return target) and :class:`Return` (back to whichever block called the layer).

Every instruction and terminator declares the resources it reads and writes, so passes can
compute dependencies (R8.3). Resources are strings ``KIND:layer``:

=========  =====================================================================
HEADER     the layer's parsed header fields, its input, cursor and payload
TEMP       temp variables
PERM       perm variables of the layer's instance (a foreign write names the owner layer)
STATE      the PSM state
SEQ        the reassembly sequence(s) of the instance
INST       which instance the packet has (lookup, create, destroy)
SDU        the data handed to the next layer
FIRED      per-packet fired flags of transitions and events
KEY        the selector key built from the packet
LOOP       the self-loop decision and repeat counter
RUNTIME    anything outside the function: handlers, observers, counters, tables
=========  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.expr.ast import Expr

from .cond import Cond, Src
from .instrs import OPCODES, Instr  # one dataclass per opcode
from .layout import LayerDesc, StackDesc
from .rules import RulesDesc

# The capture link kinds a stack's entry maps ('*' stands for all of them).
LINK_KINDS = ("ethernet", "null", "raw_ipv4", "raw_ipv6", "sll", "sll2", "ppp")

RESOURCE_KINDS = (
    "HEADER",
    "TEMP",
    "PERM",
    "STATE",
    "SEQ",
    "INST",
    "SDU",
    "FIRED",
    "KEY",
    "LOOP",
    "RUNTIME",
)


@dataclass
class Jump:
    target: str


@dataclass
class Branch:
    cond: Cond
    then: str
    else_: str
    layer: str
    reads: frozenset[str] = frozenset()


@dataclass
class Call:
    """Enter layer ``child`` on this layer's sdu; it returns to ``ret``."""

    child: str
    ret: str
    layer: str


@dataclass
class Return:
    """The layer is done: back to the block after the Call that entered it."""

    layer: str


@dataclass
class Done:
    """The packet is done (the end of the function)."""


Terminator = Jump | Branch | Call | Return | Done


@dataclass
class Block:
    name: str
    layer: str
    instrs: list[Instr] = field(default_factory=list)
    term: Terminator | None = None
    src: Src | None = None

    def successors(self) -> list[str]:
        t = self.term
        if isinstance(t, Jump):
            return [t.target]
        if isinstance(t, Branch):
            return [t.then, t.else_]
        if isinstance(t, Call):
            return [t.ret]
        return []


@dataclass
class LayerIR:
    """What the back-end needs about one layer beyond its blocks."""

    name: str
    index: int
    entry: str  # name of the layer's first block
    # virtual atoms: index -> (atom expression without v., source text)
    atoms: list[tuple[Expr, str]] = field(default_factory=list)
    # events and handlers in run order (names); handlers are marked in ``handlers``
    order: list[str] = field(default_factory=list)
    handlers: list[str] = field(default_factory=list)
    # lifecycle handlers (with: timeout/evicted/destroyed), in run order, each with the close
    # reasons (builtins.CLOSE_REASONS names) it runs for; they run when an instance ends,
    # outside the per-packet blocks
    lifecycle: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    # packet handlers that also run on a late packet of a lingering instance (spec linger:):
    # hooked on no event, reading nothing a late packet lacks (lower.late_handlers)
    late: list[str] = field(default_factory=list)
    callers: list[tuple[str, str]] = field(default_factory=list)  # (calling block, ret block)
    # the PSM, for constant analysis: state names (index = C value), start, accept states
    states: list[str] = field(default_factory=list)
    start: int | None = None
    accept: list[int] = field(default_factory=list)
    # the header program, variables, sequence and selector (ir/layout.py), set by lowering
    desc: LayerDesc | None = None


@dataclass
class Program:
    stack: str
    blocks: dict[str, Block] = field(default_factory=dict)
    layers: dict[str, LayerIR] = field(default_factory=dict)
    entries: dict[str, str] = field(default_factory=dict)  # link kind -> entry layer
    dup_spent: dict[str, int] = field(default_factory=dict)  # layer -> instrs tail-dup added
    # every name any spec expression reads (statements: their values), as written; a superset
    # of what the per-packet function reads, for dead-store elimination
    read_names: set[tuple[str, ...]] = field(default_factory=set)
    # handlers, source positions and the runtime's tables the back-end needs (ir/layout.py)
    desc: StackDesc | None = None
    # a rules file compiled in (ir/rules.py): its set, and the instructions of the function's
    # single exit, after every layer (ApplyRules); lower_rules puts them in
    rules: RulesDesc | None = None
    exit: list[Instr] = field(default_factory=list)

    def add(self, b: Block) -> Block:
        if b.name in self.blocks:
            raise ValueError(f"duplicate block {b.name}")
        self.blocks[b.name] = b
        return b


__all__ = [
    "LINK_KINDS",
    "OPCODES",
    "RESOURCE_KINDS",
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
    "Terminator",
]
