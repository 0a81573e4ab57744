"""TLV loops (`any_until`) walked without parsing, where nothing reads what they parse.

A loop such as TCP's options stores every field of every option, its `has__` flags, checks
each tag's constant again and dispatches through a `switch`. When the per-packet function
never reads any of those fields (no rule, handler, expression or `until` condition names
them), only the cursor and the errors matter: the lean walk takes each option's length from
a 256-entry table (the fixed size of the tag's layout, or 0 for a tag-length-value layout
whose length byte gives it) and consumes exactly the bytes the full walk would, with the
same truncation errors, the same unknown-tag stop and the same `max` and `until` ends.
Decided on the rendered text, like prune.py: it sees what every part of the back-end wrote.

Both walks also drop their `max` iteration count where the `until` condition provably ends
the loop no later (`ends_first`): every iteration consumes at least the smallest layout's
fixed bytes, so after `max` iterations the cursor has passed any value the bound can take."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubikgen.expr.ast import Binary, Expr, Name, Num
from rubikgen.ir.layout import HField

__all__ = ["LeanWalk", "Shape", "apply", "ends_first", "fixed_bytes", "shape"]

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


def fixed_bytes(fields: list[HField]) -> int:
    """Bytes a layout consumes at least: its fixed-size fields (variable ones add >= 0)."""
    bits = 0
    for f in fields:
        if f.kind == "num":
            bits += f.width or 64
        elif f.size is not None:
            bits += f.size * 8
    return bits // 8


# values the proof works with stay far from any C integer width (no wrap to reason about)
_SMALL = 1 << 32


def _upper(e: Expr, fields: dict[str, HField]) -> int | None:
    """Largest value e can take (all operands unsigned), or None when not bounded here."""
    if isinstance(e, Num):
        return e.value if 0 <= e.value < _SMALL else None
    if isinstance(e, Name):
        f = fields.get(e.parts[1]) if len(e.parts) == 2 and e.parts[0] == "header" else None
        if f is None or f.kind != "num" or f.width is None or f.width > 31:
            return None
        return (1 << f.width) - 1
    if isinstance(e, Binary) and e.op in ("+", "*", "/", ">>", "&"):
        lhs, rhs = _upper(e.left, fields), _upper(e.right, fields)
        if lhs is None or rhs is None:
            return None
        if e.op == "+":
            v = lhs + rhs
        elif e.op == "*":
            v = lhs * rhs
        elif e.op == "&":
            v = min(lhs, rhs)
        else:
            v = lhs  # dividing or shifting an unsigned value never grows it
        return v if v < _SMALL else None
    return None


def ends_first(
    until: Expr | None, fields: dict[str, HField], lo: int, step: int, max_iter: int
) -> bool:
    """True when `until` holds once `max_iter` iterations have run, whatever the packet: the
    cursor starts at >= lo and every iteration that does not break adds >= step bytes, so
    after max_iter of them it is >= lo + step * max_iter, at or past the largest value of E
    in `cursor >= E` (or `cursor > E`; either side of an `||` suffices). The loop then ends
    on the same iteration with or without its count."""
    if until is None or step < 1:
        return False
    if isinstance(until, Binary) and until.op == "||":
        return ends_first(until.left, fields, lo, step, max_iter) or ends_first(
            until.right, fields, lo, step, max_iter
        )
    if not (
        isinstance(until, Binary)
        and until.op in (">=", ">")
        and isinstance(until.left, Name)
        and until.left.parts == ("cursor",)
    ):
        return False
    top = _upper(until.right, fields)
    if top is None:
        return False
    reach = lo + step * max_iter
    return reach >= top + 1 if until.op == ">" else reach >= top
