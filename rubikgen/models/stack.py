"""Models of a stack document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, StringConstraints

from rubikgen.models.common import CallArg, Expr, Model
from rubikgen.models.protocol import OptionValue


class LayerInst(Model):
    protocol: StrictStr = Field(
        description="Protocol file: relative to this stack file, a stock: name (stock:tcp.yaml)"
        " or found in the spec search path."
    )
    args: dict[str, StrictStr] = Field(
        default_factory=dict, description="Parameter name -> layer name."
    )
    options: dict[str, OptionValue] = Field(
        default_factory=dict,
        description="Option name -> value: overrides the protocol's default for this layer.",
    )
    doc: StrictStr | None = None


class Edge(Model):
    from_: StrictStr = Field(alias="from")
    to: StrictStr
    when: Expr | None = None
    priority: StrictInt = 0
    max_repeat: StrictInt | None = Field(None, description="Self-loops only: bound on repetitions.")
    input: Expr | None = Field(
        None,
        description="Self-loops only: the bytes the next pass parses (default: the sdu), so the "
        "sdu can go to a child layer while the loop walks the rest of the input.",
    )
    doc: StrictStr | None = None


class Handler(Model):
    layer: StrictStr
    when: Expr | None = None
    before: list[StrictStr] = Field(default_factory=list)
    with_: StrictStr | list[StrictStr] | None = Field(None, alias="with")
    args: dict[str, CallArg] = Field(default_factory=dict)
    doc: StrictStr | None = None


class StackEvent(Model):
    """A user-defined event (mOS's UDE): a named filter over an event of one layer."""

    on: StrictStr = Field(
        description="The base event, LAYER.EVENT: a protocol event (tcp.asm), a built-in packet "
        "event (tcp.rexmit) or another user-defined event of that layer (tcp.http_request)."
    )
    when: Expr | None = Field(
        None,
        description="The filter, in the layer's scope as a handler's `when`: the event is "
        "raised when the base event fired and this holds (none: whenever the base fired).",
    )
    before: list[StrictStr] = Field(
        default_factory=list,
        description="Events and handlers of the layer that run after this one.",
    )
    doc: StrictStr | None = None

    @property
    def layer(self) -> str:
        return self.on.split(".", 1)[0]

    @property
    def base(self) -> str:
        return self.on.split(".", 1)[1] if "." in self.on else ""


# Link types of captures, as the capture driver reports them (see runtime-c rg_pcap.h). The
# C runtime's RG_LINK_KIND_TABLE (rg_api.h) is the table; this literal, the IR's LINK_KINDS (the
# back-end may not import the models), the bindings' enum and the schema repeat it, and
# tests/backend/test_link_kinds.py ties every copy to it.
LinkType = Literal["ethernet", "null", "raw_ipv4", "raw_ipv6", "sll", "sll2", "ppp"]


def entries_of(entry: str | dict[Any, str] | None) -> dict[str, str]:
    """Link type -> entry layer; a single entry serves every link type ('*')."""
    if entry is None:
        return {}
    return {"*": entry} if isinstance(entry, str) else dict(entry)


class EdgeRef(Model):
    """Names the edges from one layer to another (every edge between them)."""

    from_: StrictStr = Field(alias="from")
    to: StrictStr


class Removal(Model):
    """What an extending stack removes from its base; each name must exist there."""

    layers: list[StrictStr] = Field(
        default_factory=list,
        description="Layers to remove, with the edges into and out of them and their handlers.",
    )
    edges: list[EdgeRef] = Field(default_factory=list)
    handlers: list[StrictStr] = Field(default_factory=list)
    events: list[StrictStr] = Field(default_factory=list, description="User-defined events.")
    entry: list[LinkType] = Field(default_factory=list, description="Link types to drop.")
    subtrees: list[StrictStr] = Field(default_factory=list)


class Subtree(Model):
    """A named group of layers; the edges between them and their handlers come with them."""

    layers: list[StrictStr] = Field(min_length=1)
    doc: StrictStr | None = None


class Graft(Model):
    """A copy of a subtree whose layers (and handlers) are renamed PREFIX + name."""

    subtree: StrictStr
    prefix: StrictStr = Field(description="Prepended to each layer and handler name of the copy.")
    handlers: StrictBool = Field(True, description="Copy the subtree's handlers too.")
    doc: StrictStr | None = None


# A byte size: a number of bytes, or digits with K, M, G or T (powers of 1024), an optional B.
SIZE_PATTERN = r"^[0-9]+[KMGT]?B?$"
Size = Annotated[
    Annotated[StrictInt, Field(ge=0)]
    | Annotated[str, StringConstraints(strict=True, pattern=SIZE_PATTERN)],
    Field(description="Bytes: a number, or digits with K, M, G or T (powers of 1024), e.g. 64M."),
]
MemcapPolicy = Literal["drop-flow", "evict-oldest", "bypass", "ignore"]


class Limits(Model):
    """Memory caps per worker (stack context) and what happens when one would be passed
    (docs/reliability.md); the driver's --memcap* options override them."""

    memcap_reassembly: Size | None = Field(
        None, description="Bytes of reassembly buffers (0: none; default 256M)."
    )
    memcap_flows: Size | None = Field(
        None, description="Bytes of flow-table records and indexes (0: none; default 256M)."
    )
    memcap_policy: MemcapPolicy | None = Field(
        None,
        description="When an allocation would pass a cap: drop-flow, evict-oldest (default), "
        "bypass or ignore.",
    )


class Stack(Model):
    """Layers, the parse tree joining them, and the handlers C developers implement."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["extends"]}, {"required": ["entry", "layers"]}]}
    )

    stack: StrictStr
    doc: StrictStr | None = None
    extends: StrictStr | None = Field(
        None,
        description="A base stack file (relative to this file) whose layers, edges, handlers, "
        "entries and subtrees this stack starts from.",
    )
    remove: Removal | None = Field(None, description="What to remove from the base stack.")
    entry: StrictStr | dict[LinkType, StrictStr] | None = Field(
        None,
        description="The first layer, or one per capture link type (the driver picks by the "
        "capture's). Required unless the stack extends another.",
    )
    layers: dict[str, LayerInst] = Field(
        default_factory=dict,
        description="Layers (added to, or replacing by name, those of the base stack).",
    )
    edges: list[Edge] = Field(
        default_factory=list, description="Edges (appended to those of the base stack)."
    )
    handlers: dict[str, Handler] = Field(default_factory=dict)
    events: dict[str, StackEvent] = Field(
        default_factory=dict,
        description="User-defined events: filters over an event of a layer that handlers hook "
        "with `with:` like built-in events (docs/spec-language.md section 3, user-defined "
        "events).",
    )
    subtrees: dict[str, Subtree] = Field(default_factory=dict)
    graft: list[Graft] = Field(
        default_factory=list, description="Copies of subtrees, added after everything else."
    )
    limits: Limits | None = Field(
        None, description="Memory caps and their exception policy (inherited from a base stack)."
    )
