"""Tests of the expression language: parser, AST printer, constant folding, type checker."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubikgen.expr import (
    BOOL,
    U8,
    U64,
    Assign,
    Binary,
    Bool,
    BytesT,
    Call,
    CallStmt,
    Expr,
    ExprDiag,
    ExprSyntaxError,
    Index,
    Name,
    Num,
    NumT,
    Resolved,
    Slice,
    Str,
    Unary,
    check_expr,
    check_stmt,
    describe,
    free_names,
    is_bytes,
    is_const,
    is_multiple_of,
    is_num,
    layout_refs,
    parse_expr,
    parse_stmt,
    trailing_zeros,
    unparse,
)
from rubikgen.expr.ast import BINARY_OPS, UNARY_OPS
from rubikgen.expr.parser import MAX_DEPTH, U64_MAX

# ---------------------------------------------------------------------------------------
# Helpers


def full(e: Expr) -> str:
    """Fully parenthesised form, to test the tree shape (precedence, associativity)."""
    match e:
        case Num(value=v):
            return str(v)
        case Bool(value=v):
            return str(v).lower()
        case Name():
            return e.dotted
        case Unary(op=op, operand=o):
            return f"({op}{full(o)})"
        case Binary(op=op, left=a, right=b):
            return f"({full(a)} {op} {full(b)})"
        case Call(func=f, args=args):
            return f"{f}({', '.join(full(a) for a in args)})"
        case Slice(value=v, lo=lo, hi=hi):
            return f"{full(v)}[{'' if lo is None else full(lo)}:{'' if hi is None else full(hi)}]"
        case Index(value=v, index=i):
            return f"{full(v)}[{full(i)}]"
    raise AssertionError(e)


def syntax_error(text: str, stmt: bool = False) -> ExprSyntaxError:
    with pytest.raises(ExprSyntaxError) as info:
        (parse_stmt if stmt else parse_expr)(text)
    return info.value


class DictScope:
    """A Scope over a flat dict, as the lead's real scopes behave."""

    def __init__(self, names: dict[tuple[str, ...], Resolved]) -> None:
        self.names = names

    def resolve(self, parts: tuple[str, ...]) -> Resolved | None:
        return self.names.get(parts)

    def candidates(self, parts: tuple[str, ...]) -> list[str]:
        pre = parts[:-1]
        n = len(pre)
        return sorted({k[n] for k in self.names if len(k) > n and k[:n] == pre})


S = DictScope(
    {
        ("header", "version"): Resolved(NumT(4), "field"),
        ("header", "ihl"): Resolved(NumT(4), "field"),
        ("header", "flags"): Resolved(NumT(8), "field"),
        ("header", "seq"): Resolved(NumT(32), "field"),
        ("header", "fin"): Resolved(NumT(1), "field"),
        ("header", "saddr"): Resolved(BytesT(4), "field"),
        ("header", "options"): Resolved(BytesT(None), "field"),
        ("v", "header", "fin"): Resolved(NumT(1), "field", virtual=True),
        ("temp", "x"): Resolved(NumT(8), "temp", assignable=True),
        ("temp", "data"): Resolved(BytesT(None), "temp", assignable=True),
        ("perm", "fin_seq"): Resolved(NumT(32), "perm", assignable=True),
        ("perm", "dcid"): Resolved(BytesT(8), "perm", assignable=True),
        ("ip", "header", "saddr"): Resolved(BytesT(4), "foreign_field"),
        ("ip", "perm", "n"): Resolved(NumT(16), "foreign_perm", assignable=True),
        ("ip", "temp", "t"): Resolved(NumT(16), "foreign_temp"),
        ("payload",): Resolved(BytesT(None), "builtin"),
        ("payload_len",): Resolved(U64, "builtin"),
        ("cursor",): Resolved(U64, "builtin"),
        ("current_state",): Resolved(NumT(16), "builtin"),
        ("CLOSED",): Resolved(NumT(16), "state"),
        ("EST",): Resolved(NumT(16), "state"),
        ("psm", "syn"): Resolved(BOOL, "transition"),
        ("event", "asm"): Resolved(BOOL, "event"),
        ("layout", "ip_opt"): Resolved(BOOL, "layout"),
        ("layout", "ip_hdr"): Resolved(BOOL, "layout"),
    }
)

STMT_CALLS = frozenset({"assemble", "set_sdu"})


def check(text: str, *, allow_virtual: bool = False, want: str = "any"):
    return check_expr(parse_expr(text), S, allow_virtual=allow_virtual, want=want)


def codes(diags: list[ExprDiag]) -> list[str]:
    return [d.code for d in diags]


def only(diags: list[ExprDiag], code: str) -> ExprDiag:
    assert codes(diags) == [code], diags
    return diags[0]


