"""Translation of resolved expressions and statements to C11.

The trees come from sema (sema/resolve.py): every node carries its type (``Node.type``) and
every name its binding (``Name.ref``). This module renders them and does not check them again;
a tree without types (a bare parse) is refused.

Run-time semantics are those of docs/spec-language.md section 4.5: every number is a
``uint64_t`` C expression (booleans are 0/1), every byte slice an ``rg_bytes`` C expression
(runtime-c/include/rg/rg_common.h).  The generated text needs ``#include "rg/rg_pkt.h"``.

* ``+ - * & | ^`` and unary ``-`` (``0 - x``) are plain unsigned C arithmetic: it wraps modulo
  2^64.  ``~x`` is ``x ^ UINT64_MAX`` (gcc's -Wbool-operation flags ``~`` on a comparison).
* ``/ % << >>``, ``min``/``max`` and every comparison call the ``rg_op_*`` helpers of
  rg_pkt.h: a zero divisor and shifts of 64 or more give 0 without undefined behaviour, and
  comparisons a valid spec may contain (``header.version == 16`` on a 4-bit field, ``x >= 0``,
  ``x == x``) do not trip -Wtype-limits / -Wtautological-compare under -Werror.  Constant
  divisors and shift counts use the C operator directly.
* ``&&``/``||`` are C's, so the right side is evaluated only when needed.
* Slicing, indexing, ``len``, ``varint`` and ``varint_len`` use the clamping helpers
  ``rg_slice*``, ``rg_index``, ``rg_varint*``; slice equality is ``rg_bytes_eq``.
* Sub-expressions built only from literals are folded (``is_const``), so no constant shift
  or division by zero reaches the C compiler.

What names mean is asked of a :class:`CEnv` that the back-end implements.  Every ``text`` this
module returns is a primary or postfix C expression (parenthesised, a call or a literal), so
it can be used as an operand without further parentheses.  Each name's C text appears at most
once per occurrence in the source expression; C leaves the evaluation order of operands
unspecified, so name texts must be free of side effects that matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from ..expr.ast import (
    Assign,
    Binary,
    Call,
    CallStmt,
    Expr,
    Index,
    Name,
    Slice,
    Stmt,
    Str,
    Unary,
)
from ..expr.fold import is_const
from ..expr.types import BOOL, U64, BytesT, NumT, Type, describe, is_bytes, is_num

__all__ = ["CEnv", "CExpr", "CRef", "cond_to_c", "lit", "stmt_to_c", "to_c"]

M64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class CRef:
    """The C form of a name, as the back-end provides it.

    For reading (``CEnv.ref``): ``type`` NumT -> ``text`` is a C expression of an unsigned
    integer type (or 0/1 for booleans), zero-extended to 64 bits here; BytesT -> ``text`` is an
    ``rg_bytes`` expression with a non-NULL pointer.

    For writing (``CEnv.target``): NumT(w) -> ``text`` is an lvalue of an unsigned type of at
    least w bits and ``ctype`` that type's name (the stored value is cast to it; None assigns
    without a cast); BytesT(N) -> ``text`` is a ``uint8_t *`` expression (an array decays) to N
    writable bytes; BytesT(None) -> ``text`` is an ``rg_bytes`` lvalue.
    """

    text: str
    type: Type
    ctype: str | None = None


@dataclass(frozen=True, slots=True)
class CExpr:
    """A translated expression: ``text`` is ``uint64_t`` for NumT, ``rg_bytes`` for BytesT.

    ``type`` is the checker's type (widths as in docs/spec-language.md 4.5), which the
    back-end uses to choose C types of callback arguments.
    """

    text: str
    type: Type


class CEnv(Protocol):
    """What the back-end supplies for one expression context (a layer, a step).

    ``ref`` and ``target`` get every dotted name the checker accepted (``header.seq``,
    ``temp.x``, ``ip.perm.y``, ``payload``, ``CLOSED``, ``psm.T``).  ``has`` returns a C
    expression that is non-zero when the layout was parsed.  ``assemble`` and ``set_sdu``
    return complete C statements for those calls.
    """

    def ref(self, name: Name) -> CRef: ...

    def target(self, name: Name) -> CRef: ...

    def has(self, layout: str) -> str: ...

    def assemble(self) -> str: ...

    def set_sdu(self, value: CExpr) -> str: ...

    def seq_ready_upto(self, offset: str) -> str: ...


# ---------------------------------------------------------------------------------------
# Expressions

# A name text that binds tighter than a cast and a postfix '.len' as it is.
_SIMPLE = re.compile(r"[A-Za-z_]\w*(?:(?:->|\.)[A-Za-z_]\w*)*\Z")

_ARITH = {"+", "-", "*", "&", "|", "^"}
_CMP_HELPER = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_DIV_HELPER = {"/": "div", "%": "mod", "<<": "shl", ">>": "shr"}


def lit(value: int) -> str:
    """A uint64_t literal; hex for large values, where it reads better."""
    if not 0 <= value <= M64:
        raise ValueError(f"literal {value} does not fit in 64 bits")
    return f"UINT64_C({value})" if value < 1 << 16 else f"UINT64_C({value:#x})"


def _paren(text: str) -> str:
    return text if _SIMPLE.match(text) else f"({text})"


@dataclass(frozen=True, slots=True)
class _C:
    """A translated sub-expression.  ``cond``, set on 0/1-valued nodes, is its ``int`` form
    for boolean contexts: nested conditions read `(a && b) || c`, not
    `rg_op_truth((uint64_t)(a && b)) || ...`."""

    text: str
    type: Type
    cond: str | None = None


def _boolean(cond: str) -> _C:
    """A 0/1 value from an int condition (a primary or unary C expression)."""
    return _C(f"((uint64_t){cond})", BOOL, cond)


def c_bytes_literal(b: bytes) -> str:
    """A string literal as an rg_bytes view of static bytes: letters and digits as is, every
    other byte as a three-digit octal escape (bounded, unlike \\x, which would swallow a
    following hex digit). An empty literal points at rg_empty_byte (views are never NULL)."""
    if not b:
        return "rg_bytes_make(rg_empty_byte, 0)"
    body = "".join(chr(c) if chr(c).isalnum() and c < 0x80 else f"\\{c:03o}" for c in b)
    return f'rg_bytes_make((const uint8_t *)"{body}", {len(b)})'


class _Translator:
    def __init__(self, env: CEnv) -> None:
        self.env = env

    def expr(self, e: Expr) -> _C:
        k = is_const(e)
        if k is not None:
            return _C(lit(k), U64)
        match e:
            case Name():
                return self.name(e)
            case Unary():
                return self.unary(e)
            case Binary():
                return self.binary(e)
            case Call():
                return self.call(e)
            case Slice():
                return self.slice(e)
            case Index():
                return _C(f"rg_index({self.bytes(e.value)}, {self.num(e.index)})", U64)
            case Str(value=b):
                return _C(c_bytes_literal(b), BytesT(len(b)))
        raise TypeError(f"not a translatable expression: {e!r}")

    def num(self, e: Expr) -> str:
        c = self.expr(e)
        if not is_num(c.type):
            raise ValueError(f"expected a number, got a byte slice: {e!r}")
        return c.text

    def bytes(self, e: Expr) -> str:
        c = self.expr(e)
        if not is_bytes(c.type):
            raise ValueError(f"expected a byte slice, got a number: {e!r}")
        return c.text

    def truth(self, e: Expr) -> str:
        c = self.expr(e)
        if not is_num(c.type):
            raise ValueError(f"a condition must be a number: {e!r}")
        # rg_op_truth, not the bare value: `a * b && c` would be -Wint-in-bool-context.
        return c.cond if c.cond is not None else f"rg_op_truth({c.text})"

    def name(self, n: Name) -> _C:
        r = self.env.ref(n)
        if is_bytes(r.type):
            return _C(_paren(r.text), r.type)
        # Zero-extend first: arithmetic on a promoted uint8_t/uint16_t would be signed int.
        return _C(f"((uint64_t){_paren(r.text)})", r.type)

    def unary(self, e: Unary) -> _C:
        if e.op == "!":
            return _boolean(f"!{self.truth(e.operand)}")
        x = self.num(e.operand)
        if e.op == "~":
            # Not C's '~': on a 0/1 operand such as `(uint64_t)(a < b)` gcc reports
            # -Wbool-operation even through the cast.
            return _C(f"({x} ^ UINT64_MAX)", U64)
        # 0 - x rather than -x: the same wrap, without unsigned-negation warnings (MSVC C4146).
        return _C(f"(UINT64_C(0) - {x})", U64)

    def binary(self, e: Binary) -> _C:
        op = e.op
        if op in ("&&", "||"):
            # C's own operator: the right side is evaluated only when needed.
            return _boolean(f"({self.truth(e.left)} {op} {self.truth(e.right)})")
        if op in _CMP_HELPER:
            return self.compare(e)
        a, b = self.num(e.left), self.num(e.right)
        if op in _ARITH:
            return _C(f"({a} {op} {b})", U64)
        return _C(self.guarded(op, a, b, is_const(e.right)), U64)

    def compare(self, e: Binary) -> _C:
        left = self.expr(e.left)
        if is_bytes(left.type):  # the checker allows only == and != here
            neg = "!" if e.op == "!=" else ""
            return _boolean(f"{neg}rg_bytes_eq({left.text}, {self.bytes(e.right)})")
        text = f"rg_op_{_CMP_HELPER[e.op]}({left.text}, {self.num(e.right)})"
        return _C(text, BOOL, text)

    @staticmethod
    def guarded(op: str, a: str, b: str, k: int | None) -> str:
        """/ % << >>: the C operator when the right side is a safe constant, else the helper."""
        if k is None:
            return f"rg_op_{_DIV_HELPER[op]}({a}, {b})"
        unsafe = k == 0 if op in ("/", "%") else k >= 64
        # The left side is dropped: expressions have no side effects, and its value is unused.
        return lit(0) if unsafe else f"({a} {op} {b})"

    def call(self, c: Call) -> _C:
        match c.func, c.args:
            case "has", (Name(parts=(layout,)),):
                return _boolean(f"!!({self.env.has(layout)})")
            case "len", (s,):
                return _C(f"((uint64_t){self.bytes(s)}.len)", U64)
            case "varint", (s,):
                return _C(f"rg_varint({self.bytes(s)})", U64)
            case "varint_len", (s,):
                return _C(f"rg_varint_len({self.bytes(s)})", U64)
            case "name_len", (s, off):
                return _C(f"rg_name_len({self.bytes(s)}, {self.num(off)})", U64)
            case ("min" | "max") as f, (a, b):
                return _C(f"rg_op_{f}({self.num(a)}, {self.num(b)})", U64)
            case "ready_upto", (n,):
                return _boolean(f"!!({self.env.seq_ready_upto(self.num(n))})")
        raise ValueError(f"cannot translate call {c.func}() with {len(c.args)} argument(s)")

    def slice(self, e: Slice) -> _C:
        s = self.bytes(e.value)
        t = BytesT(None)
        if e.lo is None and e.hi is None:
            return _C(s, t)
        if e.hi is None:
            assert e.lo is not None
            return _C(f"rg_slice_from({s}, {self.num(e.lo)})", t)
        if e.lo is None:
            return _C(f"rg_slice_to({s}, {self.num(e.hi)})", t)
        return _C(f"rg_slice({s}, {self.num(e.lo)}, {self.num(e.hi)})", t)


def _type(e: Expr) -> Type:
    """The type sema gave the expression (Node.type): the back-end renders resolved trees and
    never checks them again."""
    if e.type is None:
        raise ValueError(f"expression is not resolved (no type): {e!r}")
    return e.type


def to_c(e: Expr, env: CEnv) -> CExpr:
    """Translate a resolved expression (every node typed by sema); ValueError if it is not."""
    t = _type(e)
    return CExpr(_Translator(env).expr(e).text, t)


def cond_to_c(e: Expr, env: CEnv) -> str:
    """A condition (any number, non-zero is true) as a C ``int`` expression for ``if (...)``."""
    _type(e)
    return _Translator(env).truth(e)


# ---------------------------------------------------------------------------------------
# Statements


def stmt_to_c(s: Stmt, env: CEnv) -> str:
    """Translate an assignment or a statement call to one C statement (no trailing newline)."""
    if isinstance(s, Assign):
        return _assign(s, env)
    if isinstance(s, CallStmt):
        return _call_stmt(s, env)
    raise TypeError(f"not a statement: {s!r}")


def _assign(s: Assign, env: CEnv) -> str:
    target = env.target(s.target)
    value = to_c(s.value, env)
    tt = target.type
    if is_num(tt) != is_num(value.type):
        raise ValueError(f"cannot assign a {describe(value.type)} to '{s.target.dotted}'")
    if isinstance(tt, NumT):
        return f"{target.text} = {_store_num(s.value, value.text, tt.width, target.ctype)};"
    if tt.size is None:
        # A view: it stays valid only as long as the data it points into (temps only).
        return f"{target.text} = {value.text};"
    # Copies min(len, size) bytes and zero-pads; the source may overlap the target.
    return f"rg_bytes_store({target.text}, {tt.size}, {value.text});"


def _store_num(e: Expr, text: str, width: int, ctype: str | None) -> str:
    """The value kept by a `width`-bit variable: its low bits (spec 4.5)."""
    mask = (1 << width) - 1
    k = is_const(e)
    if k is not None:
        stored = lit(k & mask)  # folded, so no constant conversion warning (-Woverflow)
    elif width < 64:
        stored = f"({text} & {lit(mask)})"
    else:
        stored = text
    return f"({ctype}){stored}" if ctype else stored


def _call_stmt(s: CallStmt, env: CEnv) -> str:
    match s.func, s.args:
        case "assemble", ():
            return env.assemble()
        case "set_sdu", (x,):
            value = to_c(x, env)
            if not is_bytes(value.type):
                raise ValueError("set_sdu() needs a byte slice")
            return env.set_sdu(value)
    raise ValueError(f"cannot translate statement {s.func}() with {len(s.args)} argument(s)")
