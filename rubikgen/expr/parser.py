"""Parse expression and statement strings into the AST of :mod:`rubikgen.expr.ast`.

The grammar (``grammar.lark``) is LALR(1) with a contextual lexer.  Lark's exceptions never
escape: every failure becomes an :class:`ExprSyntaxError` with a friendly message, the
character offset of the problem inside the text, and an optional hint.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from .ast import (
    BINARY_OPS,
    Assign,
    Binary,
    Bool,
    Call,
    CallStmt,
    Expr,
    Index,
    Name,
    Num,
    Slice,
    Stmt,
    Str,
    Unary,
)

__all__ = ["MAX_DEPTH", "U64_MAX", "ExprSyntaxError", "parse_expr", "parse_stmt"]

U64_MAX = (1 << 64) - 1
# Deeper expressions are rejected (keeps the recursive passes far from Python's limit).
MAX_DEPTH = 200


class ExprSyntaxError(Exception):
    """A syntax error in an expression or statement string.

    ``offset`` is a character offset into the parsed text (``len(text)`` for "unexpected
    end").  ``code`` is the diagnostic code: RG010 for syntax, RG015 for a literal that
    does not fit 64 bits.
    """

    def __init__(self, message: str, offset: int, hint: str | None = None, *, code: str = "RG010"):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.hint = hint
        self.code = code

    def __repr__(self) -> str:
        return f"ExprSyntaxError({self.message!r}, offset={self.offset}, hint={self.hint!r}, code={self.code!r})"

    def __reduce__(self) -> tuple[object, ...]:  # picklable despite the keyword-only argument
        return (_make_error, (self.message, self.offset, self.hint, self.code))


def _make_error(message: str, offset: int, hint: str | None, code: str) -> ExprSyntaxError:
    return ExprSyntaxError(message, offset, hint, code=code)


@functools.cache
def _lark() -> Lark:
    grammar = (Path(__file__).with_name("grammar.lark")).read_text(encoding="utf-8")
    return Lark(
        grammar,
        start=["start_expr", "start_stmt"],
        parser="lalr",
        lexer="contextual",
        maybe_placeholders=True,
    )


@functools.lru_cache(maxsize=8192)
def parse_expr(text: str) -> Expr:
    """Parse an expression.  Results are cached (AST nodes are immutable)."""
    tree = _parse(text, "start_expr")
    node, _, _ = _build(tree.children[0], 0)
    return node


@functools.lru_cache(maxsize=4096)
def parse_stmt(text: str) -> Stmt:
    """Parse a statement: ``TARGET = EXPR`` or ``FUNC(ARGS)``."""
    tree = _parse(text, "start_stmt")
    return _build_stmt(tree)


def _parse(text: str, start: str) -> Tree[Token]:
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    if not text.strip():
        what = "expression" if start == "start_expr" else "statement"
        example = "header.x == 1" if start == "start_expr" else "temp.x = header.y"
        raise ExprSyntaxError(f"empty {what}", 0, f"write an {what} such as '{example}'")
    try:
        return _lark().parse(text, start=start)
    except UnexpectedInput as e:
        raise _friendly(text, e, start == "start_stmt") from None
    except LarkError as e:  # pragma: no cover - defensive: lark raised something unforeseen
        raise ExprSyntaxError(f"cannot parse: {e}", 0) from None


# ---------------------------------------------------------------------------------------
# Tree -> AST


_DEC = re.compile(r"0|[1-9][0-9]*")
_HEX = re.compile(r"0[xX][0-9a-fA-F]+")
_BIN = re.compile(r"0[bB][01]+")


def _number(tok: Token) -> Num:
    return _literal(str(tok), tok.start_pos or 0, tok.end_pos or 0)


def _literal(s: str, start: int, end: int) -> Num:
    """Validate and convert a NUMBER token (raises ExprSyntaxError)."""
    if _DEC.fullmatch(s):
        value, base = int(s), 10
    elif _HEX.fullmatch(s):
        value, base = int(s[2:], 16), 16
    elif _BIN.fullmatch(s):
        value, base = int(s[2:], 2), 2
    elif re.fullmatch(r"0[0-9]+", s):
        raise ExprSyntaxError(
            f"leading zeros are not allowed in '{s}'",
            start,
            f"write {int(s)} (octal is not supported; use 0x.. or 0b.. for other bases)",
        )
    elif re.fullmatch(r"0[xXbB]", s):
        raise ExprSyntaxError(f"'{s}' has no digits", start, "write e.g. 0x1f or 0b101")
    elif re.fullmatch(r"[0-9]+[eE][0-9]{1,3}", s):
        value = int(s.split("e")[0].split("E")[0]) * 10 ** int(re.split("[eE]", s)[1])
        raise ExprSyntaxError(
            f"invalid number '{s}'",
            start,
            f"numbers are integers without exponents; write {value}"
            if value <= U64_MAX
            else "numbers are integers without exponents",
        )
    elif re.fullmatch(r"[0-9]+[A-Za-z_][A-Za-z0-9_]*", s) and not re.match(r"0[xXbB]", s):
        m = re.match(r"[0-9]+", s)
        assert m is not None
        raise ExprSyntaxError(
            f"invalid number '{s}'",
            start,
            "names cannot start with a digit; put an operator between a number and a name"
            if "_" not in s
            else "'_' separators are not supported in numbers",
        )
    else:
        raise ExprSyntaxError(
            f"invalid number '{s}'", start, "numbers are decimal, 0x hexadecimal or 0b binary"
        )
    if value > U64_MAX:
        raise ExprSyntaxError(
            f"the number {s} does not fit in 64 bits",
            start,
            "numbers are unsigned 64-bit: the largest is 0xffffffffffffffff (18446744073709551615)",
            code="RG015",
        )
    return Num(value, base=base, start=start, end=end)


def _tok_span(t: Token) -> tuple[int, int]:
    return t.start_pos or 0, t.end_pos or 0


def _build(t: Tree[Token] | Token, depth: int) -> tuple[Expr, int, int]:
    """Return (node, start, end) where start/end include surrounding parentheses."""
    if depth > MAX_DEPTH:
        start = t.start_pos if isinstance(t, Token) else _first_pos(t)
        raise ExprSyntaxError(
            f"expression is nested too deeply (more than {MAX_DEPTH} levels)",
            start or 0,
            "split it into temp variables",
        )
    if isinstance(t, Token):  # pragma: no cover - every token is wrapped by a rule
        raise ExprSyntaxError(f"unexpected '{t}'", t.start_pos or 0)
    kind = t.data
    ch = t.children
    d = depth + 1
    if kind == "num":
        tok = ch[0]
        assert isinstance(tok, Token)
        n = _number(tok)
        return n, n.start, n.end
    if kind == "str":
        tok = ch[0]
        assert isinstance(tok, Token)
        s, e = _tok_span(tok)
        return Str(_string(str(tok), s), start=s, end=e), s, e
    if kind == "name":
        tok = ch[0]
        assert isinstance(tok, Token)
        s, e = _tok_span(tok)
        if tok in ("true", "false"):
            return Bool(tok == "true", start=s, end=e), s, e
        return Name(tuple(str(tok).split(".")), start=s, end=e), s, e
    if kind == "paren":
        lpar, inner, rpar = ch
        assert isinstance(lpar, Token) and isinstance(rpar, Token) and inner is not None
        node, _, _ = _build(inner, d)
        return node, lpar.start_pos or 0, rpar.end_pos or 0
    if kind == "binary":
        lt, op, rt = ch
        assert isinstance(op, Token) and lt is not None and rt is not None
        left, ls, _ = _build(lt, d)
        right, _, re_ = _build(rt, d)
        return Binary(str(op), left, right, start=ls, end=re_), ls, re_
    if kind == "unary":
        op, ot = ch
        assert isinstance(op, Token) and ot is not None
        operand, _, oe = _build(ot, d)
        s = op.start_pos or 0
        return Unary(str(op), operand, start=s, end=oe), s, oe
    if kind == "call":
        name, _lpar, args, rpar = ch
        assert isinstance(name, Token) and isinstance(rpar, Token)
        s, e = name.start_pos or 0, rpar.end_pos or 0
        if "." in name:
            raise ExprSyntaxError(
                f"'{name}' is not a function",
                s,
                "only built-in functions can be called: has, len, varint, varint_len, name_len, min, max",
            )
        return Call(str(name), _args(args, d), start=s, end=e), s, e
    if kind == "index":
        vt, _lsqb, it, rsqb = ch
        assert isinstance(rsqb, Token) and vt is not None and it is not None
        value, vs, _ = _build(vt, d)
        index, _, _ = _build(it, d)
        e = rsqb.end_pos or 0
        return Index(value, index, start=vs, end=e), vs, e
    if kind == "slice":
        vt, _lsqb, lot, _colon, hit, rsqb = ch
        assert isinstance(rsqb, Token) and vt is not None
        value, vs, _ = _build(vt, d)
        lo = None if lot is None else _build(lot, d)[0]
        hi = None if hit is None else _build(hit, d)[0]
        e = rsqb.end_pos or 0
        return Slice(value, lo, hi, start=vs, end=e), vs, e
    raise AssertionError(f"unknown tree node {kind}")  # pragma: no cover


_ESCAPES = {"\\": 0x5C, "'": 0x27, '"': 0x22, "n": 0x0A, "r": 0x0D, "t": 0x09, "0": 0x00}


def _string(tok: str, start: int) -> bytes:
    """Decode a STRING token (quotes included) into bytes; ExprSyntaxError on a bad escape or
    a character outside printable ASCII (which bytes a non-ASCII character stands for would
    be a guess: write it as \\xHH)."""
    out = bytearray()
    i = 1
    while i < len(tok) - 1:
        c = tok[i]
        if c == "\\":
            nxt = tok[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            hx = tok[i + 2 : i + 4]
            if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", hx):
                out.append(int(hx, 16))
                i += 4
                continue
            raise ExprSyntaxError(
                f"unknown escape '\\{nxt}' in a string literal",
                start + i,
                "escapes are \\\\ \\' \\\" \\n \\r \\t \\0 and \\xHH",
            )
        if not (0x20 <= ord(c) < 0x7F):
            raise ExprSyntaxError(
                f"character {c!r} in a string literal is not printable ASCII",
                start + i,
                "write other bytes as \\xHH escapes",
            )
        out.append(ord(c))
        i += 1
    return bytes(out)


def _first_pos(t: Tree[Token]) -> int:
    """Offset of the leftmost token (iterative: the tree may be very deep)."""
    node: Tree[Token] | Token | None = t
    while isinstance(node, Tree):
        node = next((c for c in node.children if c is not None), None)
    return (node.start_pos or 0) if isinstance(node, Token) else 0


def _args(t: Tree[Token] | Token | None, depth: int) -> tuple[Expr, ...]:
    if t is None:
        return ()
    assert isinstance(t, Tree)
    return tuple(_build(c, depth)[0] for c in t.children if not isinstance(c, Token))


def _build_stmt(t: Tree[Token]) -> Stmt:
    ch = t.children
    name = ch[0]
    assert isinstance(name, Token)
    s, e = _tok_span(name)
    if t.data == "assign":
        vt = ch[2]
        assert vt is not None
        value, _, ve = _build(vt, 1)
        target = Name(tuple(str(name).split(".")), start=s, end=e)
        return Assign(target, value, start=s, end=ve)
    rpar = ch[3]
    assert isinstance(rpar, Token)
    if "." in name:
        raise ExprSyntaxError(
            f"'{name}' is not a function", s, "statement calls are assemble() and set_sdu(...)"
        )
    return CallStmt(str(name), _args(ch[2], 1), start=s, end=rpar.end_pos or 0)


# ---------------------------------------------------------------------------------------
# Friendly errors


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # 'num', 'str', 'name', 'op', 'bad'
    value: str
    start: int
    end: int


_SCAN = re.compile(
    r"""(?P<ws>[\ \t\r\n\f\v]+)
      | (?P<num>[0-9][A-Za-z0-9_]*)
      | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<op>\|\||&&|==|!=|<=|>=|<<|>>|[-+*/%&|^~!<>=()\[\]:,])
      | (?P<bad>.)""",
    re.X | re.S,
)

_BINARY = set(BINARY_OPS)
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
# Tokens after which an operand must follow.
_NEEDS_OPERAND = _BINARY | {"!", "~", "=", ",", "(", "["}
_CLOSE = {")": "(", "]": "["}
_OPEN = {"(": ")", "[": "]"}
# If the parser would have accepted one of these, it was waiting for an operand.
_OPERAND_TERMINALS = {"NAME", "NUMBER", "STRING"}
_COMPOUND = ("<<=", ">>=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=")


def _scan(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _SCAN.finditer(text):
        kind = m.lastgroup or "bad"
        if kind != "ws":
            out.append(_Tok(kind, m.group(), m.start(), m.end()))
    return out


def _show(t: _Tok | None) -> str:
    if t is None:
        return "end of input"
    if t.kind == "name":
        return f"name '{t.value}'"
    if t.kind == "num":
        return f"number '{t.value}'"
    return f"'{t.value}'"


def _open_brackets(toks: list[_Tok], upto: int) -> list[_Tok]:
    """Brackets still open before offset `upto` (ignores stray closers)."""
    stack: list[_Tok] = []
    for t in toks:
        if t.start >= upto:
            break
        if t.value in _OPEN and t.kind == "op":
            stack.append(t)
        elif t.value in _CLOSE and t.kind == "op" and stack and stack[-1].value == _CLOSE[t.value]:
            stack.pop()
    return stack


def _friendly(text: str, exc: UnexpectedInput, stmt: bool) -> ExprSyntaxError:
    toks = _scan(text)
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream or 0
        expected: set[str] = set(exc.allowed or ())
        at_end = False
    elif isinstance(exc, UnexpectedToken):
        at_end = exc.token.type == "$END"
        pos = len(text) if at_end else (exc.token.start_pos or 0)
        expected = set(exc.expected or ())
    else:  # pragma: no cover - LALR raises only the two above
        return ExprSyntaxError("syntax error", getattr(exc, "pos_in_stream", 0) or 0)
    tok = None if at_end else next((t for t in toks if t.start <= pos < t.end), None)
    for t in toks:  # a malformed number before the error is the first problem to report
        if t.kind == "num" and t.end <= pos:
            try:
                _literal(t.value, t.start, t.end)
            except ExprSyntaxError as bad:
                return bad
    if stmt and len(toks) >= 2 and toks[0].kind == "name" and toks[1].value == "==":
        # The contextual lexer reads '==' as '=' '=' here; report it as written.
        return ExprSyntaxError(
            "'==' compares; a statement assigns with '='",
            toks[1].start,
            f"write '{toks[0].value} = ...'",
        )
    before = [t for t in toks if t.end <= pos]
    prev = before[-1] if before else None
    operand_pos = bool(expected & _OPERAND_TERMINALS)
    return _diagnose(text, toks, tok, prev, pos, expected, operand_pos, stmt, len(before))


def _diagnose(
    text: str,
    toks: list[_Tok],
    tok: _Tok | None,
    prev: _Tok | None,
    pos: int,
    expected: set[str],
    operand_pos: bool,
    stmt: bool,
    n_before: int,
) -> ExprSyntaxError:
    E = ExprSyntaxError
    v = tok.value if tok else ""

    # Characters that are not part of the language at all.
    if tok is not None and tok.kind == "bad":
        if v in "\"'":
            return E(
                "unterminated string literal",
                pos,
                f"close it with {v}; write a quote inside it as \\{v}",
            )
        if v == "?":
            return E(
                "the conditional operator '?:' is not supported",
                pos,
                "use if/then/else steps, or min()/max()",
            )
        if v == ".":
            if prev is not None and prev.end == pos and prev.kind == "num":
                return E("numbers are integers; '.' is not allowed here", pos, None)
            if prev is not None and prev.end == pos and prev.kind == "name":
                return E(
                    f"expected a name after '{prev.value}.'",
                    pos + 1,
                    "names look like header.x or ip.header.saddr",
                )
            return E("unexpected '.'", pos, "dotted names are written without spaces: header.x")
        if v == "#":
            return E("unexpected '#'", pos, "comments are not allowed inside an expression")
        if v == ";":
            return E("unexpected ';'", pos, "write one statement per list item")
        if not v.isprintable() or v.isspace():
            return E(f"unexpected character U+{ord(v):04X}", pos, "remove the invisible character")
        if not v.isascii():
            return E(f"unexpected character '{v}'", pos, "names use ASCII letters, digits and '_'")
        return E(f"unexpected character '{v}'", pos, None)

    # Statement shape: NAME '=' EXPR or NAME '(' ARGS ')'.
    if stmt and n_before == 0:
        return E(
            f"unexpected {_show(tok)}: a statement starts with the variable to assign or the function to call",
            pos,
            "e.g. 'temp.x = header.y' or 'assemble()'",
        )
    if stmt and n_before == 1 and prev is not None and prev.kind == "name" and "ASSIGN" in expected:
        name = prev.value
        for op in _COMPOUND:
            if text.startswith(op, pos):
                return E(
                    f"compound assignment '{op}' is not supported",
                    pos,
                    f"write '{name} = {name} {op[:-1]} ...'",
                )
        if v == "[":
            return E(
                "only a whole variable can be assigned", pos, "assign to temp.X, perm.X or P.perm.X"
            )
        if tok is None:
            return E(
                f"'{name}' alone is not a statement",
                pos,
                "a statement assigns ('temp.x = expr') or calls a function ('assemble()')",
            )
        return E(f"expected '=' or '(' after '{name}', found {_show(tok)}", pos, None)

    # '=' where a comparison was probably meant.
    if v == "=":
        nxt = text[pos + 1 : pos + 2]
        if nxt in ("<", ">"):
            return E(f"'={nxt}' is not an operator; did you mean '{nxt}='?", pos, None)
        return E("'=' is assignment; did you mean '=='?", pos, "compare with '=='")
    if v == ">" and prev is not None and prev.value == "<" and prev.end == pos:
        return E("'<>' is not an operator; did you mean '!='?", prev.start, None)

    # End of input.
    if tok is None:
        if prev is not None and prev.kind == "op" and prev.value in _NEEDS_OPERAND - {"(", "["}:
            return _after(prev, pos)
        unclosed = _open_brackets(toks, pos)
        if unclosed:
            b = unclosed[-1]
            return E(f"unclosed '{b.value}'", b.start, f"add '{_OPEN[b.value]}' to close it")
        return E("unexpected end of input", pos, None)

    # Closing brackets.
    if v in _CLOSE and tok.kind == "op":
        if prev is not None and prev.value == "(" and v == ")" and prev.end <= pos:
            if "RPAR" not in expected:
                return E("empty parentheses", prev.start, "put an expression inside '( )'")
        if prev is not None and prev.value == "[" and v == "]":
            return E("empty brackets", prev.start, "write s[i] for a byte or s[a:b] for a slice")
        if prev is not None and prev.kind == "op" and prev.value in _NEEDS_OPERAND:
            return _after(prev, pos)
        open_ = _open_brackets(toks, pos)
        if not open_:
            return E(f"unexpected '{v}'", pos, f"there is no matching '{_CLOSE[v]}'")
        if open_[-1].value != _CLOSE[v]:
            o = open_[-1]
            return E(
                f"'{v}' does not match the '{o.value}' at offset {o.start}",
                pos,
                f"close it with '{_OPEN[o.value]}'",
            )

    # Operands where an operator was expected.
    if (
        not operand_pos
        and tok.kind in ("name", "num")
        or (v in ("(", "!", "~") and not operand_pos)
    ):
        if tok.kind == "name" and v in ("and", "or"):
            return E(f"use '{'&&' if v == 'and' else '||'}' instead of '{v}'", pos, None)
        if prev is not None and prev.kind == "name" and prev.value == "not":
            return E("use '!' instead of 'not'", prev.start, None)
        if tok.kind == "name" and v in ("is", "in"):
            return E(f"'{v}' is not an operator", pos, "compare with '==' or '!='")
        if v == "(":
            return E(
                "unexpected '('",
                pos,
                "only built-in functions can be called; is an operator missing?",
            )
        return E(f"unexpected {_show(tok)}", pos, _operator_hint(toks, pos))

    # Chained comparisons.
    if v in _COMPARE and not operand_pos and tok.kind == "op":
        return E(
            "comparisons cannot be chained",
            pos,
            "write 'a < b && b < c', or add parentheses",
        )

    # Operators where an operand was expected.
    if operand_pos:
        if (
            prev is not None
            and prev.kind == "op"
            and prev.value in _NEEDS_OPERAND
            and prev.value not in "(["
        ):
            return _after(prev, pos)
        if prev is None or prev.value in ("(", "[", ","):
            if v in _BINARY:
                return E(f"unexpected '{v}'", pos, f"'{v}' needs an expression on its left")
            return E(f"unexpected {_show(tok)}; expected an expression", pos, None)
        return E(f"unexpected {_show(tok)}; expected an expression", pos, None)

    if v in (":",) and tok.kind == "op":
        return E("unexpected ':'", pos, "':' is only used in slices: s[a:b]")
    if v == ",":
        return E("unexpected ','", pos, "',' separates function arguments")
    return E(f"unexpected {_show(tok)}", pos, None)


def _operator_hint(toks: list[_Tok], pos: int) -> str:
    open_ = _open_brackets(toks, pos)
    if not open_:
        return "expected an operator (such as '&&', '==' or '+') or the end of the expression"
    b = open_[-1]
    i = toks.index(b)
    if b.value == "(" and i > 0 and toks[i - 1].kind == "name":
        return "expected an operator, ',' between arguments, or ')'"
    return f"expected an operator or '{_OPEN[b.value]}'"


def _after(prev: _Tok, pos: int) -> ExprSyntaxError:
    op = prev.value
    if op == "=":
        return ExprSyntaxError("expected a value to assign after '='", pos, "write 'temp.x = EXPR'")
    if op == ",":
        return ExprSyntaxError("expected an expression after ','", pos, "remove the trailing ','")
    hint = (
        f"'{op}' needs an operand" if op in ("!", "~") else f"'{op}' needs an operand on its right"
    )
    return ExprSyntaxError(f"expected an expression after '{op}'", pos, hint)