# ---------------------------------------------------------------------------------------
# Parsing: shape and precedence


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("header.flags & 2 == 2", "((header.flags & 2) == 2)"),
        ("a || b && c", "(a || (b && c))"),
        ("a && b || c", "((a && b) || c)"),
        ("a && b == c", "(a && (b == c))"),
        ("a == b | c", "(a == (b | c))"),
        ("a < b | c", "(a < (b | c))"),
        ("a | b ^ c", "(a | (b ^ c))"),
        ("a ^ b & c", "(a ^ (b & c))"),
        ("a & b << c", "(a & (b << c))"),
        ("a << b + c", "(a << (b + c))"),
        ("a >> b - c", "(a >> (b - c))"),
        ("a + b * c", "(a + (b * c))"),
        ("a - b % c", "(a - (b % c))"),
        ("a - b - c", "((a - b) - c)"),
        ("a / b / c", "((a / b) / c)"),
        ("a << b >> c", "((a << b) >> c)"),
        ("a | b | c", "((a | b) | c)"),
        ("a || b || c", "((a || b) || c)"),
        ("-a * b", "((-a) * b)"),
        ("!a && b", "((!a) && b)"),
        ("~a & b", "((~a) & b)"),
        ("- -a", "(-(-a))"),
        ("!!a", "(!(!a))"),
        ("!a[1]", "(!a[1])"),
        ("-payload[0]", "(-payload[0])"),
        ("(a + b) * c", "((a + b) * c)"),
        ("(a < b) == c", "((a < b) == c)"),
        ("payload[1:][0]", "payload[1:][0]"),
        ("payload[:header.length - 8]", "payload[:(header.length - 8)]"),
        ("payload[a:b]", "payload[a:b]"),
        ("payload[:]", "payload[:]"),
        ("(payload)[2]", "payload[2]"),
        ("min(a, b + 1) > max(1,2)", "(min(a, (b + 1)) > max(1, 2))"),
        ("has(ip_opt) && header.ihl > 5", "(has(ip_opt) && (header.ihl > 5))"),
        (
            "current_state == EST && header.fin",
            "((current_state == EST) && header.fin)",
        ),
        ("v.header.syn && to_passive", "(v.header.syn && to_passive)"),
        (
            "header.ack + (header.window << perm.wscale)",
            "(header.ack + (header.window << perm.wscale))",
        ),
        ("cursor >= header.hdr_len * 4", "(cursor >= (header.hdr_len * 4))"),
        ("f()", "f()"),
    ],
)
def test_precedence_and_shape(text: str, shape: str) -> None:
    assert full(parse_expr(text)) == shape


@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_every_binary_operator(op: str) -> None:
    e = parse_expr(f"a {op} b")
    assert e == Binary(op, Name(("a",)), Name(("b",)))
    assert parse_expr(f"a{op}b") == e  # no spaces needed
    assert unparse(e) == f"a {op} b"


@pytest.mark.parametrize("op", UNARY_OPS)
def test_every_unary_operator(op: str) -> None:
    e = parse_expr(f"{op}x")
    assert e == Unary(op, Name(("x",)))
    assert (e.start, e.end) == (0, 2)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("0x2a", 42),
        ("0X2A", 42),
        ("0b101", 5),
        ("0B11", 3),
        ("18446744073709551615", U64_MAX),
        ("0xffffffffffffffff", U64_MAX),
        ("0x000000000000000000001", 1),
    ],
)
def test_number_literals(text: str, value: int) -> None:
    assert parse_expr(text) == Num(value)


def test_bool_literals_and_names() -> None:
    assert parse_expr("true") == Bool(True)
    assert parse_expr("false") == Bool(False)
    assert parse_expr("trueish") == Name(("trueish",))
    assert parse_expr("ip.header.saddr") == Name(("ip", "header", "saddr"))
    assert parse_expr("_x1.y_2") == Name(("_x1", "y_2"))


@pytest.mark.parametrize(
    "text",
    ["18446744073709551616", "0x10000000000000000", "0b" + "1" * 65, "99999999999999999999999"],
)
def test_literal_too_large(text: str) -> None:
    err = syntax_error(f"header.x == {text}")
    assert err.code == "RG015"
    assert "does not fit in 64 bits" in err.message
    assert err.offset == 12
    assert err.hint is not None and "0xffffffffffffffff" in err.hint


def test_positions() -> None:
    e = parse_expr("header.x + 0x10")
    assert isinstance(e, Binary)
    assert (e.start, e.end) == (0, 15)
    assert (e.left.start, e.left.end) == (0, 8)
    assert (e.right.start, e.right.end) == (11, 15)

    e = parse_expr("  (a + b) * c ")
    assert isinstance(e, Binary) and isinstance(e.left, Binary)
    assert (e.start, e.end) == (2, 13)  # includes the parentheses
    assert (e.left.start, e.left.end) == (3, 8)

    e = parse_expr("len(payload[2:n]) > 0")
    assert isinstance(e, Binary) and isinstance(e.left, Call)
    call = e.left
    assert (call.start, call.end) == (0, 17)
    sl = call.args[0]
    assert isinstance(sl, Slice)
    assert (sl.start, sl.end) == (4, 16)
    assert sl.hi is not None and (sl.hi.start, sl.hi.end) == (14, 15)

    e = parse_expr("!x[3]")
    assert isinstance(e, Unary) and isinstance(e.operand, Index)
    assert (e.start, e.end, e.operand.start, e.operand.end) == (0, 5, 1, 5)

    n = parse_expr("ip.header.saddr")
    assert isinstance(n, Name)
    assert n.part_span(0) == (0, 2)
    assert n.part_span(2) == (10, 15)


