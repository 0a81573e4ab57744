"""Models of a stack document."""

from __future__ import annotations

from pydantic import Field, StrictInt, StrictStr

from rubikgen.models.common import CallArg, Expr, Model


class LayerInst(Model):
    protocol: StrictStr = Field(description="Protocol file, relative to this stack file.")
    args: dict[str, StrictStr] = Field(default_factory=dict, description="Parameter name -> layer name.")
    doc: StrictStr | None = None


class Edge(Model):
    from_: StrictStr = Field(alias="from")
    to: StrictStr
    when: Expr | None = None
    priority: StrictInt = 0
    max_repeat: StrictInt | None = Field(None, description="Self-loops only: bound on repetitions.")
    doc: StrictStr | None = None


class Handler(Model):
    layer: StrictStr
    when: Expr | None = None
    before: list[StrictStr] = Field(default_factory=list)
    with_: StrictStr | list[StrictStr] | None = Field(None, alias="with")
    args: dict[str, CallArg] = Field(default_factory=dict)
    doc: StrictStr | None = None


class Stack(Model):
    """Layers, the parse tree joining them, and the handlers C developers implement."""

    stack: StrictStr
    doc: StrictStr | None = None
    entry: StrictStr
    layers: dict[str, LayerInst] = Field(min_length=1)
    edges: list[Edge] = Field(default_factory=list)
    handlers: dict[str, Handler] = Field(default_factory=dict)
