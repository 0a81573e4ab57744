"""Typed node constructors, for stages that build expressions after sema (lowering's
conditions, constant folding): each node gets the type the checker would give it."""

from __future__ import annotations

from .ast import Binary, Expr, Name, Num, Unary
from .fold import is_const, width_bound
from .types import BOOL, U64, NumT, Resolved, is_num

__all__ = ["binary", "name", "num", "unary"]

_LOGIC = frozenset({"&&", "||", "==", "!=", "<", "<=", ">", ">="})


def num(value: int) -> Num:
    return Num(value, type=NumT(max(1, value.bit_length())))


def name(parts: tuple[str, ...], ref: Resolved) -> Name:
    return Name(parts, type=ref.type, ref=ref)


def unary(op: str, operand: Expr) -> Unary:
    return Unary(op, operand, type=BOOL if op == "!" else U64)


def binary(op: str, left: Expr, right: Expr) -> Binary:
    if op in _LOGIC:
        return Binary(op, left, right, type=BOOL)
    lw = left.type.width if is_num(left.type) else 64
    rw = right.type.width if is_num(right.type) else 64
    return Binary(op, left, right, type=NumT(min(64, width_bound(op, lw, rw, is_const(right)))))