def test_positions_do_not_affect_equality() -> None:
    a = parse_expr("a+b")
    assert a == parse_expr("  a +  b") == parse_expr("(a) + ((b))")
    assert hash(a) == hash(parse_expr("(a)+(b)"))
    assert parse_expr("0x10") == parse_expr("16") == parse_expr("0b10000")
    assert parse_expr("a") != parse_expr("b")


def test_cache_returns_same_object() -> None:
    assert parse_expr("header.x & 1") is parse_expr("header.x & 1")
    assert parse_stmt("temp.x = 1") is parse_stmt("temp.x = 1")


def test_multiline_and_whitespace() -> None:
    assert parse_expr("a &&\n  b\t||\r\nc") == parse_expr("a && b || c")


# ---------------------------------------------------------------------------------------
# Statements


def test_statements() -> None:
    s = parse_stmt("temp.offset = header.frag_off << 3")
    assert s == Assign(Name(("temp", "offset")), Binary("<<", Name(("header", "frag_off")), Num(3)))
    assert isinstance(s, Assign)
    assert (s.start, s.end, s.target.start, s.target.end) == (0, 34, 0, 11)
    assert parse_stmt("assemble()") == CallStmt("assemble", ())
    s2 = parse_stmt("set_sdu(payload[4:])")
    assert s2 == CallStmt("set_sdu", (Slice(Name(("payload",)), Num(4), None),))
    assert (s2.start, s2.end) == (0, 20)
    assert parse_stmt("ip.perm.n=1") == Assign(Name(("ip", "perm", "n")), Num(1))
    assert unparse(parse_stmt("perm.fin_seq = header.seq + payload_len")) == (
        "perm.fin_seq = header.seq + payload_len"
    )
    assert unparse(parse_stmt("set_sdu(payload[4:])")) == "set_sdu(payload[4:])"


@pytest.mark.parametrize(
    ("text", "message", "offset"),
    [
        ("temp.x += 1", "compound assignment '+=' is not supported", 7),
        ("temp.x <<= 1", "compound assignment '<<=' is not supported", 7),
        ("temp.x == 1", "'==' compares; a statement assigns with '='", 7),
        ("temp.x", "'temp.x' alone is not a statement", 6),
        ("temp.x[0] = 1", "only a whole variable can be assigned", 6),
        ("1 = x", "a statement starts with the variable to assign", 0),
        ("assemble(", "unclosed '('", 8),
        ("temp.x = ", "expected a value to assign after '='", 9),
        ("temp.x = a = b", "'=' is assignment; did you mean '=='?", 11),
        ("a.b()", "'a.b' is not a function", 0),
        ("", "empty statement", 0),
    ],
)
def test_statement_syntax_errors(text: str, message: str, offset: int) -> None:
    err = syntax_error(text, stmt=True)
    assert message in err.message
    assert err.offset == offset
    assert err.code == "RG010"


# ---------------------------------------------------------------------------------------
# Syntax errors


@pytest.mark.parametrize(
    ("text", "message", "offset"),
    [
        ("a )", "unexpected ')'", 2),
        ("a +", "expected an expression after '+'", 3),
        ("a && )", "expected an expression after '&&'", 5),
        ("a && && b", "expected an expression after '&&'", 5),
        ("a +* b", "expected an expression after '+'", 3),
        ("!", "expected an expression after '!'", 1),
        ("f(a,)", "expected an expression after ','", 4),
        ("a = b", "'=' is assignment; did you mean '=='?", 2),
        ("header.x=1", "'=' is assignment; did you mean '=='?", 8),
        ("a and b", "use '&&' instead of 'and'", 2),
        ("a or b", "use '||' instead of 'or'", 2),
        ("not a", "use '!' instead of 'not'", 0),
        ("x && not y", "use '!' instead of 'not'", 5),
        ("a <> b", "did you mean '!='?", 2),
        ("a =< b", "did you mean '<='?", 2),
        ("a => b", "did you mean '>='?", 2),
        ("a < b < c", "comparisons cannot be chained", 6),
        ("a == b != c", "comparisons cannot be chained", 7),
        ("(a + b", "unclosed '('", 0),
        ("f(a, (b)", "unclosed '('", 1),
        ("a[1", "unclosed '['", 1),
        ("s[1:)", "')' does not match the '['", 4),
        ("(a]", "']' does not match the '('", 2),
        ("()", "empty parentheses", 0),
        ("s[]", "empty brackets", 1),
        ("&& a", "unexpected '&&'", 0),
        ("a b", "unexpected name 'b'", 2),
        ("a 5", "unexpected number '5'", 2),
        ("2(x)", "unexpected '('", 1),
        ("a.b(c)", "'a.b' is not a function", 0),
        ("0x", "'0x' has no digits", 0),
        ("0b102", "invalid number '0b102'", 0),
        ("007", "leading zeros are not allowed", 0),
        ("12ab", "invalid number '12ab'", 0),
        ("1.5", "numbers are integers", 1),
        ("header.", "expected a name after 'header.'", 7),
        ("header.1", "expected a name after 'header.'", 7),
        ("'x == a", "unterminated string literal", 0),
        ("a == 'x\\q'", "unknown escape", 7),
        ("a == 'é'", "not printable ASCII", 6),
        ("a ? b : c", "the conditional operator '?:' is not supported", 2),
        ("a # comment", "unexpected '#'", 2),
        ("x é", "unexpected character 'é'", 2),
        ("a\u00a0b", "unexpected character U+00A0", 1),
        ("a:b", "unexpected ':'", 1),
        ("a, b", "unexpected ','", 1),
        ("a[1:2:3]", "unexpected ':'", 5),
        ("", "empty expression", 0),
        ("   ", "empty expression", 0),
    ],
)
def test_syntax_errors(text: str, message: str, offset: int) -> None:
    err = syntax_error(text)
    assert message in err.message, err
    assert err.offset == offset, err
    assert err.code == "RG010"
    assert str(err) == err.message
    assert "Token" not in err.message and "lark" not in err.message.lower()


