"""Names the language provides: built-in values, events and functions."""

from __future__ import annotations

from dataclasses import dataclass

# Built-in events fired by the runtime, with the arguments their handlers receive.
BUILTIN_EVENTS: dict[str, str] = {
    "rexmit": "a segment carried only bytes already received (args: offset, length)",
    "out_of_wnd": "a segment fell outside the sequence window (args: offset, length)",
    "overlap": "a segment partly overlapped buffered data with different bytes (args: offset, length)",
    "buffer_full": "the sequence hit max_bytes or max_blocks; data was dropped (args: offset, length)",
    "fail": "no PSM transition matched (args: state)",
    "timeout": "the instance was idle longer than the layer's timeout",
    "evicted": "the instance was evicted because the layer's instance cap was reached",
    "created": "an instance was created by this packet",
    "destroyed": "the instance was destroyed (accept state, timeout, eviction or flush)",
}

# Names available in expressions without a prefix.
BUILTIN_VALUES = (
    "input",
    "payload",
    "payload_len",
    "cursor",
    "sdu",
    "sdu_len",
    "to_active",
    "to_passive",
    "current_state",
    "true",
    "false",
)

NAMESPACES = ("header", "temp", "perm", "psm", "event", "v")

FUNCTIONS = ("has", "len", "varint", "varint_len", "min", "max", "ready_upto")

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
