"""What the back-end needs to know about one layer besides its blocks: the header program,
the variables, the PSM's shape, the sequence and the selector, with typed expressions.

Lowering builds it from sema's results (ir/describe.py); the back-end reads this and the
blocks, never the spec models or sema's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.expr.ast import Expr
from rubikgen.expr.types import BytesT, NumT, Type

__all__ = [
    "AnyUntil",
    "Elif",
    "Else",
    "HField",
    "If",
    "KeyItem",
    "LayerDesc",
    "Parse",
    "SeqDesc",
    "Step",
    "Var",
]


@dataclass(frozen=True)
class HField:
    """A header field, in layout order."""

    name: str
    layout: str
    kind: str  # "num" | "bytes"
    line: int
    width: int | None = None  # bits, numbers
    size: int | None = None  # bytes, fixed slices
    length: Expr | None = None  # variable slices: the length (typed)
    length_unit: str = "bytes"
    order: str = "big"
    const: int | None = None

    @property
    def type(self) -> Type:
        return NumT(self.width or 64) if self.kind == "num" else BytesT(self.size)


@dataclass(frozen=True)
class Var:
    """A temp or perm variable."""

    name: str
    kind: str  # "num" | "bytes"
    line: int
    width: int | None = None
    size: int | None = None  # fixed bytes; None = a view of any length
    init: Expr | None = None  # perm only

    @property
    def type(self) -> Type:
        return NumT(self.width or 64) if self.kind == "num" else BytesT(self.size)


# Header program steps (docs/spec-language.md section 3).
@dataclass(frozen=True)
class Parse:
    layout: str


@dataclass(frozen=True)
class If:
    cond: Expr
    then: list[Step]


@dataclass(frozen=True)
class Elif:
    cond: Expr
    then: list[Step]


@dataclass(frozen=True)
class Else:
    then: list[Step]


@dataclass(frozen=True)
class AnyUntil:
    layouts: list[str]
    max: int
    until: Expr | None
    line: int


Step = Parse | If | Elif | Else | AnyUntil


@dataclass(frozen=True)
class SeqDesc:
    meta: Expr
    data: Expr
    data_len: Expr | None
    early: Expr | None
    window: tuple[Expr, Expr] | None
    unit: str  # "byte" | "message"
    zero_based: bool
    overwrite: str  # "first" | "last"
    buffer_data: bool
    max_bytes: int
    max_blocks: int
    drain: bool
    drain_line: int


@dataclass(frozen=True)
class KeyItem:
    text: str
    expr: Expr


@dataclass
class LayerDesc:
    name: str
    protocol: str
    spec_file: str  # as displayed, relative to the stack
    header_line: int
    has_instance: bool
    bidirectional: bool
    fields: dict[str, HField] = field(default_factory=dict)
    layouts: dict[str, list[HField]] = field(default_factory=dict)
    layout_lines: dict[str, int] = field(default_factory=dict)
    header: list[Step] = field(default_factory=list)
    temps: dict[str, Var] = field(default_factory=dict)
    perms: dict[str, Var] = field(default_factory=dict)
    has_psm: bool = False
    states: list[str] = field(default_factory=list)
    start_state: int = 0
    accept: list[int] = field(default_factory=list)
    transitions: list[str] = field(default_factory=list)
    setup_mask: int = 0
    timeout_ns: int = 0
    # fired-flag slots before the layer's handlers: the protocol's events, then the built-ins
    events: list[str] = field(default_factory=list)
    # option name -> (is a boolean, the layer's value)
    options: dict[str, tuple[bool, int]] = field(default_factory=dict)
    seq: SeqDesc | None = None
    # the selector: side a (or the whole key), side p (bidirectional), common parts
    key_a: list[KeyItem] = field(default_factory=list)
    key_p: list[KeyItem] | None = None
    key_common: list[KeyItem] = field(default_factory=list)
    # transforms the layer runs -> the C type of their per-instance state
    transform_states: dict[str, str] = field(default_factory=dict)