def test_syntax_error_hints() -> None:
    assert syntax_error("a = 1").hint == "compare with '=='"
    assert syntax_error("(a + b").hint == "add ')' to close it"
    assert "is an operator missing" in (syntax_error("2(x)").hint or "")
    assert "',' between arguments" in (syntax_error("min(a b)").hint or "")
    assert "no matching '('" in (syntax_error("a)").hint or "")
    assert syntax_error("a &&").hint == "'&&' needs an operand on its right"
    assert syntax_error("f(a,)").hint == "remove the trailing ','"


def test_malformed_number_is_reported_first() -> None:
    err = syntax_error("0x has")
    assert (err.message, err.offset) == ("'0x' has no digits", 0)
    err = syntax_error("temp.x + 1e5 )")
    assert err.message == "invalid number '1e5'"


def test_syntax_error_pickles() -> None:
    err = syntax_error("a +")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.message, copy.offset, copy.hint, copy.code) == (
        err.message,
        err.offset,
        err.hint,
        err.code,
    )


def test_deep_nesting_is_a_syntax_error() -> None:
    ok = "(" * 50 + "a" + ")" * 50
    assert parse_expr(ok) == Name(("a",))
    for text in ["(" * 2000 + "a" + ")" * 2000, "!" * 5000 + "a", "a" + " + a" * 3000]:
        err = syntax_error(text)
        assert "nested too deeply" in err.message
    assert MAX_DEPTH >= 100


# ---------------------------------------------------------------------------------------
# unparse


@pytest.mark.parametrize(
    "text",
    [
        "header.flags & 2 == 2",
        "(a || b) && c",
        "a - (b - c)",
        "a - b - c",
        "(a < b) == c",
        "a == (b < c)",
        "-(a + b)",
        "!(a && b)",
        "- -a",
        "(a + b)[1:2]",
        "payload[:header.length - 8]",
        "min(a, b)",
        "0x2a + 0b101",
        "true || false",
        "~(a | b) & 0xff",
    ],
)
def test_unparse_roundtrip_examples(text: str) -> None:
    e = parse_expr(text)
    assert parse_expr(unparse(e)) == e


def test_unparse_minimal_parentheses() -> None:
    assert unparse(parse_expr("((a + (b * c)))")) == "a + b * c"
    assert unparse(parse_expr("(a + b) * c")) == "(a + b) * c"
    assert unparse(parse_expr("a - (b + c)")) == "a - (b + c)"
    assert unparse(parse_expr("(a == b) == c")) == "(a == b) == c"
    assert unparse(parse_expr("0x2a")) == "0x2a"
    assert unparse(parse_expr("-(5)")) == "-5"


# ---------------------------------------------------------------------------------------
# Constant folding, free names


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7),
        ("0 - 1", U64_MAX),
        ("-1", U64_MAX),
        ("~0", U64_MAX),
        ("0xffffffffffffffff + 1", 0),
        ("7 / 2", 3),
        ("7 % 0", 0),
        ("7 / 0", 0),
        ("1 << 63", 1 << 63),
        ("1 << 64", 0),
        ("1 << 1000", 0),
        ("256 >> 64", 0),
        ("256 >> 4", 16),
        ("6 & 3 | 8 ^ 1", (6 & 3) | (8 ^ 1)),
        ("3 == 3", 1),
        ("3 != 3", 0),
        ("2 < 3 && 4 >= 4", 1),
        ("0 || 0", 0),
        ("!5", 0),
        ("true", 1),
        ("min(3, 9) + max(3, 9)", 12),
    ],
)
def test_is_const(text: str, value: int) -> None:
    assert is_const(parse_expr(text)) == value


@pytest.mark.parametrize(
    "text", ["a", "1 + a", "len(payload)", "payload[0]", "min(1, a)", "has(x)"]
)
def test_is_const_none(text: str) -> None:
    assert is_const(parse_expr(text)) is None


def test_free_names_and_layout_refs() -> None:
    e = parse_expr("has(ip_opt) && header.ihl > 5 || len(payload[cursor:]) == temp.x")
    assert [n.dotted for n in free_names(e)] == ["header.ihl", "payload", "cursor", "temp.x"]
    assert [n.dotted for n in layout_refs(e)] == ["ip_opt"]
    s = parse_stmt("perm.a = perm.a + header.b")
    assert [n.dotted for n in free_names(s)] == ["perm.a", "perm.a", "header.b"]


