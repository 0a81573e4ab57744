"""Models of a protocol (layer prototype) document."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

from rubikgen.models.common import Callback, Expr, Model, Transform

Duration = Annotated[
    StrictInt | float | StrictStr,
    Field(description="Seconds, or a string like '30s', '500ms', '2m'."),
]


class RecordField(Model):
    """How a perm variable appears in an instance's record."""

    name: StrictStr | None = Field(None, description="The record's key (default: the variable).")
    names: list[StrictStr] = Field(
        default_factory=list,
        description="Names of the values 0, 1, ...: the record shows names[value].",
    )
    letters: StrictStr | None = Field(
        None,
        description="The value is a string of letters, 4 bits each, the first in the low bits: "
        "code k (1..15) is letters[k-1]; 0 ends it.",
    )
    doc: StrictStr | None = None


class Linger(Model):
    """Closed instances linger (docs/spec-language.md, linger)."""

    time: Duration = Field(description="How long a closed instance is kept after its accept state.")
    reopen: Expr | None = Field(
        None,
        description="A packet of a lingering instance for which this holds ends the linger and "
        "creates a new instance (a new connection on the same key); else it is a late packet.",
    )
    doc: StrictStr | None = None


class FieldSpec(Model):
    """A field or variable, long form."""

    bits: StrictInt | StrictStr | None = Field(
        None,
        description="Width in bits (1..64) of a number, or an expression giving a length in bits.",
    )
    bytes: StrictInt | StrictStr | None = Field(
        None, description="Size in bytes of a byte slice, or an expression giving it."
    )
    order: Literal["big", "little"] = Field("big", description="Byte order of a multi-byte number.")
    const: StrictInt | None = Field(
        None, description="Required value; the tag in an any_until loop."
    )
    init: Expr | None = Field(None, description="Initial value of a perm variable.")
    record: StrictBool | RecordField | None = Field(
        None,
        description="A perm variable only: network functions add its value (at the close) to "
        "the instance's record, under its name (true) or as the long form says.",
    )
    doc: StrictStr | None = None


FieldDecl = Annotated[
    StrictInt | Literal["bytes"] | FieldSpec,
    Field(description="Bit width (integer), 'bytes' (a slice of any length), or a long form."),
]

Layout = dict[str, FieldDecl]


def _step_tag(v: Any) -> str | None:
    if isinstance(v, str):
        return "layout"
    if isinstance(v, dict):
        for k in ("if", "elif", "else", "any_until"):
            if k in v:
                return k
    # Serialising a model instance (model_dump) asks again.
    return _MODEL_TAGS.get(type(v).__name__)


_MODEL_TAGS = {
    "IfStep": "if",
    "ElifStep": "elif",
    "ElseStep": "else",
    "AnyUntilStep": "any_until",
    "IfStmt": "if",
    "ElifStmt": "elif",
    "ElseStmt": "else",
    "Callback": "callback",
    "Transform": "transform",
}


class IfStep(Model):
    if_: Expr = Field(alias="if")
    then: list[Step] = Field(default_factory=list)


class ElifStep(Model):
    elif_: Expr = Field(alias="elif")
    then: list[Step] = Field(default_factory=list)


class ElseStep(Model):
    else_: list[Step] = Field(alias="else")


class AnyUntil(Model):
    layouts: list[StrictStr] = Field(min_length=1)
    until: Expr | None = Field(None, description="Stop when true (checked after each TLV).")
    max: StrictInt = Field(64, description="Upper bound on iterations.")


class AnyUntilStep(Model):
    any_until: AnyUntil


Step = Annotated[
    (
        Annotated[StrictStr, Tag("layout")]
        | Annotated[IfStep, Tag("if")]
        | Annotated[ElifStep, Tag("elif")]
        | Annotated[ElseStep, Tag("else")]
        | Annotated[AnyUntilStep, Tag("any_until")]
    ),
    Discriminator(
        _step_tag,
        custom_error_type="step",
        custom_error_message="a header step is a layout name or a mapping with 'if', 'elif', 'else' or 'any_until'",
    ),
]


