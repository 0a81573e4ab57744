"""Names the language provides: built-in values, events and functions."""

from __future__ import annotations

from dataclasses import dataclass

from rubikgen.expr.types import BOOL, BytesT, NumT, Type


@dataclass(frozen=True)
class BuiltinEvent:
    """One built-in event: the single table the validator, the docs and the back-end use."""

    name: str
    doc: str
    args: str = ""  # what its handlers typically pass (documentation)
    # Close reasons (CLOSE_REASONS names) that raise it when an instance ends outside the
    # per-packet pipeline; empty: raised while a packet is processed (a fired flag).
    closes: tuple[str, ...] = ()

    @property
    def lifecycle(self) -> bool:
        return bool(self.closes)


# Why an instance ends: name in NF output, the C enumerator (runtime-c/include/rg/rg_api.h,
# tied to RG_FLOW_* by a static assert in the generated code) and its value.
CLOSE_REASONS: tuple[tuple[str, str, int], ...] = (
    ("accept", "RG_CLOSE_ACCEPT", 0),
    ("evicted", "RG_CLOSE_EVICTED", 1),
    ("expired", "RG_CLOSE_EXPIRED", 2),
    ("flushed", "RG_CLOSE_FLUSHED", 3),
)
CLOSE_C = {name: cname for name, cname, _ in CLOSE_REASONS}

# Built-in events raised by the runtime. Adding one is one line here (and, for a packet event,
# the runtime code that sets its flag).
BUILTIN_EVENT_TABLE: tuple[BuiltinEvent, ...] = (
    BuiltinEvent("rexmit", "a segment carried only bytes already received", "offset, length"),
    BuiltinEvent("out_of_wnd", "a segment fell outside the sequence window", "offset, length"),
    BuiltinEvent(
        "overlap",
        "a segment overlapped buffered data with different bytes",
        "values overlap_seq, overlap_len, overlap_new",
    ),
    BuiltinEvent(
        "buffer_full",
        "the sequence hit max_bytes or max_blocks; data was dropped",
        "offset, length",
    ),
    BuiltinEvent("fail", "no PSM transition matched", "state"),
    BuiltinEvent(
        "timeout", "the instance was idle longer than the layer's timeout", closes=("expired",)
    ),
    BuiltinEvent(
        "evicted",
        "the instance was evicted because the layer's instance cap was reached",
        closes=("evicted",),
    ),
    BuiltinEvent("created", "an instance was created by this packet"),
    BuiltinEvent(
        "destroyed",
        "the instance ended (accept state, timeout, eviction or flush)",
        closes=("accept", "evicted", "expired", "flushed"),
    ),
    BuiltinEvent(
        "gap",
        "an assemble() skipped holes the capture lost (gap recovery)",
        "values gap_seq, gap_len",
    ),
)

# name -> description (with the arguments), in table order.
BUILTIN_EVENTS: dict[str, str] = {
    e.name: e.doc + (f" (args: {e.args})" if e.args else "") for e in BUILTIN_EVENT_TABLE
}
# Lifecycle events: raised when an instance ends, outside the per-packet pipeline; name ->
# the close reasons that raise it.
LIFECYCLE_EVENTS: dict[str, tuple[str, ...]] = {
    e.name: e.closes for e in BUILTIN_EVENT_TABLE if e.lifecycle
}


# The overlap event's values: where the insert's overlaps with different bytes start, how many
# bytes differ, and how many of those now hold the new copy (the rest kept the old one).
OVERLAP_VALUES = ("overlap_seq", "overlap_len", "overlap_new")


# A framing protocol's values (docs/spec-language.md 2.7a): this pass cut a unit (the sdu, which
# may be empty), and what the framer met (rg/rg_framer.h RG_FRAME_*: 0 nothing, 1 a unit longer
# than max, 2 bytes lost before this delivery, 3 a length shorter than its prefix).
FRAME_VALUES = ("frame_unit", "frame_error")


@dataclass(frozen=True)
class BuiltinValue:
    """A value expressions name without a prefix: the one table sema's scope (its type and
    the context flag it needs: builtins.Context), the reserved names and lowering (the resource
    it reads, for the IR's read/write sets) take it from."""

    name: str
    type: Type
    needs: str  # the Context flag: "packet" | "seq" | "direction" | "psm"
    resource: str  # what it reads per packet: "HEADER" | "SDU" | "INST" | "STATE"


