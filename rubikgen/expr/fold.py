"""Constant evaluation and width bounds of typed expressions, without a scope: what stages after
sema (lowering's typed node constructors, constant folding, the back-end) may use without
reaching the checker (the `reads-the-model` contract of setup.cfg)."""

from __future__ import annotations

from .ast import Binary, Bool, Call, Expr, Num, Unary

__all__ = ["M64", "is_const", "is_multiple_of", "trailing_zeros", "width_bound"]

M64 = (1 << 64) - 1


def fold_binary(op: str, a: int, b: int) -> int:
    match op:
        case "+":
            return (a + b) & M64
        case "-":
            return (a - b) & M64
        case "*":
            return (a * b) & M64
        case "/":
            return a // b if b else 0
        case "%":
            return a % b if b else 0
        case "<<":
            return (a << b) & M64 if b < 64 else 0
        case ">>":
            return a >> b if b < 64 else 0
        case "&":
            return a & b
        case "|":
            return a | b
        case "^":
            return a ^ b
        case "==":
            return int(a == b)
        case "!=":
            return int(a != b)
        case "<":
            return int(a < b)
        case "<=":
            return int(a <= b)
        case ">":
            return int(a > b)
        case ">=":
            return int(a >= b)
        case "&&":
            return int(bool(a) and bool(b))
        case "||":
            return int(bool(a) or bool(b))
    raise ValueError(f"unknown operator {op!r}")


def is_const(e: Expr) -> int | None:
    """Value of an expression built only from literals (run-time semantics), else None.

    Folds literals, operators and min()/max() of constants, modulo 2**64; ``x / 0`` and
    ``x % 0`` fold to 0 and shifts by 64 or more to 0, as at run time.
    """
    match e:
        case Num(value=v):
            return v
        case Bool(value=v):
            return int(v)
        case Unary(op=op, operand=o):
            x = is_const(o)
            if x is None:
                return None
            if op == "!":
                return int(not x)
            if op == "~":
                return ~x & M64
            return -x & M64
        case Binary(op=op, left=a, right=b):
            x = is_const(a)
            if x is None:
                return None
            y = is_const(b)
            if y is None:
                return None
            return fold_binary(op, x, y)
        case Call(func="min" | "max" as f, args=(a, b)):
            x, y = is_const(a), is_const(b)
            if x is None or y is None:
                return None
            return min(x, y) if f == "min" else max(x, y)
    return None


def trailing_zeros(e: Expr) -> int:
    """How many low bits of the value are provably 0 (0..64), for any field values."""
    k = is_const(e)
    if k is not None:
        return 64 if k == 0 else (k & -k).bit_length() - 1
    match e:
        case Binary(op="*", left=a, right=b):
            return min(64, trailing_zeros(a) + trailing_zeros(b))
        case Binary(op="<<", left=a, right=b):
            s = is_const(b)
            return min(64, trailing_zeros(a) + s) if s is not None else trailing_zeros(a)
        case Binary(op=">>", left=a, right=b):
            s = is_const(b)
            return max(0, trailing_zeros(a) - s) if s is not None else 0
        case Binary(op="+" | "-" | "|" | "^", left=a, right=b):
            return min(trailing_zeros(a), trailing_zeros(b))
        case Binary(op="&", left=a, right=b):
            return max(trailing_zeros(a), trailing_zeros(b))
        case Unary(op="-", operand=a):
            return trailing_zeros(a)
        case Call(func="min" | "max", args=(a, b)):
            return min(trailing_zeros(a), trailing_zeros(b))
    return 0


def is_multiple_of(e: Expr, k: int) -> bool:
    """Whether the value is provably a multiple of k for every input (k a power of two,
    e.g. 8 for a length in bits: ``x << 3``, ``x * 8``, ``(a + b) * 16``); for other k
    only constants are proven."""
    if k <= 0:
        raise ValueError("k must be positive")
    if k & (k - 1) == 0:
        return trailing_zeros(e) >= k.bit_length() - 1
    c = is_const(e)
    return c is not None and c % k == 0


def width_bound(op: str, lw: int, rw: int, rc: int | None) -> int:
    """A sound upper bound on the bits of `left op right`."""
    match op:
        case "+":
            return max(lw, rw) + 1
        case "*":
            return lw + rw
        case "/":
            return lw
        case "%":
            return min(lw, rw)
        case "&":
            return min(lw, rw)
        case "|" | "^":
            return max(lw, rw)
        case "<<":
            return lw + rc if rc is not None and rc < 64 else (1 if rc is not None else 64)
        case ">>":
            return max(1, lw - rc) if rc is not None and rc < 64 else (1 if rc is not None else lw)
    return 64  # '-' wraps below zero
