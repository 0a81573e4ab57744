"""AST of expressions and statements.

Every node is a frozen dataclass with ``start``/``end`` character offsets into the source
text (``end`` exclusive).  Positions do not take part in equality or hashing, so two
parses of the same expression written differently (spacing, hex vs decimal, redundant
parentheses) compare equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .types import Resolved, Type

__all__ = [
    "BINARY_OPS",
    "UNARY_OPS",
    "Assign",
    "Binary",
    "Bool",
    "Call",
    "CallStmt",
    "Expr",
    "Index",
    "Name",
    "Node",
    "Num",
    "Slice",
    "Stmt",
    "Str",
    "Unary",
    "children",
    "precedence",
    "unparse",
    "walk",
]

# Binding strength of binary operators (higher binds tighter).  Unlike C, the bitwise
# operators bind tighter than comparisons.  Comparisons do not chain.
BINARY_OPS: dict[str, int] = {
    "||": 1,
    "&&": 2,
    "==": 3,
    "!=": 3,
    "<": 3,
    "<=": 3,
    ">": 3,
    ">=": 3,
    "|": 4,
    "^": 5,
    "&": 6,
    "<<": 7,
    ">>": 7,
    "+": 8,
    "-": 8,
    "*": 9,
    "/": 9,
    "%": 9,
}
COMPARISON_PREC = 3
UNARY_PREC = 10
POSTFIX_PREC = 11
ATOM_PREC = 12
UNARY_OPS = ("!", "~", "-")


@dataclass(frozen=True, slots=True)
class Node:
    start: int = field(default=0, compare=False, kw_only=True)
    end: int = field(default=0, compare=False, kw_only=True)
    # The checker's type of this node, on trees sema resolved (check.resolve_expr); None on
    # a bare parse. Like positions, it takes no part in equality.
    type: Type | None = field(default=None, compare=False, kw_only=True, repr=False)


@dataclass(frozen=True, slots=True)
class Num(Node):
    value: int
    # How the literal was written (10, 16 or 2); only used by unparse.
    base: int = field(default=10, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Bool(Node):
    value: bool


@dataclass(frozen=True, slots=True)
class Str(Node):
    """A byte-string literal (``'GET '``): a constant byte slice of ``len(value)`` bytes."""

    value: bytes


@dataclass(frozen=True, slots=True)
class Name(Node):
    """A (dotted) reference: ``header.x``, ``ip.header.saddr``, ``v.header.fin``, ``CLOSED``."""

    parts: tuple[str, ...]
    # What the name is bound to (field, temp, perm, builtin, state, ...), on resolved trees.
    ref: Resolved | None = field(default=None, compare=False, kw_only=True, repr=False)

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)

    def part_span(self, i: int) -> tuple[int, int]:
        """Offsets of ``parts[i]`` (names are single tokens, so this is exact)."""
        s = self.start + sum(len(p) + 1 for p in self.parts[:i])
        return s, s + len(self.parts[i])


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # '!', '~' or '-'
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary(Node):
    op: str  # a key of BINARY_OPS
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Call(Node):
    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Slice(Node):
    value: Expr
    lo: Expr | None
    hi: Expr | None


@dataclass(frozen=True, slots=True)
class Index(Node):
    value: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Assign(Node):
    target: Name
    value: Expr


@dataclass(frozen=True, slots=True)
class CallStmt(Node):
    func: str
    args: tuple[Expr, ...]


Expr = Num | Bool | Str | Name | Unary | Binary | Call | Slice | Index
Stmt = Assign | CallStmt


def children(n: Expr | Stmt) -> tuple[Expr, ...]:
    """Direct sub-expressions, in source order."""
    match n:
        case Unary(operand=o):
            return (o,)
        case Binary(left=a, right=b):
            return (a, b)
        case Call(args=args) | CallStmt(args=args):
            return args
        case Slice(value=v, lo=lo, hi=hi):
            return tuple(x for x in (v, lo, hi) if x is not None)
        case Index(value=v, index=i):
            return (v, i)
        case Assign(target=t, value=v):
            return (t, v)
        case _:
            return ()


def walk(n: Expr | Stmt) -> Iterator[Expr | Stmt]:
    """Pre-order traversal (source order), iterative."""
    stack: list[Expr | Stmt] = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def precedence(e: Expr) -> int:
    match e:
        case Binary(op=op):
            return BINARY_OPS[op]
        case Unary():
            return UNARY_PREC
        case Slice() | Index():
            return POSTFIX_PREC
        case _:
            return ATOM_PREC


def _num(n: Num) -> str:
    if n.base == 16:
        return hex(n.value)
    if n.base == 2:
        return bin(n.value)
    return str(n.value)


_STR_ESC = {0x5C: "\\\\", 0x27: "\\'", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x00: "\\0"}


def str_literal(b: bytes) -> str:
    """The source text of a byte-string literal: printable ASCII as is, the rest escaped."""
    out = []
    for c in b:
        if c in _STR_ESC:
            out.append(_STR_ESC[c])
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append(f"\\x{c:02x}")
    return "'" + "".join(out) + "'"


def _wrap(e: Expr, min_prec: int) -> str:
    s = unparse(e)
    return f"({s})" if precedence(e) < min_prec else s


def unparse(e: Expr | Stmt) -> str:
    """Print an expression or statement back as source text with minimal parentheses.

    ``parse_expr(unparse(e)) == e`` for every expression the parser can produce.
    """
    match e:
        case Num():
            return _num(e)
        case Bool(value=v):
            return "true" if v else "false"
        case Str(value=b):
            return str_literal(b)
        case Name(parts=parts):
            return ".".join(parts)
        case Unary(op=op, operand=o):
            return op + _wrap(o, UNARY_PREC)
        case Binary(op=op, left=a, right=b):
            p = BINARY_OPS[op]
            # Left-associative; comparisons do not chain, so they need parentheses on both sides.
            lp = p + 1 if p == COMPARISON_PREC else p
            return f"{_wrap(a, lp)} {op} {_wrap(b, p + 1)}"
        case Call(func=f, args=args) | CallStmt(func=f, args=args):
            return f"{f}({', '.join(unparse(a) for a in args)})"
        case Slice(value=v, lo=lo, hi=hi):
            los = "" if lo is None else unparse(lo)
            his = "" if hi is None else unparse(hi)
            return f"{_wrap(v, POSTFIX_PREC)}[{los}:{his}]"
        case Index(value=v, index=i):
            return f"{_wrap(v, POSTFIX_PREC)}[{unparse(i)}]"
        case Assign(target=t, value=v):
            return f"{unparse(t)} = {unparse(v)}"
    raise TypeError(f"not an expression node: {e!r}")