STATE_T = NumT(16)  # a PSM state's index (`current_state`, the states' names)

BUILTIN_VALUE_TABLE: dict[str, BuiltinValue] = {
    v.name: v
    for v in (
        BuiltinValue("input", BytesT(None), "packet", "HEADER"),
        BuiltinValue("payload", BytesT(None), "packet", "HEADER"),
        BuiltinValue("payload_len", NumT(32), "packet", "HEADER"),
        BuiltinValue("cursor", NumT(32), "packet", "HEADER"),
        BuiltinValue("sdu", BytesT(None), "seq", "SDU"),
        BuiltinValue("sdu_len", NumT(32), "seq", "SDU"),
        BuiltinValue("gap_seq", NumT(32), "seq", "SDU"),  # gap_*: gap recovery
        BuiltinValue("gap_len", NumT(32), "seq", "SDU"),
        *(BuiltinValue(n, NumT(32), "seq", "SDU") for n in OVERLAP_VALUES),
        *(BuiltinValue(n, NumT(8), "seq", "SDU") for n in FRAME_VALUES),  # framing only
        BuiltinValue("to_active", BOOL, "direction", "INST"),  # bidirectional protocols only
        BuiltinValue("to_passive", BOOL, "direction", "INST"),
        BuiltinValue("current_state", STATE_T, "psm", "STATE"),  # protocols with a psm only
    )
}

# Names available in expressions without a prefix.
BUILTIN_VALUES = (*BUILTIN_VALUE_TABLE, "true", "false")

NAMESPACES = ("header", "temp", "perm", "psm", "event", "v", "option")

FUNCTIONS = ("has", "len", "varint", "varint_len", "name_len", "min", "max", "ready_upto")

STATEMENT_CALLS = ("assemble", "set_sdu")

C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while bool true false NULL main""".split()
)


@dataclass(frozen=True)
class Context:
    """Where an expression sits in the per-layer pipeline (REQUIREMENTS R8.1)."""

    name: str
    header: bool = True  # own header fields
    temp: bool = True
    perm: bool = True
    foreign: bool = True
    seq: bool = True  # sdu, sdu_len
    psm: bool = True  # current_state, states
    fired: bool = True  # psm.T, event.E: set by the PSM step and the events
    direction: bool = True  # to_active / to_passive
    virtual: bool = False
    packet: bool = True  # payload, payload_len, cursor, has(): there is a packet
    why: str = ""


LAYOUT_LEN = Context(
    "a field length",
    temp=False,
    perm=False,
    seq=False,
    psm=False,
    fired=False,
    direction=False,
    why="fields are parsed before the instance is looked up",
)
HEADER_COND = Context(
    "the header program",
    temp=False,
    perm=False,
    seq=False,
    psm=False,
    fired=False,
    direction=False,
    why="the header is parsed before the instance is looked up",
)
PERM_INIT = Context(
    "a perm init",
    temp=False,
    perm=False,
    seq=False,
    psm=False,
    fired=False,
    why="init runs when the instance is created, before prep",
)
SELECTOR = Context(
    "the selector",
    temp=False,
    perm=False,
    seq=False,
    psm=False,
    fired=False,
    direction=False,
    why="the key is built before the instance is looked up",
)
PREP = Context(
    "prep", seq=False, fired=False, why="prep runs before the sequence insert and the PSM step"
)
SEQUENCE = Context(
    "the sequence",
    seq=False,
    fired=False,
    why="the sequence is filled before the PSM step and the events",
)
TRANSITION = Context("a transition", virtual=True)
EVENT = Context("an event", virtual=True)
EDGE = Context("a parse-tree edge")
HANDLER = Context("a handler", virtual=True)
LIFECYCLE = Context(
    "a lifecycle handler",
    header=False,
    temp=False,
    foreign=False,
    seq=False,
    fired=False,
    direction=False,
    packet=False,
    why="a lifecycle handler (with: timeout, evicted or destroyed) runs when the instance ends, "
    "outside any packet: only its perm variables, current_state and constants are available",
)


def lifecycle_hooks(with_: str | list[str] | None) -> list[str]:
    """The lifecycle events (timeout, evicted, destroyed) a `with` names."""
    names = [with_] if isinstance(with_, str) else list(with_ or [])
    return [w for w in names if w in LIFECYCLE_EVENTS]
