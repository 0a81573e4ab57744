"""The rubikgen expression language (docs/spec-language.md sections 1.6 and 2).

>>> from rubikgen.expr import parse_expr, unparse
>>> unparse(parse_expr("header.flags & 2 == 2"))
'header.flags & 2 == 2'
"""

from .ast import (
    Assign,
    Binary,
    Bool,
    Call,
    CallStmt,
    Expr,
    Index,
    Name,
    Node,
    Num,
    Slice,
    Stmt,
    Unary,
    unparse,
    walk,
)
from .check import (
    EXPR_FUNCTIONS,
    STATEMENT_CALLS,
    ExprDiag,
    Resolved,
    Scope,
    check_expr,
    check_stmt,
    free_names,
    is_const,
    is_multiple_of,
    layout_refs,
    trailing_zeros,
)
from .parser import ExprSyntaxError, parse_expr, parse_stmt
from .types import BOOL, U8, U64, BytesT, NumT, Type, describe, is_bytes, is_num, max_value

__all__ = [
    "BOOL",
    "EXPR_FUNCTIONS",
    "STATEMENT_CALLS",
    "U8",
    "U64",
    "Assign",
    "Binary",
    "Bool",
    "BytesT",
    "Call",
    "CallStmt",
    "Expr",
    "ExprDiag",
    "ExprSyntaxError",
    "Index",
    "Name",
    "Node",
    "Num",
    "NumT",
    "Resolved",
    "Scope",
    "Slice",
    "Stmt",
    "Type",
    "Unary",
    "check_expr",
    "check_stmt",
    "describe",
    "free_names",
    "is_bytes",
    "is_const",
    "is_multiple_of",
    "is_num",
    "layout_refs",
    "max_value",
    "parse_expr",
    "parse_stmt",
    "trailing_zeros",
    "unparse",
    "walk",
]
