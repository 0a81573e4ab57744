"""Models of a stack document."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, StrictStr

from rubikgen.models.common import CallArg, Expr, Model


class LayerInst(Model):
    protocol: StrictStr = Field(description="Protocol file, relative to this stack file.")
    args: dict[str, StrictStr] = Field(
        default_factory=dict, description="Parameter name -> layer name."
    )
    doc: StrictStr | None = None


class Edge(Model):
    from_: StrictStr = Field(alias="from")
    to: StrictStr
    when: Expr | None = None
    priority: StrictInt = 0
    max_repeat: StrictInt | None = Field(None, description="Self-loops only: bound on repetitions.")
    input: Expr | None = Field(
        None, description="Self-loops only: the bytes the next pass parses (default: the sdu)."
    )
    doc: StrictStr | None = None


class Handler(Model):
    layer: StrictStr
    when: Expr | None = None
    before: list[StrictStr] = Field(default_factory=list)
    with_: StrictStr | list[StrictStr] | None = Field(None, alias="with")
    args: dict[str, CallArg] = Field(default_factory=dict)
    doc: StrictStr | None = None


# Link types of captures, as the capture driver reports them (see runtime-c rg_pcap.h).
LinkType = Literal["ethernet", "null", "raw_ipv4", "raw_ipv6", "sll", "sll2"]


def entries_of(entry: str | dict[str, str]) -> dict[str, str]:
    """Link type -> entry layer; a single entry serves every link type ('*')."""
    return {"*": entry} if isinstance(entry, str) else dict(entry)


class Stack(Model):
    """Layers, the parse tree joining them, and the handlers C developers implement."""

    stack: StrictStr
    doc: StrictStr | None = None
    entry: StrictStr | dict[LinkType, StrictStr] = Field(
        description="The first layer, or one per capture link type (the driver picks by the capture's)."
    )
    layers: dict[str, LayerInst] = Field(min_length=1)
    edges: list[Edge] = Field(default_factory=list)
    handlers: dict[str, Handler] = Field(default_factory=dict)