def _stmt_tag(v: Any) -> str | None:
    if isinstance(v, str):
        return "stmt"
    if isinstance(v, dict):
        for k in ("if", "elif", "else", "callback", "transform"):
            if k in v:
                return k
    return _MODEL_TAGS.get(type(v).__name__)


class IfStmt(Model):
    if_: Expr = Field(alias="if")
    then: list[Statement] = Field(default_factory=list)


class ElifStmt(Model):
    elif_: Expr = Field(alias="elif")
    then: list[Statement] = Field(default_factory=list)


class ElseStmt(Model):
    else_: list[Statement] = Field(alias="else")


Statement = Annotated[
    (
        Annotated[StrictStr, Tag("stmt")]
        | Annotated[IfStmt, Tag("if")]
        | Annotated[ElifStmt, Tag("elif")]
        | Annotated[ElseStmt, Tag("else")]
        | Annotated[Callback, Tag("callback")]
        | Annotated[Transform, Tag("transform")]
    ),
    Discriminator(
        _stmt_tag,
        custom_error_type="statement",
        custom_error_message="a statement is a string ('x = expr', 'assemble()') or a mapping with 'if', 'elif', 'else', 'callback' or 'transform'",
    ),
]


class Param(Model):
    protocol: StrictStr | list[StrictStr] = Field(
        description="Protocol file(s), relative to this file, that the bound layer may be."
    )
    doc: StrictStr | None = None


OptionValue = StrictBool | Annotated[StrictInt, Field(ge=0, le=(1 << 64) - 1)]


class Option(Model):
    default: OptionValue = Field(
        description="The value `option.NAME` has unless a stack's layer sets it (`options:`)."
    )
    doc: StrictStr | None = None


class Selector(Model):
    key: list[StrictStr] | None = Field(None, description="Unidirectional key.")
    sides: list[list[StrictStr]] | None = Field(
        None, description="Two half keys: a bidirectional key."
    )
    common: list[StrictStr] = Field(
        default_factory=list, description="Direction-independent key part."
    )
    create_if: Expr | None = Field(None, description="Create an instance on a miss only when true.")


class Lookup(Model):
    """Find an instance of another layer (a parameter) by a key built from this layer's
    packet, without creating or refreshing it: an ICMP error's quoted header names the
    TCP/UDP flow it answers."""

    table: StrictStr = Field(
        description="The parameter whose layer's instance table is searched; its selector "
        "has the same shape (sides, items, sizes) as this key."
    )
    key: list[StrictStr] | None = Field(None, description="Unidirectional key.")
    sides: list[list[StrictStr]] | None = Field(
        None, description="Two half keys: found from either side, as the table's own packets."
    )
    common: list[StrictStr] = Field(
        default_factory=list, description="Direction-independent key part."
    )


class Sequence(Model):
    meta: Expr = Field(description="Offset of this packet's data (32-bit).")
    data: Expr = Field("payload", description="The bytes to buffer.")
    data_len: Expr | None = Field(
        None,
        description="Logical length incl. phantom bytes; with unit: message, 0 (no message) or "
        "non-zero (one unit).",
    )
    unit: Literal["byte", "message"] = Field(
        "byte",
        description="What meta counts: bytes (TCP, IP fragments) or messages (SCTP TSNs, packet "
        "numbers: each packet's data is one unit, delivered whole).",
    )
    early: Expr | None = Field(
        None,
        description="unit: message only: when this holds, a new message is delivered at the "
        "next assemble() without waiting for the units before it (SCTP's unordered chunks).",
    )
    zero_based: bool = False
    window: list[Expr] | None = Field(
        None, min_length=2, max_length=2, description="[left, right)."
    )
    overwrite: Literal["first", "last"] = Field(
        "first", description="Which copy of overlapping bytes is kept: an alias of overlap_policy."
    )
    overlap_policy: Literal["first", "last", "linux", "bsd", "windows", "solaris"] | None = Field(
        None,
        description="Target-based overlap policy: which copy of overlapping bytes survives, from "
        "how the new segment lies against the buffered one (docs/spec-language.md 2.7). "
        "Default: overwrite.",
    )
    buffer_data: bool = True
    max_bytes: StrictInt = 1 << 20
    max_blocks: StrictInt = 256

    @property
    def policy(self) -> str:
        """The overlap policy in force: overlap_policy, else overwrite."""
        return self.overlap_policy or self.overwrite

    ack: Expr | None = Field(
        None,
        description="With retain: the receiver's cumulative acknowledgment (32-bit): kept bytes "
        "before it are released. Default: the window's left edge.",
    )
    retain: bool | StrictStr = Field(
        False,
        description="Keep delivered bytes until the window's left edge passes them (at most "
        "max_bytes), so that a segment repeating delivered, unacknowledged bytes with other "
        "content raises overlap (docs/spec-language.md 2.7); true, false, or option.NAME: a "
        "boolean option of this protocol, so that a stack can turn it off per layer.",
    )
    drain: bool = Field(
        False,
        description="Gap recovery when an instance ends (accept state, expiry, eviction, end of "
        "capture): skip the holes and pass every buffered byte to the layer's handlers that take "
        "sdu as an argument.",
    )


