"""The IR's instructions: one dataclass per opcode (see nodes.py for resources).

Every instruction has its layer, the resources it reads and writes and where it comes from in
the specs; its own fields are typed. Each class declares its fixed resource effects
(``effects``: what every instance of it reads and writes, whatever its operands), and
``Op.make(layer, ...)`` adds them to what the operands read (their expressions' resources,
which lowering computes), so lowering writes no resource names of its own. ``command`` marks instructions with an effect outside the
function's own registers: never removed, never reordered across one another. Passes set the
flags a class declares (``Create.lazy``, ``InsertSeq.borrow``, ...), and the back-end renders
each class (the renderer its registry holds for the class, ``backend/c/``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from rubikgen.expr.ast import Assign as AssignStmt
from rubikgen.expr.ast import Expr

from .cond import Cond, Src
from .layout import Arg
from .rules import FieldRef, RulesDesc

__all__ = [
    "GLOBAL_RESOURCES",
    "OPCODES",
    "Effects",
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
    "Frame",
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
    "RuleRead",
    "RuleKey",
    "ApplyRules",
    "RULE_OPS",
]

_BASE = frozenset({"layer", "reads", "writes", "src"})

#: Resource kinds not of one layer (nodes.RESOURCE_KINDS lists them all).
GLOBAL_RESOURCES = frozenset({"RUNTIME"})


@dataclass(frozen=True, slots=True)
class Effects:
    """An opcode's fixed resource effects, as kinds: "SEQ" is the instruction's own layer's
    (SEQ:<layer>), "HEADER@params" each layer its protocol's parameters are bound to, a kind of
    GLOBAL_RESOURCES itself."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    @staticmethod
    def _resolve(kinds: tuple[str, ...], layer: str, params: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        for k in kinds:
            if k in GLOBAL_RESOURCES:
                out.add(k)
            elif k.endswith("@params"):
                out |= {f"{k[: -len('@params')]}:{x}" for x in params}
            else:
                out.add(f"{k}:{layer}")
        return out

    def resolve(
        self, layer: str, params: Iterable[str] = ()
    ) -> tuple[frozenset[str], frozenset[str]]:
        """(reads, writes) of an instruction of `layer` whose parameters are bound to
        `params` (layer names)."""
        ps = tuple(params)
        r = self._resolve(self.reads, layer, ps)
        return frozenset(r), frozenset(self._resolve(self.writes, layer, ps))


@dataclass(kw_only=True, slots=True)
class Instr:
    op: ClassVar[str] = ""
    command: ClassVar[bool] = False
    doc: ClassVar[str] = ""
    effects: ClassVar[Effects] = Effects()

    layer: str
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    src: Src | None = None

    @classmethod
    def make(
        cls,
        layer: str,
        *,
        params: Iterable[str] = (),
        reads: Iterable[str] = (),
        writes: Iterable[str] = (),
        src: Src | None = None,
        **fields: Any,
    ) -> Self:
        """An instruction of `layer` with the class's declared effects plus `reads`/`writes`
        (its operands': expression reads, an assignment's target)."""
        r, w = cls.effects.resolve(layer, params)
        return cls(layer=layer, reads=r | frozenset(reads), writes=w | frozenset(writes),
                   src=src, **fields)  # fmt: skip

    def undeclared(self) -> list[str]:
        """The class's declared effects this instruction lacks (those of its parameters'
        layers aside: the instruction does not know the bindings)."""
        kinds = Effects(
            tuple(k for k in self.effects.reads if not k.endswith("@params")),
            tuple(k for k in self.effects.writes if not k.endswith("@params")),
        )
        r, w = kinds.resolve(self.layer)
        return [f"reads {x}" for x in sorted(r - self.reads)] + [
            f"writes {x}" for x in sorted(w - self.writes)
        ]

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
    effects = Effects(writes=("HEADER", "TEMP", "FIRED", "SDU"))
    doc = "start a pass over the layer: clear header, temps and fired flags"
    zero: str = "all"  # 'conditional' (header-zeroing): only fields a packet may skip

    def check(self) -> list[str]:
        return [] if self.zero in ("all", "conditional") else [f"bad zero {self.zero!r}"]


@dataclass(kw_only=True, slots=True)
class ParseHeader(Instr):
    op = "parse_header"
    effects = Effects(reads=("HEADER", "HEADER@params"), writes=("HEADER", "SDU"))
    doc = "run the header program (sets the parse result that a branch tests)"


@dataclass(kw_only=True, slots=True)
class BuildKey(Instr):
    op = "build_key"
    effects = Effects(reads=("HEADER", "HEADER@params", "PERM@params"), writes=("KEY",))
    doc = "build the forward (and swapped) selector key"


@dataclass(kw_only=True, slots=True)
class Lookup(Instr):
    op = "lookup"
    effects = Effects(reads=("KEY", "RUNTIME"), writes=("INST",))
    doc = "look the key up in the layer's instance table"


@dataclass(kw_only=True, slots=True)
class FindFlow(Instr):
    op = "find_flow"
    effects = Effects(reads=("HEADER", "HEADER@params", "RUNTIME"), writes=("INST",))
    command = True
    doc = "lookup: find an instance of another layer by a key of this packet (no create, no touch)"
    table: str  # the layer whose instance table is searched


@dataclass(kw_only=True, slots=True)
class Create(Instr):
    op = "create"
    effects = Effects(
        reads=("KEY", "HEADER"), writes=("INST", "PERM", "STATE", "SEQ", "FIRED", "RUNTIME")
    )
    command = True
    doc = "create an instance: perm := init, state := start, latches := 0; raise created"
    lazy: bool = False  # fast-destroy: in the scratch record, committed at the exit if it lives
    flag_created: bool = True  # dead-stores: whether anything reads event.created


@dataclass(kw_only=True, slots=True)
class NoInstance(Instr):
    op = "no_instance"
    effects = Effects(writes=("INST", "PERM", "STATE"))
    doc = "the packet has no instance: use the zeroed scratch instance"


@dataclass(kw_only=True, slots=True)
class Observe(Instr):
    op = "observe"
    effects = Effects(reads=("INST",), writes=("RUNTIME",))
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
    effects = Effects(writes=("SDU",))
    doc = "the sdu := a byte-slice expression"
    value: Expr

    def exprs(self) -> list[Expr]:
        return [self.value]


@dataclass(kw_only=True, slots=True)
class Assemble(Instr):
    op = "assemble"
    effects = Effects(reads=("SEQ", "INST"), writes=("SEQ", "SDU", "FIRED"))
    command = True
    doc = "take the contiguous data of the packet's sequence as the sdu"


@dataclass(kw_only=True, slots=True)
class Frame(Instr):
    op = "frame"
    effects = Effects(reads=("INST", "HEADER", "SDU"), writes=("SEQ", "SDU", "HEADER"))
    command = True
    doc = "cut the next unit of the input (framing) as the sdu; the rest is the payload"


@dataclass(kw_only=True, slots=True)
class InsertSeq(Instr):
    op = "insert_seq"
    effects = Effects(reads=("INST",), writes=("SEQ", "FIRED"))
    command = True
    doc = "insert the packet's data into its direction's sequence; raise its events"
    events: list[str] | None = None  # dead-stores: the event flags set (None: all)
    borrow: bool = False  # fast-forward: in-order data into an empty sequence is referenced
    fresh: bool = False  # fresh-seq: the instance was created by this packet, its sequences unused


@dataclass(kw_only=True, slots=True)
class VUpdate(Instr):
    op = "vupdate"
    effects = Effects(reads=("SEQ",), writes=("SEQ",))
    doc = "latch virtual atom `atom` when `expr` holds on this packet"
    atom: int
    expr: Expr
    text: str

    def exprs(self) -> list[Expr]:
        return [self.expr]


@dataclass(kw_only=True, slots=True)
class SetState(Instr):
    op = "set_state"
    effects = Effects(writes=("STATE", "FIRED"))
    doc = "the PSM transition `name` (id `transition`, from 1) fired: state := `state`"
    state: int
    transition: int
    name: str


@dataclass(kw_only=True, slots=True)
class Fire(Instr):
    op = "fire"
    effects = Effects(writes=("FIRED",))
    doc = "set the fired flag of an event or handler"
    event: str


@dataclass(kw_only=True, slots=True)
class Fail(Instr):
    op = "fail"
    effects = Effects(reads=("STATE",), writes=("FIRED", "STATE", "RUNTIME"))
    doc = "no transition matched: raise fail; `policy` (reset: state := `start`)"
    policy: str
    start: int


@dataclass(kw_only=True, slots=True)
class Callback(Instr):
    op = "callback"
    effects = Effects(writes=("RUNTIME",))
    command = True
    doc = "a protocol callback statement: call handler `name` with `args`"
    name: str
    args: list[Arg] = field(repr=False)

    def exprs(self) -> list[Expr]:
        return [a.expr for a in self.args]


@dataclass(kw_only=True, slots=True)
class Handler(Instr):
    op = "handler"
    effects = Effects(writes=("RUNTIME",))
    command = True
    doc = "call a stack handler with its arguments"
    name: str


@dataclass(kw_only=True, slots=True)
class Transform(Instr):
    op = "transform"
    effects = Effects(reads=("INST",), writes=("SDU", "INST", "RUNTIME"))
    command = True
    doc = "the sdu := a runtime transform of the arguments (empty on failure, counted)"
    name: str
    args: dict[str, Expr] = field(repr=False)

    def exprs(self) -> list[Expr]:
        return list(self.args.values())


@dataclass(kw_only=True, slots=True)
class LoopDecide(Instr):
    op = "loop_decide"
    effects = Effects(writes=("LOOP",))
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
    effects = Effects(reads=("INST",), writes=("INST", "RUNTIME"))
    command = True
    doc = "destroy the instance (accept state)"
    lazy: bool = False  # fast-destroy: an instance still in the scratch record just goes


@dataclass(kw_only=True, slots=True)
class Reenter(Instr):
    op = "reenter"
    effects = Effects(reads=("SDU", "LOOP"), writes=("HEADER", "LOOP"))
    doc = "self-loop: the sdu (or the edge's input) becomes the layer's input for another pass"


@dataclass(kw_only=True, slots=True)
class Finish(Instr):
    op = "finish"
    effects = Effects(reads=("INST", "SEQ"), writes=("INST", "SEQ", "RUNTIME"))
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
    effects = Effects(writes=("RUNTIME",))
    command = True
    doc = "count an error of the layer"
    reason: str


# -- the rules (ir/rules.py, docs/rules.md), put in by ir/lower_rules.py ------------------


@dataclass(kw_only=True, slots=True)
class RuleRead(Instr):
    op = "rule_read"
    effects = Effects(reads=("HEADER",), writes=("RUNTIME",))
    command = True
    doc = (
        "the header parsed: the layer is stamped parsed in this packet for the rules, and the "
        "fields they read copied (`whole`: its fixed part, for any reloadable rule set)"
    )
    fields: tuple[FieldRef, ...] = ()
    whole: bool = False


@dataclass(kw_only=True, slots=True)
class RuleKey(Instr):
    op = "rule_key"
    effects = Effects(reads=("KEY",), writes=("RUNTIME",))
    command = True
    doc = "the layer's key is built in this packet: the rules may look up their ended instances"


@dataclass(kw_only=True, slots=True)
class ApplyRules(Instr):
    """Of no layer (`layer` is empty): it runs at the function's single exit, after every
    layer (`Program.exit`)."""

    op = "apply_rules"
    effects = Effects(reads=("RUNTIME",), writes=("RUNTIME",))
    command = True
    doc = (
        "first match wins: the rules tried on what the packet's layers parsed; the first that "
        "holds is counted and acts (a verdict, rewrites, a stateful decision kept)"
    )
    desc: RulesDesc = field(repr=False)

    def check(self) -> list[str]:
        return [] if self.layer == "" else [f"apply_rules in layer {self.layer!r}"]


#: The opcodes of the rules: they feed and apply a rule set and nothing else reads what
#: they write (renderers keep the walk's state across them, backend/context.py).
RULE_OPS = (RuleRead, RuleKey, ApplyRules)

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
        Frame,
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
        *RULE_OPS,
    )
}
