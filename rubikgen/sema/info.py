"""What pass 1 of protocol analysis (sema/symbols.py) finds in a protocol: its fields, layouts,
variables, states and events. Data only, so that lowering and the back-ends may read it without
reaching a checker (the `reads-the-model` contract of setup.cfg)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.front.source import Path, SourceMap
from rubikgen.models.protocol import Protocol
from rubikgen.sema.builtins import BUILTIN_EVENTS

__all__ = ["FieldInfo", "ProtocolInfo", "VarInfo"]


@dataclass
class FieldInfo:
    name: str
    layout: str
    index: int
    kind: str  # "num" | "bytes"
    path: Path
    width: int | None = None  # bits, numbers
    size: int | None = None  # bytes, fixed slices
    length_expr: str | None = None  # variable slices
    length_unit: str = "bytes"  # unit of length_expr
    order: str = "big"
    const: int | None = None
    init: str | None = None
    # Position inside the layout: byte offset of the start of the field's bit run (fixed part
    # only) and bit offset of the field inside that run, MSB first. None after a variable field.
    bit_offset: int | None = None


@dataclass
class VarInfo:
    name: str
    kind: str  # "num" | "bytes"
    path: Path
    width: int | None = None
    size: int | None = None  # fixed bytes; None = a view of any length
    init: str | None = None


@dataclass
class ProtocolInfo:
    name: str
    file: str
    model: Protocol
    smap: SourceMap
    fields: dict[str, FieldInfo] = field(default_factory=dict)
    layouts: dict[str, list[FieldInfo]] = field(default_factory=dict)
    temps: dict[str, VarInfo] = field(default_factory=dict)
    perms: dict[str, VarInfo] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)
    transitions: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    # param name -> candidate protocol files (resolved absolute paths)
    param_files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def bidirectional(self) -> bool:
        sel = self.model.selector
        return sel is not None and not isinstance(sel, list) and sel.sides is not None

    @property
    def has_instance(self) -> bool:
        return self.model.selector is not None

    def all_events(self) -> list[str]:
        return list(self.events) + [e for e in BUILTIN_EVENTS if e not in self.events]
