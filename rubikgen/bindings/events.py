"""The Python objects the stack bindings yield: one Event per handler call, instance close
and gap (the events NF's records, plus the closes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class FlowKey:
    """An instance's endpoints, read from its selector key as the stock NFs read them: the
    creator's side first (src, sport); ports only for a layer whose selector has sides."""

    src: str | None
    dst: str | None
    sport: int | None
    dport: int | None
    #: Community ID v1 of the flow (the Stack's community_id_seed, default 0), as the stock
    #: NFs' records carry it (an ICMP conversation's from its first packet's type and code, once
    #: that was seen); None when the layer is no IP flow (docs/nf.md, Community ID)
    community_id: str | None = None


@dataclass(slots=True)
class Event:
    """kind "call": a handler call (name: the handler; args: its arguments by name, numbers
    as int and bytes as bytes, or memoryview in a callback); "close": an instance ended (end:
    why, "accept" | "evicted" | "expired" | "flushed"; args: complete, state, and what the NFs'
    records say of its end: reason, late_packets and the layer's record fields, e.g. TCP's
    originator, conn_state, history); "gap": a hole
    gap recovery skipped (args: seq, len, at)."""

    kind: str
    layer: str
    name: str
    flow: int | None  # the instance's uid (unique in a stack context, from 1); None: none
    key: FlowKey | None
    dir: str | None  # "c2s": the direction of the instance's first packet; "s2c"
    ts: int  # packet time, nanoseconds
    pkt: int | None  # calls: 1-based packet number in the context
    args: dict[str, Any] = field(default_factory=dict)
    end: str | None = None  # calls made because the instance ended, and closes: why