class Framing(Model):
    """Cut the layer's input, one direction's in-order bytes, into units (docs/spec-language.md
    2.7a): exactly one of length, delimiter, size."""

    length: StrictStr | None = Field(
        None,
        description="A length prefix: the unit's length from a field at a fixed offset of the "
        "unit, 'A + uW at K' (W: 8, 16, 24, 32; uWle little-endian; optional 'M *' before it), "
        "e.g. TLS records '5 + u16 at 3', DNS over TCP '2 + u16 at 0'.",
    )
    delimiter: StrictStr | None = Field(
        None,
        description="Units end with this string (1 to 8 bytes, not part of the unit), e.g. "
        '"\\r\\n".',
    )
    size: StrictInt | None = Field(None, description="Units of this many bytes.")
    max: StrictInt = Field(
        65536,
        description="The longest unit, in bytes (delimiter excluded): only a unit's bytes that "
        "straddle deliveries are buffered, at most this many; a longer unit raises frame_error 1.",
    )


_LENGTH_RE = re.compile(
    r"^\s*(?:(\d+)\s*\+\s*)?(?:(\d+)\s*\*\s*)?u(8|16|24|32)(le)?\s+at\s+(\d+)\s*$"
)


@dataclass(frozen=True)
class LengthPrefix:
    """A parsed `framing.length`: the unit's length is add + mul * (the width-bit unsigned field
    at byte offset `at` of the unit)."""

    add: int
    mul: int
    width: int  # bits
    little: bool
    at: int

    @property
    def prefix(self) -> int:
        """The bytes needed to know the length."""
        return self.at + self.width // 8


def parse_length(text: str) -> LengthPrefix | None:
    """`A + M * uW[le] at K` (A and M optional), or None when text is not of that form."""
    m = _LENGTH_RE.match(text)
    if m is None:
        return None
    add, mul, w, le, at = m.groups()
    return LengthPrefix(int(add or 0), int(mul or 1), int(w), le is not None, int(at))


class Transition(Model):
    name: StrictStr
    from_: StrictStr | list[StrictStr] = Field(
        alias="from", description="State, list of states, or '*'."
    )
    to: StrictStr
    when: Expr | None = None
    do: list[Statement] = Field(default_factory=list)
    doc: StrictStr | None = None


class PSM(Model):
    states: list[StrictStr] = Field(min_length=1)
    start: StrictStr | list[StrictStr] | None = None
    accept: list[StrictStr] = Field(default_factory=list)
    on_fail: Literal["continue", "drop", "reset"] = "continue"
    setup: list[StrictStr] = Field(
        default_factory=list,
        description="Transitions that make up the setup (a handshake): a flow is complete when "
        "all of them fired and it reached an accept state.",
    )
    transitions: list[Transition] = Field(default_factory=list)


