"""The IR's instructions: one dataclass per opcode (see nodes.py for resources).

Every instruction has its layer, the resources it reads and writes and where it comes from in
the specs; its own fields are typed. ``command`` marks instructions with an effect outside the
function's own registers: never removed, never reordered across one another. Passes set the
flags a class declares (``Create.lazy``, ``InsertSeq.borrow``, ...), and the back-end renders
each class (``backend/emit.py`` dispatches on ``op``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from rubikgen.expr.ast import Assign as AssignStmt
from rubikgen.expr.ast import Expr

from .cond import Cond, Src
from .layout import Arg

__all__ = [
    "OPCODES",
    "Assemble",
    "Assign",
    "BuildKey",
    "Callback",
    "Create",
    "Destroy",
    "Enter",
    "Error",
    "Fail",
    "FindFlow",
    "Finish",
    "Fire",
    "Handler",
    "InsertSeq",
    "Instr",
    "LoopDecide",
    "Lookup",
    "NoInstance",
    "Observe",
    "ParseHeader",
    "Reenter",
    "SetSdu",
    "SetState",
    "Transform",
    "VUpdate",
]

_BASE = frozenset({"layer", "reads", "writes", "src"})


@dataclass(kw_only=True, slots=True)
class Instr:
    op: ClassVar[str] = ""
    command: ClassVar[bool] = False
    doc: ClassVar[str] = ""

    layer: str
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    src: Src | None = None

    @property
    def is_command(self) -> bool:
        return self.command

    def operands(self) -> dict[str, Any]:
        """The opcode's own fields that differ from their defaults (for dumps)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in _BASE:
                continue
            v = getattr(self, f.name)
            if f.default is not v and f.default != v:
                out[f.name] = v
        return out

    def exprs(self) -> list[Expr]:
        """The expressions the instruction evaluates (resolved trees: verify checks them)."""
        return []

    def check(self) -> list[str]:
        """Problems with the instruction's own fields (verify.py)."""
        return []


@dataclass(kw_only=True, slots=True)
class Enter(Instr):
    op = "enter"
    doc = "start a pass over the layer: clear header, temps and fired flags"
    zero: str = "all"  # 'conditional' (header-zeroing): only fields a packet may skip

    def check(self) -> list[str]:
        return [] if self.zero in ("all", "conditional") else [f"bad zero {self.zero!r}"]


@dataclass(kw_only=True, slots=True)
class ParseHeader(Instr):
    op = "parse_header"
    doc = "run the header program (sets the parse result that a branch tests)"


@dataclass(kw_only=True, slots=True)
class BuildKey(Instr):
    op = "build_key"
    doc = "build the forward (and swapped) selector key"


@dataclass(kw_only=True, slots=True)
class Lookup(Instr):
    op = "lookup"
    doc = "look the key up in the layer's instance table"


@dataclass(kw_only=True, slots=True)
class FindFlow(Instr):
    op = "find_flow"
    command = True
    doc = "lookup: find an instance of another layer by a key of this packet (no create, no touch)"
    table: str  # the layer whose instance table is searched


@dataclass(kw_only=True, slots=True)
class Create(Instr):
    op = "create"
    command = True
    doc = "create an instance: perm := init, state := start, latches := 0; raise created"
    lazy: bool = False  # fast-destroy: in the scratch record, committed at the exit if it lives
    flag_created: bool = True  # dead-stores: whether anything reads event.created


@dataclass(kw_only=True, slots=True)
class NoInstance(Instr):
    op = "no_instance"
    doc = "the packet has no instance: use the zeroed scratch instance"


@dataclass(kw_only=True, slots=True)
class Observe(Instr):
    op = "observe"
    command = True
    doc = "tell observers a packet reached the instance"


@dataclass(kw_only=True, slots=True)
class Assign(Instr):
    op = "assign"
    doc = "a statement `target = value`"
    stmt: AssignStmt

    def exprs(self) -> list[Expr]:
        return [self.stmt.value]

    def check(self) -> list[str]:
        return [] if isinstance(self.stmt, AssignStmt) else ["stmt is not an assignment"]


@dataclass(kw_only=True, slots=True)
class SetSdu(Instr):
    op = "set_sdu"
    doc = "the sdu := a byte-slice expression"
    value: Expr

    def exprs(self) -> list[Expr]:
        return [self.value]