@pytest.mark.parametrize(
    ("text", "multiple"),
    [
        ("x << 3", True),
        ("x * 8", True),
        ("8 * x", True),
        ("(header.len - 2) * 8", True),
        ("x * 4 * 2", True),
        ("(x << 2) * 2", True),
        ("x * 16 + y * 8", True),
        ("(x & 0xf8)", True),
        ("-(x << 3)", True),
        ("min(x * 8, 64)", True),
        ("(x << 6) >> 3", True),
        ("0", True),
        ("24", True),
        ("x", False),
        ("x * 4", False),
        ("x << 3 | 1", False),
        ("x / 8 * 8 + 4", False),
        ("(x << 3) >> 1", False),
        ("x << y", False),
        ("~(x << 3)", False),
        ("12", False),
    ],
)
def test_is_multiple_of_8(text: str, multiple: bool) -> None:
    assert is_multiple_of(parse_expr(text), 8) is multiple


def test_is_multiple_of_other_k() -> None:
    assert is_multiple_of(parse_expr("12"), 3)
    assert not is_multiple_of(parse_expr("x * 3"), 3)  # only constants for non powers of two
    with pytest.raises(ValueError):
        is_multiple_of(parse_expr("1"), 0)


# ---------------------------------------------------------------------------------------
# Types


def test_types() -> None:
    assert describe(NumT(16)) == "number (16 bits)"
    assert describe(NumT(1)) == "number (1 bit)"
    assert describe(BytesT(None)) == "byte slice"
    assert describe(BytesT(4)) == "byte slice (4 bytes)"
    assert is_num(U8) and not is_bytes(U8) and is_bytes(BytesT()) and not is_num(BytesT())
    with pytest.raises(ValueError):
        NumT(0)
    with pytest.raises(ValueError):
        NumT(65)


@pytest.mark.parametrize(
    ("text", "type_"),
    [
        ("header.ihl", NumT(4)),
        ("header.ihl * 4", NumT(7)),
        ("header.ihl + header.flags", NumT(9)),
        ("header.seq & 0xff", NumT(8)),
        ("header.seq | 1", NumT(32)),
        ("header.flags >> 4", NumT(4)),
        ("header.flags << 3", NumT(11)),
        ("header.seq - 1", U64),
        ("~header.flags", U64),
        ("-header.flags", U64),
        ("header.seq % header.ihl", NumT(4)),
        ("header.seq / 3", NumT(32)),
        ("header.ihl == 5", BOOL),
        ("!header.seq", BOOL),
        ("header.fin && header.seq", BOOL),
        ("len(payload)", U64),
        ("varint(payload)", U64),
        ("varint_len(payload)", NumT(4)),
        ("min(header.ihl, header.seq)", NumT(4)),
        ("max(header.ihl, header.seq)", NumT(32)),
        ("has(ip_opt)", BOOL),
        ("payload", BytesT(None)),
        ("payload[2:6]", BytesT(4)),
        ("payload[:4]", BytesT(4)),
        ("payload[2:]", BytesT(None)),
        ("payload[cursor:6]", BytesT(None)),
        ("header.saddr[1:]", BytesT(3)),
        ("header.saddr[:2]", BytesT(2)),
        ("header.saddr[:]", BytesT(4)),
        ("payload[0]", U8),
        ("header.saddr == ip.header.saddr", BOOL),
        ("current_state == EST", BOOL),
        ("psm.syn || event.asm", BOOL),
        ("300", NumT(9)),
        ("0", NumT(1)),
        ("true", BOOL),
    ],
)
def test_inferred_types(text: str, type_: object) -> None:
    t, diags = check(text)
    assert diags == []
    assert t == type_


# ---------------------------------------------------------------------------------------
# Checker diagnostics


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("header.ilh > 5", "unknown name 'header.ilh'", "did you mean 'header.ihl'?"),
        ("hedaer.ihl", "unknown name 'hedaer.ihl'", "did you mean 'header.ihl'?"),
        ("header.fin_seq", "unknown name 'header.fin_seq'", "did you mean 'perm.fin_seq'?"),
        ("seq", "unknown name 'seq'", "did you mean 'header.seq'?"),
        ("closed", "unknown name 'closed'", "did you mean 'CLOSED'?"),
        ("ESTT", "unknown name 'ESTT'", "did you mean 'EST'?"),
        ("True", "unknown name 'True'", "did you mean 'true'?"),
        ("ip.header.sadr", "'ip.header' has no 'sadr'", "did you mean 'ip.header.saddr'?"),
        ("ip.hdr.saddr", "'ip' has no 'hdr'", "did you mean 'ip.header.saddr'?"),
        ("header", "'header' is not a value", "name a member, e.g. 'header.fin'"),
        (
            "ip_opt",
            "unknown name 'ip_opt'",
            "'ip_opt' is a layout; use has(ip_opt) to test whether it was parsed",
        ),
        ("zzz", "unknown name 'zzz'", None),
        ("has(ip_op)", "unknown layout 'ip_op'", "did you mean 'ip_opt'?"),
    ],
)
def test_unknown_names(text: str, message: str, hint: str | None) -> None:
    _, diags = check(text)
    d = only(diags, "RG011")
    assert message in d.message
    assert d.hint == hint


def test_unknown_name_span() -> None:
    _, diags = check("1 + header.ilh")
    d = only(diags, "RG011")
    assert (d.start, d.end) == (4, 14)


