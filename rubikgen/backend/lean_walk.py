"""TLV loops (`any_until`) walked without parsing, where nothing reads what they parse.

A loop such as TCP's options stores every field of every option, its `has__` flags, checks
each tag's constant again and dispatches through a `switch`. When the per-packet function
never reads any of those fields (no rule, handler, expression or `until` condition names
them), only the cursor and the errors matter: the lean walk takes each option's length from
a 256-entry table (the fixed size of the tag's layout, or 0 for a tag-length-value layout
whose length byte gives it) and consumes exactly the bytes the full walk would, with the
same truncation errors, the same unknown-tag stop and the same `max` and `until` ends.
Decided on the rendered text, like prune.py: it sees what every part of the back-end wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubikgen.expr.ast import Binary, Name, Num
from rubikgen.ir.layout import HField

__all__ = ["LeanWalk", "Shape", "apply", "shape"]

# a plain store starts here: optional member, then `=` (not `==`); after a statement start
_STORE = re.compile(r"\s*=(?!=)")
_STMT_START = re.compile(r"(?:^|[;{}]|\))\s*$")


@dataclass(frozen=True)
class Shape:
    """How many bytes a layout consumes: `fixed` bytes, or a prefix of `fixed` bytes whose
    byte at `len_at` minus `minus` gives the value's length (`tlv`)."""

    tlv: bool
    fixed: int
    len_at: int = 0
    minus: int = 0


def shape(fields: list[HField]) -> Shape | None:
    """The layout's shape when the lean walk can consume it exactly; None otherwise (a
    constant other than the tag must still be checked, a length of another form...)."""
    bits = 0
    pos: dict[str, tuple[int, int]] = {}
    for i, f in enumerate(fields):
        if f.kind == "num" or f.size is not None:
            if i > 0 and f.const is not None:
                return None
            w = (f.width or 64) if f.kind == "num" else (f.size or 0) * 8
            pos[f.name] = (bits, w)
            bits += w
            continue
        e = f.length
        if i != len(fields) - 1 or f.length_unit != "bytes" or bits % 8:
            return None
        if not (
            isinstance(e, Binary)
            and e.op == "-"
            and isinstance(e.left, Name)
            and isinstance(e.right, Num)
            and len(e.left.parts) == 2
            and e.left.parts[0] == "header"
            and pos.get(e.left.parts[1], (1, 0))[1] == 8
            and pos[e.left.parts[1]][0] % 8 == 0
        ):
            return None
        return Shape(True, bits // 8, pos[e.left.parts[1]][0] // 8, e.right.value)
    if bits == 0 or bits % 8 or bits // 8 >= 255:
        return None
    return Shape(False, bits // 8)


@dataclass(frozen=True)
class LeanWalk:
    full: str  # the loop as the full walk renders it
    lean: str  # the same walk without stores
    var: str  # the layer's header variable (h_L)
    names: frozenset[str]  # the loop's fields and has__ flags


def _read(body: str, var: str, names: frozenset[str]) -> bool:
    for m in re.finditer(rf"(?<![\w.>]){re.escape(var)}\b(?:\.(\w+))?", body):
        if m.group(1) is not None and m.group(1) not in names:
            continue  # another field
        ls = body.rfind("\n", 0, m.start()) + 1
        if _STORE.match(body, m.end()) and _STMT_START.search(body[ls : m.start()]):
            continue  # a plain store (the layer's clears)
        return True
    return False


def _find(lines: list[str], full: list[str]) -> list[int]:
    """Where full's lines start in lines, indentation aside (the body indents them more)."""
    want = [x.strip() for x in full]
    stripped = [x.strip() for x in lines]
    return [
        i for i, x in enumerate(stripped) if x == want[0] and stripped[i : i + len(want)] == want
    ]


def apply(body: str, walks: list[LeanWalk]) -> str:
    """body with each full walk whose fields nothing else reads replaced by its lean walk."""
    for w in walks:
        lines = body.split("\n")
        full = w.full.split("\n")
        at = _find(lines, full)
        if len(at) != 1:
            continue
        i = at[0]
        rest = "\n".join(lines[:i] + lines[i + len(full) :])
        if _read(rest, w.var, w.names):
            continue
        extra = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        extra = extra[: max(0, len(extra) - (len(full[0]) - len(full[0].lstrip())))]
        lean = [extra + x if x else x for x in w.lean.split("\n")]
        body = "\n".join(lines[:i] + lean + lines[i + len(full) :])
    return body
