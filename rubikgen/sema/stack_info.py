"""What the checks of a stack found (sema/stack.py): its layers, their protocols and bindings,
and the parse tree's edges. Data only, so that the front-end's Document can name it without an
import cycle (sema/stack.py's checks see the Document)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.front.source import Path
from rubikgen.models.stack import Edge
from rubikgen.sema.info import ProtocolInfo

__all__ = ["DEFAULT_MAX_REPEAT", "LayerInfo", "StackInfo"]

DEFAULT_MAX_REPEAT = 16  # a layer's `max_repeat` when the stack sets none


@dataclass
class LayerInfo:
    name: str
    protocol: ProtocolInfo
    bindings: dict[str, str]  # param -> layer name
    path: Path
    options: dict[str, bool | int] = field(default_factory=dict)  # set by the layer


@dataclass
class StackInfo:
    name: str
    entries: dict[str, str]  # link type ('*' = any) -> entry layer
    layers: dict[str, LayerInfo] = field(default_factory=dict)
    # layer -> outgoing edges in the order they are tried
    children: dict[str, list[tuple[int, Edge]]] = field(default_factory=dict)