@dataclass(kw_only=True, slots=True)
class Assemble(Instr):
    op = "assemble"
    command = True
    doc = "take the contiguous data of the packet's sequence as the sdu"


@dataclass(kw_only=True, slots=True)
class InsertSeq(Instr):
    op = "insert_seq"
    command = True
    doc = "insert the packet's data into its direction's sequence; raise its events"
    events: list[str] | None = None  # dead-stores: the event flags set (None: all)
    borrow: bool = False  # fast-forward: in-order data into an empty sequence is referenced
    fresh: bool = False  # fresh-seq: the instance was created by this packet, its sequences unused


@dataclass(kw_only=True, slots=True)
class VUpdate(Instr):
    op = "vupdate"
    doc = "latch virtual atom `atom` when `expr` holds on this packet"
    atom: int
    expr: Expr
    text: str

    def exprs(self) -> list[Expr]:
        return [self.expr]


@dataclass(kw_only=True, slots=True)
class SetState(Instr):
    op = "set_state"
    doc = "the PSM transition `name` (id `transition`, from 1) fired: state := `state`"
    state: int
    transition: int
    name: str


@dataclass(kw_only=True, slots=True)
class Fire(Instr):
    op = "fire"
    doc = "set the fired flag of an event or handler"
    event: str


@dataclass(kw_only=True, slots=True)
class Fail(Instr):
    op = "fail"
    doc = "no transition matched: raise fail; `policy` (reset: state := `start`)"
    policy: str
    start: int


@dataclass(kw_only=True, slots=True)
class Callback(Instr):
    op = "callback"
    command = True
    doc = "a protocol callback statement: call handler `name` with `args`"
    name: str
    args: list[Arg] = field(repr=False)

    def exprs(self) -> list[Expr]:
        return [a.expr for a in self.args]


@dataclass(kw_only=True, slots=True)
class Handler(Instr):
    op = "handler"
    command = True
    doc = "call a stack handler with its arguments"
    name: str


@dataclass(kw_only=True, slots=True)
class Transform(Instr):
    op = "transform"
    command = True
    doc = "the sdu := a runtime transform of the arguments (empty on failure, counted)"
    name: str
    args: dict[str, Expr] = field(repr=False)

    def exprs(self) -> list[Expr]:
        return list(self.args.values())


@dataclass(kw_only=True, slots=True)
class LoopDecide(Instr):
    op = "loop_decide"
    doc = (
        "remember whether the self-loop edge holds (cond None: always); with input, the next "
        "pass parses that instead of the sdu (evaluated at the decision)"
    )
    cond: Cond | None
    max_repeat: int
    input: Expr | None = None

    def exprs(self) -> list[Expr]:
        out = [self.cond.expr] if self.cond is not None and self.cond.expr is not None else []
        return out + ([self.input] if self.input is not None else [])

    def check(self) -> list[str]:
        return [] if self.max_repeat >= 1 else [f"max_repeat {self.max_repeat} < 1"]


@dataclass(kw_only=True, slots=True)
class Destroy(Instr):
    op = "destroy"
    command = True
    doc = "destroy the instance (accept state)"
    lazy: bool = False  # fast-destroy: an instance still in the scratch record just goes


@dataclass(kw_only=True, slots=True)
class Reenter(Instr):
    op = "reenter"
    doc = "self-loop: the sdu (or the edge's input) becomes the layer's input for another pass"


@dataclass(kw_only=True, slots=True)
class Finish(Instr):
    op = "finish"
    command = True
    doc = (
        "the layer is left: settle (copy borrowed data), commit (a lazily created instance "
        "enters the table)"
    )
    settle: bool = False
    commit: bool = False


@dataclass(kw_only=True, slots=True)
class Error(Instr):
    op = "error"
    command = True
    doc = "count an error of the layer"
    reason: str


OPCODES: dict[str, type[Instr]] = {
    c.op: c
    for c in (
        Enter,
        ParseHeader,
        BuildKey,
        Lookup,
        FindFlow,
        Create,
        NoInstance,
        Observe,
        Assign,
        SetSdu,
        Assemble,
        InsertSeq,
        VUpdate,
        SetState,
        Fire,
        Fail,
        Callback,
        Handler,
        Transform,
        LoopDecide,
        Destroy,
        Reenter,
        Finish,
        Error,
    )
}
