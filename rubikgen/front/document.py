"""A spec document as the front-end holds it, and what the semantic checks need from the
loader that holds them (``SpecLoader``; ``rubikgen.front.workspace.Workspace`` is the one).

The checks (``sema/stack.py``, ``front/compose.py``) see the loader through this protocol, so they
do not import ``workspace.py``, which imports them: the import graph has no cycle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import SourceMap
from rubikgen.models import Protocol as ProtocolModel
from rubikgen.models import Stack

if TYPE_CHECKING:  # the result types (data-only modules) are named for the checker only
    from rubikgen.sema.info import ProtocolInfo
    from rubikgen.sema.stack_info import StackInfo


@dataclass
class Document:
    path: str  # as given / displayed
    abspath: str
    kind: str | None  # "protocol" | "stack" | None when unusable
    model: ProtocolModel | Stack | None
    smap: SourceMap
    diags: list[Diagnostic] = field(default_factory=list)
    info: ProtocolInfo | None = None  # protocols: their symbols (sema/symbols.py builds them)
    stack_info: StackInfo | None = None  # stacks: their layers and bindings (sema/stack.py)
    checked: bool = False
    sources: list[str] = field(default_factory=list)  # stack files composed into this one


def display_path(p: str) -> str:
    rel = os.path.relpath(p)
    return rel if not rel.startswith("..") else p


class SpecLoader(Protocol):
    """Loads and caches documents by absolute path."""

    docs: dict[str, Document]
    loading: set[str]  # stacks being composed (extends cycles)

    def load(self, path: str) -> Document: ...

    def check_protocol(self, path: str) -> Document: ...


__all__ = ["Document", "SpecLoader", "display_path"]
