"""What the back-end needs to know about one layer besides its blocks: the header program,
the variables, the PSM's shape, the sequence and the selector, with typed expressions.

Lowering builds it from sema's results (ir/describe.py); the back-end reads this and the
blocks, never the spec models or sema's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rubikgen.expr.ast import Expr, Name
from rubikgen.expr.types import BytesT, NumT, Type

__all__ = [
    "AnyUntil",
    "CsumDesc",
    "PseudoDesc",
    "Arg",
    "HandlerDesc",
    "StackDesc",
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
    target: Name | None = None  # with an init: the variable as a bound name (`perm.x`)

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
    policy: str  # the overlap policy in force: first, last, linux, bsd, windows, solaris
    buffer_data: bool
    max_bytes: int
    max_blocks: int
    drain: bool
    drain_line: int
    retain: bool = False
    ack: Expr | None = None


@dataclass(frozen=True)
class FrameDesc:
    """A protocol's `framing:` (rg/rg_framer.h's rg_framer_cfg): kind "length" (the unit's length
    is add + mul * the `width`-bit field at byte `at`), "delimiter" or "size"."""

    kind: str
    max: int
    line: int
    add: int = 0
    mul: int = 1
    width: int = 0
    little: bool = False
    at: int = 0
    delimiter: bytes = b""
    size: int = 0


@dataclass(frozen=True)
class CsumDesc:
    """A checksum field (protocol `checksums:`), resolved for one layer of the stack."""

    field: str
    off: int  # byte offset in the header
    algorithm: str  # "internet" | "crc32c"
    covers: str  # "header" | "layer"
    pseudo_layer: str | None  # the layer bound to the pseudo_header parameter
    protocol: int
    zero_none: bool
    line: int


@dataclass(frozen=True)
class PseudoDesc:
    """The fields a layer lends to pseudo-headers: byte offsets in its header."""

    src: int
    dst: int
    size: int
    length: int | None
    length_from: int


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
    # closed instances linger (spec `linger:`): how long, and the condition that reopens one
    linger_ns: int = 0
    linger_reopen: Expr | None = None
    # perm variables in the instance's record (`record:`): variable -> (record key, value
    # names, letters: the value is a string of 4-bit letter codes; "" none)
    records: dict[str, tuple[str, list[str], str]] = field(default_factory=dict)
    # fired-flag slots before the layer's handlers: the protocol's events, then the built-ins
    events: list[str] = field(default_factory=list)
    # option name -> (is a boolean, the layer's value)
    options: dict[str, tuple[bool, int]] = field(default_factory=dict)
    seq: SeqDesc | None = None
    frame: FrameDesc | None = None
    # the selector: side a (or the whole key), side p (bidirectional), common parts
    key_a: list[KeyItem] = field(default_factory=list)
    key_p: list[KeyItem] | None = None
    key_common: list[KeyItem] = field(default_factory=list)
    # lookup: the layer whose instance table is searched, and the key (as the selector's)
    find_table: str | None = None
    find_a: list[KeyItem] = field(default_factory=list)
    find_p: list[KeyItem] | None = None
    find_common: list[KeyItem] = field(default_factory=list)
    # transforms the layer runs -> the C type of their per-instance state
    transform_states: dict[str, str] = field(default_factory=dict)
    # checksums and setters: the fields at a fixed place (bit offset from the header's start),
    # the checksum fields, the pseudo-header fields lent to the layers above
    fixed_bits: dict[str, int] = field(default_factory=dict)
    checksums: list[CsumDesc] = field(default_factory=list)
    pseudo: PseudoDesc | None = None

    def exprs(self) -> list[Expr]:
        """Every expression the description holds (verify checks they are resolved)."""
        out = [f.length for f in self.fields.values() if f.length is not None]
        out += [v.init for v in self.perms.values() if v.init is not None]
        if self.linger_reopen is not None:
            out.append(self.linger_reopen)
        todo = list(self.header)
        while todo:
            st = todo.pop()
            if isinstance(st, If | Elif):
                out.append(st.cond)
            if isinstance(st, If | Elif | Else):
                todo += st.then
            if isinstance(st, AnyUntil) and st.until is not None:
                out.append(st.until)
        if self.seq is not None:
            sq = self.seq
            out += [x for x in (sq.meta, sq.data, sq.data_len, sq.early) if x is not None]
            out += list(sq.window or ())
        out += [k.expr for k in [*self.key_a, *(self.key_p or []), *self.key_common]]
        out += [k.expr for k in [*self.find_a, *(self.find_p or []), *self.find_common]]
        return out


@dataclass(frozen=True)
class Arg:
    """An argument of a handler or callback call."""

    name: str
    expr: Expr
    declared: str | None  # a typed argument's declared type ('bytes', 'u16', ...), else None
    text: str  # as written


@dataclass
class HandlerDesc:
    """A stack handler."""

    name: str
    layer: str
    args: list[Arg]
    when: Expr | None
    src: str  # file:line of its declaration, relative to the stack's directory
    line: int  # its line in the stack file (lifecycle comments)
    where: str  # path:line:col of its key, for diagnostics about handler files
    # the events it hooks (`with`), as NFs see them in rg_handler_desc.events
    events: tuple[str, ...] = ()


@dataclass
class StackDesc:
    """What the back-end needs of the stack besides its layers."""

    file: str  # the stack file's name
    handlers: dict[str, HandlerDesc] = field(default_factory=dict)
    layer_where: dict[str, str] = field(default_factory=dict)  # layer -> path:line:col
    parents: set[str] = field(default_factory=set)  # layers with an outgoing edge
    # the close reasons (name, C enumerator, value), shared with the C runtime
    close_reasons: tuple[tuple[str, str, int], ...] = ()
    # runtime transforms by name (their C entry points, state and context types, failures) and
    # the names of their user error reasons, in a fixed order
    transforms: dict[str, Any] = field(default_factory=dict)
    user_reasons: list[str] = field(default_factory=list)
    # user-defined events (stack `events:`), name -> layer, in declaration order
    udes: dict[str, str] = field(default_factory=dict)
    # the memcaps per context: the stack's `limits:` with the built-in defaults filled in
    # (sema.model.ResolvedLimits: reassembly and flows in bytes, UINT64_MAX = none; policy)
    limits: Any = None

    def exprs(self) -> list[Expr]:
        out = [a.expr for h in self.handlers.values() for a in h.args]
        return out + [h.when for h in self.handlers.values() if h.when is not None]

    @property
    def close_c(self) -> dict[str, str]:
        return {name: cname for name, cname, _ in self.close_reasons}
