"""Types of expression values: unsigned numbers of a known bit width and byte slices.

Numbers are unsigned 64-bit at run time; the width of a :class:`NumT` is a sound upper
bound on the bits a value can occupy (a 4-bit field is ``NumT(4)``, ``a & 0xff`` is at
most ``NumT(8)``).  Booleans are ``NumT(1)``.  PSM states are numbers (the scope decides
their width; ``NumT(16)`` is the convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

__all__ = [
    "BOOL",
    "U8",
    "U64",
    "BytesT",
    "NumT",
    "Resolved",
    "Type",
    "describe",
    "is_bytes",
    "is_num",
    "max_value",
]


@dataclass(frozen=True, slots=True)
class NumT:
    """An unsigned number whose values fit in ``width`` bits (1..64)."""

    width: int = 64

    def __post_init__(self) -> None:
        if not 1 <= self.width <= 64:
            raise ValueError(f"NumT width must be 1..64, got {self.width}")


@dataclass(frozen=True, slots=True)
class BytesT:
    """A byte slice (pointer + length); ``size`` is the fixed size in bytes, or None."""

    size: int | None = None

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 0:
            raise ValueError(f"BytesT size must be >= 0, got {self.size}")


Type = NumT | BytesT

BOOL = NumT(1)
U8 = NumT(8)
U64 = NumT(64)


def is_num(t: object) -> TypeGuard[NumT]:
    return isinstance(t, NumT)


def is_bytes(t: object) -> TypeGuard[BytesT]:
    return isinstance(t, BytesT)


def max_value(t: NumT) -> int:
    """The largest value a number of this type can hold."""
    return (1 << t.width) - 1


def describe(t: Type | None) -> str:
    """Human wording used in diagnostics: 'number (16 bits)', 'byte slice', 'byte slice (4 bytes)'."""
    if t is None:
        return "unknown type"
    if isinstance(t, NumT):
        return f"number ({t.width} bit{'s' if t.width != 1 else ''})"
    if t.size is None:
        return "byte slice"
    return f"byte slice ({t.size} byte{'s' if t.size != 1 else ''})"


@dataclass(frozen=True)
class Resolved:
    """What a name means.

    kind: 'field', 'temp', 'perm', 'foreign_field', 'foreign_perm', 'foreign_temp',
    'builtin', 'state', 'transition', 'event', 'option', 'layout' or 'atom' (a virtual atom's
    latch, written by lowering). ``owner``: the layer a foreign name belongs to, when the
    name was resolved for one layer of a stack (None for the layer itself).
    """

    type: Type
    kind: str
    virtual: bool = False
    assignable: bool = False
    owner: str | None = None