@pytest.mark.parametrize(
    ("text", "message", "span"),
    [
        ("payload + 1", "'+' needs two numbers, got a byte slice and a number (1 bit)", (0, 7)),
        ("header.seq * payload", "got a number (32 bits) and a byte slice", (13, 20)),
        ("payload < header.saddr", "'<' cannot compare byte slices", (0, 22)),
        ("payload >= 1", "'>=' needs two numbers, got a byte slice and a number (1 bit)", (0, 7)),
        (
            "header.saddr == header.seq",
            "cannot compare a byte slice (4 bytes) with a number (32 bits)",
            (0, 26),
        ),
        ("header.seq[1:2]", "cannot slice a number (32 bits)", (0, 15)),
        ("header.seq[1]", "cannot index a number (32 bits)", (0, 13)),
        ("len(header.seq)", "len() needs a byte slice, got a number (32 bits)", (4, 14)),
        ("varint(1)", "varint() needs a byte slice", (7, 8)),
        ("min(payload, 1)", "min() needs a number, got a byte slice", (4, 11)),
        ("!payload", "'!' needs a number, got a byte slice", (1, 8)),
        ("~payload", "'~' needs a number, got a byte slice", (1, 8)),
        ("payload && 1", "'&&' needs conditions (numbers), got a byte slice", (0, 7)),
        ("payload[payload]", "an index must be a number", (8, 15)),
        ("payload[payload:]", "a slice bound must be a number", (8, 15)),
    ],
)
def test_type_errors(text: str, message: str, span: tuple[int, int]) -> None:
    _, diags = check(text)
    d = only(diags, "RG012")
    assert message in d.message, d
    assert (d.start, d.end) == span


def test_layout_used_as_value() -> None:
    scope = DictScope({**S.names, ("ip_hdr",): Resolved(BOOL, "layout")})
    t, diags = check_expr(parse_expr("ip_hdr"), scope, allow_virtual=False)
    d = only(diags, "RG012")
    assert t is None
    assert d.message == "'ip_hdr' is a layout, not a value"
    assert d.hint is not None and "has(ip_hdr)" in d.hint


def test_want() -> None:
    _, d = check("payload", want="bool")
    assert "a condition must be a number" in only(d, "RG012").message
    _, d = check("payload", want="num")
    assert only(d, "RG012").message == "expected a number, got a byte slice"
    _, d = check("header.seq", want="bytes")
    assert only(d, "RG012").message == "expected a byte slice, got a number (32 bits)"
    for want in ("bool", "num", "any"):
        assert check("header.seq", want=want)[1] == []
    assert check("payload[1:]", want="bytes")[1] == []
    with pytest.raises(ValueError):
        check("a", want="string")


def test_virtual_references() -> None:
    t, diags = check("v.header.fin && header.seq", allow_virtual=True)
    assert diags == [] and t == BOOL
    _, diags = check("v.header.fin && header.seq")
    d = only(diags, "RG014")
    assert "'v.header.fin' is only allowed in conditions" in d.message
    assert d.hint == "write 'header.fin' to use this packet's value"
    assert (d.start, d.end) == (0, 12)


def test_constant_problems() -> None:
    d = only(check("header.seq / 0")[1], "RG015")
    assert (
        d.message == "division by zero" and d.severity == "error" and (d.start, d.end) == (13, 14)
    )
    d = only(check("header.seq % (2 - 2)")[1], "RG015")
    assert d.message == "modulo by zero"
    assert check("header.seq << 64")[1] == []  # fine: gives 0
    assert check("header.seq / header.ihl")[1] == []
    d = only(check("header.saddr[3:1]")[1], "RG015")
    assert d.severity == "warning" and "always empty" in d.message
    d = only(check("header.saddr[5]")[1], "RG015")
    assert d.severity == "warning" and "past its end" in d.message
    d = only(check("header.saddr[:9]")[1], "RG015")
    assert d.severity == "warning"


@pytest.mark.parametrize(
    ("text", "always"),
    [
        ("header.version == 300", "false"),
        ("300 == header.version", "false"),
        ("header.version != 16", "true"),
        ("header.version < 16", "true"),
        ("header.version <= 16", "true"),
        ("header.version > 16", "false"),
        ("header.version >= 16", "false"),
        ("16 > header.version", "true"),
        ("header.ihl * 4 == 300", "false"),
        ("temp.x == 256", "false"),
    ],
)
def test_comparison_out_of_range(text: str, always: str) -> None:
    d = only(check(text)[1], "RG016")
    assert d.severity == "warning"
    assert d.message.endswith(f"always {always}")
    assert "can never be" in d.message


@pytest.mark.parametrize(
    "text",
    [
        "header.version == 15",
        "header.flags & 2 == 2",
        "header.seq == 0xffffffff",
        "payload_len > 1 << 40",
        "3 == 300",
    ],
)
def test_comparison_in_range(text: str) -> None:
    assert check(text)[1] == []


def test_fixed_slices_of_different_sizes() -> None:
    d = only(check("header.saddr == payload[0:2]")[1], "RG016")
    assert d.severity == "warning"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo(1)", "unknown function 'foo'"),
        ("lenght(payload)", "unknown function 'lenght'"),
        ("not(header.fin)", "unknown function 'not'"),
        ("len(payload, 1)", "len() takes 1 argument, got 2"),
        ("len()", "len() takes 1 argument, got 0"),
        ("min(1)", "min() takes 2 arguments, got 1"),
        ("has()", "has() takes 1 argument (a layout name), got 0"),
        ("has(header.x)", "has() takes a layout name"),
        ("has(1)", "has() takes a layout name"),
        ("assemble()", "assemble() is a statement and has no value"),
    ],
)
def test_function_errors(text: str, message: str) -> None:
    d = only(check(text)[1], "RG017")
    assert message in d.message