class Event(Model):
    when: Expr | None = None
    do: list[Statement] = Field(default_factory=list)
    before: list[StrictStr] = Field(
        default_factory=list, description="Events that run after this one."
    )
    with_: StrictStr | list[StrictStr] | None = Field(
        None, alias="with", description="Run only when these events fired, after them."
    )
    phase: Literal["post_psm", "pre_psm"] = "post_psm"
    doc: StrictStr | None = None


class Checksum(Model):
    """A checksum field: its algorithm and what it covers (docs/spec-language.md, checksums)."""

    algorithm: Literal["internet", "crc32c"] = Field(
        description="internet: the 16-bit one's complement sum of RFC 1071 (a 16-bit field); "
        "crc32c: CRC-32C as SCTP stores it (RFC 9260 appendix A, a 32-bit field)."
    )
    covers: Literal["header", "layer"] = Field(
        "header",
        description="header: the bytes the header program parsed; layer: the layer's whole "
        "input (header and payload, e.g. a TCP segment).",
    )
    pseudo_header: StrictStr | None = Field(
        None,
        description="A parameter of this protocol whose bound layer's protocol declares "
        "`pseudo_header`: its addresses, `protocol` and the covered length are summed too "
        "(TCP and UDP over IPv4 or IPv6).",
    )
    protocol: Annotated[StrictInt, Field(ge=0, le=255)] | None = Field(
        None, description="The upper-layer protocol number in the pseudo-header (6 for TCP)."
    )
    zero_means_none: StrictBool = Field(
        False,
        description="A zero field means no checksum was computed (UDP); a computed zero is "
        "sent as 0xffff.",
    )
    doc: StrictStr | None = None


class PseudoHeader(Model):
    """The fields a protocol lends to the pseudo-header of the checksums above it."""

    src: StrictStr = Field(description="The source address field.")
    dst: StrictStr = Field(description="The destination address field.")
    length: StrictStr | None = Field(
        None,
        description="A 16-bit field giving the length of what follows the header, counted from "
        "header byte `length_from` (IPv4 total_len from 0, IPv6 plen from 40): an upper layer "
        "whose captured input is shorter was cut by the capture and is not verified.",
    )
    length_from: Annotated[StrictInt, Field(ge=0, le=65535)] = Field(
        0, description="The header offset the `length` field counts from."
    )
    doc: StrictStr | None = None


class Protocol(Model):
    """A layer prototype."""

    protocol: StrictStr = Field(description="Name of the protocol.")
    doc: StrictStr | None = None
    params: dict[str, Param] = Field(default_factory=dict)
    options: dict[str, Option] = Field(
        default_factory=dict,
        description="Constants a stack may set per layer (`options:` of a layer), read as "
        "`option.NAME`.",
    )
    layouts: dict[str, Layout] = Field(default_factory=dict)
    header: list[Step] = Field(default_factory=list)
    temp: dict[str, FieldDecl] = Field(default_factory=dict)
    perm: dict[str, FieldDecl] = Field(default_factory=dict)
    selector: list[StrictStr] | Selector | None = None
    lookup: Lookup | None = Field(
        None,
        description="Find another layer's instance (no selector of its own): handlers of this "
        "layer name it (docs/spec-language.md 2.5).",
    )
    prep: list[Statement] = Field(default_factory=list)
    sequence: Sequence | None = None
    framing: Framing | None = None
    psm: PSM | None = None
    events: dict[str, Event] = Field(default_factory=dict)
    timeout: Duration | None = None
    linger: Duration | Linger | None = Field(
        None,
        description="After its accept state an instance lingers as a closed record this long: "
        "late packets of its key are counted on it and not processed.",
    )
    checksums: dict[str, Checksum] = Field(
        default_factory=dict,
        description="Checksum fields of the header, by field name, and what each covers.",
    )
    pseudo_header: PseudoHeader | None = Field(
        None,
        description="Address fields the checksums of layers above (pseudo_header: PARAM) sum.",
    )


for _m in (IfStep, ElifStep, ElseStep, IfStmt, ElifStmt, ElseStmt, Protocol):
    _m.model_rebuild()