def test_function_hints() -> None:
    assert only(check("lenght(payload)")[1], "RG017").hint == "did you mean 'len'?"
    assert only(check("not(header.fin)")[1], "RG017").hint == "use '!' for logical not"
    d = only(check("foo(1)")[1], "RG017")
    assert (d.start, d.end) == (0, 3)


def test_errors_inside_bad_calls_are_still_reported() -> None:
    _, diags = check("foo(header.ilh)")
    assert codes(diags) == ["RG017", "RG011"]


def test_diagnostics_are_sorted() -> None:
    _, diags = check("zz + payload + header.ilh")
    assert [d.start for d in diags] == sorted(d.start for d in diags)
    assert codes(diags) == ["RG011", "RG012", "RG011"]


# ---------------------------------------------------------------------------------------
# Statement checks


def stmt_diags(text: str, allowed: frozenset[str] = STMT_CALLS) -> list[ExprDiag]:
    return check_stmt(parse_stmt(text), S, allowed_calls=allowed)


@pytest.mark.parametrize(
    "text",
    [
        "temp.x = header.flags + 1",
        "perm.fin_seq = header.seq + payload_len",
        "ip.perm.n = 5",
        "temp.data = payload[4:]",
        "perm.dcid = payload",
        "perm.dcid = payload[:8]",
        "temp.x = header.seq",  # numbers are truncated silently
        "assemble()",
        "set_sdu(payload[4:])",
    ],
)
def test_valid_statements(text: str) -> None:
    assert stmt_diags(text) == []


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("header.seq = 1", "RG013", "cannot assign to 'header.seq': header fields are read-only"),
        ("ip.header.saddr = payload", "RG013", "header fields are read-only"),
        ("ip.temp.t = 1", "RG013", "another layer's temp variables cannot be written"),
        ("payload_len = 1", "RG013", "it is a built-in value"),
        ("CLOSED = 1", "RG013", "it is a PSM state"),
        ("v.header.fin = 1", "RG013", "virtual references are read-only"),
        ("temp.x = payload", "RG013", "cannot assign a byte slice to 'temp.x', a number (8 bits)"),
        ("temp.data = 1", "RG013", "cannot assign a number (1 bit) to 'temp.data', a byte slice"),
        ("temp.y = 1", "RG011", "unknown name 'temp.y'"),
        ("temp.x = v.header.fin", "RG014", "only allowed in conditions"),
        ("temp.x = header.ilh", "RG011", "unknown name 'header.ilh'"),
        ("set_sdu(1)", "RG012", "set_sdu() needs a byte slice, got a number (1 bit)"),
        ("set_sdu()", "RG017", "set_sdu() takes 1 argument, got 0"),
        ("assemble(payload)", "RG017", "assemble() takes 0 arguments, got 1"),
        ("asemble()", "RG017", "unknown statement 'asemble()'"),
        ("len(payload)", "RG018", "len() computes a value; as a statement it does nothing"),
    ],
)
def test_statement_errors(text: str, code: str, message: str) -> None:
    d = only(stmt_diags(text), code)
    assert message in d.message
    assert d.severity == "error"


def test_statement_warnings() -> None:
    d = only(stmt_diags("temp.x = 300"), "RG015")
    assert d.severity == "warning" and "truncated to 44" in d.message
    assert (d.start, d.end) == (9, 12)
    d = only(stmt_diags("perm.dcid = header.saddr"), "RG013")
    assert d.severity == "warning" and "holds 8 bytes but the value has 4" in d.message


def test_statement_not_allowed_here() -> None:
    d = only(stmt_diags("assemble()", frozenset({"set_sdu"})), "RG018")
    assert d.message == "assemble() is not allowed here"
    assert d.hint == "allowed here: set_sdu()"
    d = only(stmt_diags("assemble()", frozenset()), "RG018")
    assert d.hint == "no calls are allowed here"
    assert only(stmt_diags("asemble()"), "RG017").hint == "did you mean 'assemble()'?"


def test_lead_defined_statement_calls_are_accepted() -> None:
    assert stmt_diags("flush(header.seq)", STMT_CALLS | {"flush"}) == []
    assert codes(stmt_diags("flush(header.sq)", STMT_CALLS | {"flush"})) == ["RG011"]


# ---------------------------------------------------------------------------------------
# Property tests

TOKENS = [
    "a", "b", "header.x", "v.temp.y", "ip.header.saddr", "payload", "len", "has", "min", "true",
    "0", "1", "42", "0x1f", "0b10", "0x", "07", "99999999999999999999999", "(", ")", "[", "]",
    ":", ",", ".", "=", "==", "!=", "<", "<=", ">", ">=", "<<", ">>", "&", "&&", "|", "||", "^",
    "+", "-", "*", "/", "%", "!", "~", "and", "or", "not", "?", "'", "#", "+=", "é", " ",
]  # fmt: skip

token_soup = st.lists(st.sampled_from(TOKENS), max_size=25)
soups = st.one_of(token_soup.map(" ".join), token_soup.map("".join))


def _parse_any(text: str, stmt: bool) -> None:
    try:
        e = parse_stmt(text) if stmt else parse_expr(text)
    except ExprSyntaxError as err:
        assert 0 <= err.offset <= len(text)
        assert err.message
        assert err.code in ("RG010", "RG015")
        return
    # Whatever parses prints back to an equal tree.
    assert (parse_stmt if stmt else parse_expr)(unparse(e)) == e
    # ... and the checker never crashes on it.
    if stmt:
        assert isinstance(e, Assign | CallStmt)
        check_stmt(e, S, allowed_calls=STMT_CALLS)
    else:
        check_expr(e, S, allow_virtual=False, want="bool")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_random_text_only_raises_syntax_errors(text: str) -> None:
    _parse_any(text, stmt=False)
    _parse_any(text, stmt=True)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(soups)
def test_random_token_soup_only_raises_syntax_errors(text: str) -> None:
    _parse_any(text, stmt=False)
    _parse_any(text, stmt=True)
    _parse_any("temp.x = " + text, stmt=True)


IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True).filter(
    lambda s: s not in ("true", "false")
)
names = st.lists(IDENT, min_size=1, max_size=3).map(lambda p: Name(tuple(p)))
leaves = st.one_of(
    st.integers(0, U64_MAX).map(Num),
    st.booleans().map(Bool),
    names,
    st.binary(max_size=6).map(Str),  # string literals: any bytes, escaped by unparse
)


def _extend(sub: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(Unary, st.sampled_from(UNARY_OPS), sub),
        st.builds(Binary, st.sampled_from(sorted(BINARY_OPS)), sub, sub),
        st.builds(Call, IDENT, st.lists(sub, max_size=3).map(tuple)),
        st.builds(Slice, sub, st.none() | sub, st.none() | sub),
        st.builds(Index, sub, sub),
    )


exprs = st.recursive(leaves, _extend, max_leaves=30)


@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
@given(exprs)
def test_unparse_then_parse_is_identity(e: Expr) -> None:
    text = unparse(e)
    back = parse_expr(text)
    assert back == e, text
    # Positions of the re-parse cover the printed text.
    assert (back.start, back.end) == (0, len(text))
    # The checker copes with anything the grammar allows.
    check_expr(e, S, allow_virtual=True)
    is_const(e)
    free_names(e)


@settings(max_examples=300)
@given(exprs)
def test_is_const_matches_folding_of_literals(e: Expr) -> None:
    v = is_const(e)
    if v is not None:
        assert 0 <= v <= U64_MAX
        # Every leaf of a constant expression is a literal (or min/max of literals).
        assert all(not isinstance(n, Name) for n in free_names(e))


@given(st.integers(0, U64_MAX), st.sampled_from(["{}", "{:#x}", "{:#b}"]))
def test_number_formats(v: int, fmt: str) -> None:
    assert parse_expr(fmt.format(v)) == Num(v)


# Numeric expressions over names of known widths: the inferred width and trailing_zeros
# must be sound for every assignment of values (they back RG016 and bits: lengths).
WIDTHS = {"a": 4, "b": 8, "c": 32, "d": 64}
NUM_SCOPE = DictScope({(n,): Resolved(NumT(w), "temp") for n, w in WIDTHS.items()})
num_leaves = st.one_of(
    st.integers(0, U64_MAX).map(Num),
    st.integers(0, 70).map(Num),
    st.sampled_from(sorted(WIDTHS)).map(lambda n: Name((n,))),
)


def _num_extend(sub: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(Unary, st.sampled_from(UNARY_OPS), sub),
        st.builds(Binary, st.sampled_from(sorted(BINARY_OPS)), sub, sub),
        st.builds(Call, st.sampled_from(["min", "max"]), st.tuples(sub, sub)),
    )


num_exprs = st.recursive(num_leaves, _num_extend, max_leaves=12)


def evaluate(e: Expr, env: dict[str, int]) -> int:
    if isinstance(e, Name):
        return env[e.parts[0]]
    if isinstance(e, Unary):
        return is_const(Unary(e.op, Num(evaluate(e.operand, env)))) or 0
    if isinstance(e, Binary):
        left, right = Num(evaluate(e.left, env)), Num(evaluate(e.right, env))
        v = is_const(Binary(e.op, left, right))
        assert v is not None
        return v
    if isinstance(e, Call):
        x, y = (evaluate(a, env) for a in e.args)
        return min(x, y) if e.func == "min" else max(x, y)
    v = is_const(e)
    assert v is not None
    return v


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_exprs, st.fixed_dictionaries({n: st.integers(0, (1 << w) - 1) for n, w in WIDTHS.items()})
)
def test_inferred_width_and_trailing_zeros_are_sound(e: Expr, env: dict[str, int]) -> None:
    t, _ = check_expr(e, NUM_SCOPE, allow_virtual=False)
    v = evaluate(e, env)
    assert isinstance(t, NumT)
    assert v < (1 << t.width), (unparse(e), env, v, t)
    tz = trailing_zeros(e)
    assert v % (1 << tz) == 0, (unparse(e), env, v, tz)
