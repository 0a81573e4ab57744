"""C translation of expressions and statements (rubikgen.backend.cexpr), checked by running it.

Each compiled test builds ONE C translation unit holding many cases, compiles it once with
-std=c11 -Wall -Wextra -Werror and ASan + UBSan (no recovery), runs it and compares every
result with a Python reference evaluator written from docs/spec-language.md section 4; the
same unit must also compile warning-free at -O2.  Skipped only when no C compiler exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support import REPO_ROOT

from rubikgen.backend.cexpr import CExpr, CRef, cond_to_c, stmt_to_c, to_c
from rubikgen.expr import (
    Assign,
    Binary,
    Bool,
    BytesT,
    Call,
    CallStmt,
    Expr,
    Index,
    Name,
    Num,
    NumT,
    Slice,
    Stmt,
    Type,
    Unary,
    parse_expr,
    parse_stmt,
    resolve_expr,
    resolve_stmt,
    unparse,
)
from rubikgen.expr.types import BOOL, Resolved

M64 = (1 << 64) - 1
RUNTIME_INCLUDE = REPO_ROOT / "runtime-c" / "include"
CFLAGS = [
    "-std=c11",
    "-O1",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    f"-I{RUNTIME_INCLUDE}",
]
CFLAGS_O2 = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_INCLUDE}"]


def find_cc() -> str | None:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return cand
    return None


CC = find_cc()
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler found")

# ---------------------------------------------------------------------------------------
# The variables every case can read.  temp.k is "counted": its C text calls hit(), which
# counts evaluations, so the tests can see which operands C evaluated.

Value = int | bytes
Values = dict[str, Value]


@dataclass(frozen=True)
class Var:
    name: str
    type: Type
    member: str  # of the C `struct vars` (PRELUDE)


NUM_VARS = [
    Var("header.a", NumT(8), "a"),
    Var("header.b", NumT(16), "b"),
    Var("temp.c", NumT(32), "c"),
    Var("perm.d", NumT(64), "d"),
    Var("header.f", NumT(1), "f"),
    Var("temp.k", NumT(16), "k"),
]
BYTES_VARS = [
    Var("payload", BytesT(None), "p"),
    Var("header.q", BytesT(4), "q"),
]
LAYOUTS = ["opt", "ext"]
COUNTED = "temp.k"
VARS = {v.name: v for v in NUM_VARS + BYTES_VARS}


@dataclass(frozen=True)
class Target:
    name: str
    type: Type
    member: str  # of the C `struct out` (PRELUDE)
    ctype: str | None = None


TARGETS = {
    t.name: t
    for t in [
        Target("temp.t1", NumT(1), "t1", "uint8_t"),
        Target("temp.t8", NumT(8), "t8", "uint8_t"),
        Target("temp.t13", NumT(13), "t13", "uint16_t"),
        Target("temp.t16", NumT(16), "t16", "uint16_t"),
        Target("temp.t32", NumT(32), "t32", None),  # no cast: implicit conversion
        Target("temp.t64", NumT(64), "t64", "uint64_t"),
        Target("temp.f0", BytesT(0), "f0"),
        Target("temp.f3", BytesT(3), "f3"),
        Target("temp.f8", BytesT(8), "f8"),
        Target("temp.view", BytesT(None), "view"),
    ]
}


class HarnessEnv:
    """The CEnv of the generated test program: reads `v->...`, writes `o....`."""

    def ref(self, name: Name) -> CRef:
        var = VARS[name.dotted]
        text = f"v->{var.member}"
        return CRef(f"hit({text})" if var.name == COUNTED else text, var.type)

    def target(self, name: Name) -> CRef:
        t = TARGETS[name.dotted]
        return CRef(f"o.{t.member}", t.type, t.ctype)

    def has(self, layout: str) -> str:
        return f"v->has_{layout}"

    def assemble(self) -> str:
        return "o.assembled = 1;"

    def set_sdu(self, value: CExpr) -> str:
        return f"o.sdu = {value.text};"


ENV = HarnessEnv()


class HarnessScope:
    """What sema binds in the harness (expr.check.Scope): the names of VARS and TARGETS and
    the LAYOUTS. The back-end renders only trees resolved against a scope."""

    def resolve(self, parts: tuple[str, ...]) -> Resolved | None:
        dotted = ".".join(parts)
        if len(parts) == 2 and parts[0] == "layout":
            return Resolved(BOOL, "layout") if parts[1] in LAYOUTS else None
        if dotted in TARGETS:
            return Resolved(TARGETS[dotted].type, "temp", assignable=True)
        if dotted in VARS:
            return Resolved(VARS[dotted].type, "field")
        return None

    def candidates(self, parts: tuple[str, ...]) -> list[str]:
        return []


SCOPE = HarnessScope()
# Errors after which sema would stop: unknown names, type errors, bad calls (a literal
# divisor 0, RG015, still translates soundly).
FATAL = {"RG011", "RG012", "RG017"}


def resolved(e: Expr) -> Expr:
    """The expression as sema hands it to the back-end: every node typed."""
    r, diags = resolve_expr(e, SCOPE, allow_virtual=False)
    assert not [d for d in diags if d.code in FATAL], diags
    return r


def resolved_stmt(s: Stmt) -> Stmt:
    r, _ = resolve_stmt(s, SCOPE, allowed_calls=frozenset({"assemble", "set_sdu"}))
    return r


# ---------------------------------------------------------------------------------------
# Reference evaluator (docs/spec-language.md 4.2-4.5), independent of the checker's folding.


def _clamp(s: bytes, lo: int, hi: int) -> bytes:
    lo, hi = min(lo, len(s)), min(hi, len(s))
    return s[lo:hi] if hi >= lo else b""


def varint(s: bytes) -> tuple[int, int]:
    """QUIC varint (RFC 9000 section 16): (value, encoded length), (0, 0) when short."""
    if not s:
        return 0, 0
    n = 1 << (s[0] >> 6)
    if len(s) < n:
        return 0, 0
    v = s[0] & 0x3F
    for x in s[1:n]:
        v = v << 8 | x
    return v, n


_ARITH: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: (a + b) & M64,
    "-": lambda a, b: (a - b) & M64,
    "*": lambda a, b: (a * b) & M64,
    "/": lambda a, b: a // b if b else 0,
    "%": lambda a, b: a % b if b else 0,
    "<<": lambda a, b: (a << b) & M64 if b < 64 else 0,
    ">>": lambda a, b: a >> b if b < 64 else 0,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
}


class Evaluator:
    def __init__(self, values: Values) -> None:
        self.values = values
        self.hits = 0  # evaluations of COUNTED, with short-circuit

    def num(self, e: Expr) -> int:
        v = self.eval(e)
        assert isinstance(v, int), unparse(e)
        return v

    def bytes(self, e: Expr) -> bytes:
        v = self.eval(e)
        assert isinstance(v, bytes), unparse(e)
        return v

    def eval(self, e: Expr) -> Value:
        match e:
            case Num(value=v):
                return v
            case Bool(value=v):
                return int(v)
            case Name():
                self.hits += e.dotted == COUNTED
                return self.values[e.dotted]
            case Unary(op=op, operand=o):
                x = self.num(o)
                return int(x == 0) if op == "!" else (~x if op == "~" else -x) & M64
            case Binary():
                return self.binary(e)
            case Call():
                return self.call(e)
            case Slice(value=s, lo=lo, hi=hi):
                data = self.bytes(s)
                a = 0 if lo is None else self.num(lo)
                b = M64 if hi is None else self.num(hi)
                return _clamp(data, a, b)
            case Index(value=s, index=i):
                data, k = self.bytes(s), self.num(i)
                return data[k] if k < len(data) else 0
        raise TypeError(e)

    def binary(self, e: Binary) -> int:
        if e.op == "&&":
            return int(self.num(e.left) != 0 and self.num(e.right) != 0)
        if e.op == "||":
            return int(self.num(e.left) != 0 or self.num(e.right) != 0)
        a, b = self.eval(e.left), self.eval(e.right)
        if e.op in ("==", "!="):
            return int((a == b) == (e.op == "=="))
        assert isinstance(a, int) and isinstance(b, int)
        return _ARITH[e.op](a, b)

    def call(self, c: Call) -> int:
        match c.func, c.args:
            case "has", (Name(parts=(layout,)),):
                return int(self.values[f"has:{layout}"])
            case "len", (s,):
                return len(self.bytes(s))
            case "varint", (s,):
                return varint(self.bytes(s))[0]
            case "varint_len", (s,):
                return varint(self.bytes(s))[1]
            case "min", (a, b):
                return min(self.num(a), self.num(b))
            case "max", (a, b):
                return max(self.num(a), self.num(b))
        raise TypeError(c)


def evaluate(e: Expr, values: Values) -> tuple[Value, int]:
    """The value of e and how often the counted variable was read."""
    ev = Evaluator(values)
    return ev.eval(e), ev.hits


def render(v: Value) -> str:
    """How the C program prints a value: decimal, or LEN:HEX for bytes."""
    return str(v) if isinstance(v, int) else f"{len(v)}:{v.hex()}"


def expected_target(s: Stmt, values: Values) -> str:
    """The stored result of a statement (spec 2.6 and 4.5: low bits; copy and zero-pad)."""
    if isinstance(s, CallStmt):
        return "1" if s.func == "assemble" else render(Evaluator(values).bytes(s.args[0]))
    t = TARGETS[s.target.dotted].type
    v = Evaluator(values).eval(s.value)
    if isinstance(t, NumT):
        assert isinstance(v, int)
        return str(v & ((1 << t.width) - 1))
    assert isinstance(v, bytes)
    return render(v if t.size is None else v[: t.size].ljust(t.size, b"\0"))


# ---------------------------------------------------------------------------------------
# The C harness


@dataclass
class Case:
    expr: Expr | None
    stmt: Stmt | None
    vectors: list[Values]
    c_expr: CExpr | None = field(default=None, init=False)
    c_stmt: str | None = field(default=None, init=False)

    def translate(self) -> Case:
        if self.expr is not None:
            self.c_expr = to_c(resolved(self.expr), ENV)
        if self.stmt is not None:
            self.c_stmt = stmt_to_c(resolved_stmt(self.stmt), ENV)
        return self

    def describe(self) -> str:
        parts = [unparse(x) for x in (self.expr, self.stmt) if x is not None]
        return " ; ".join(parts)


PRELUDE = r"""
#include <inttypes.h>
#include <stdio.h>
#include "rg/rg_pkt.h"

/* librgrt.a's definition; this program links no library. */
const uint8_t rg_empty_byte[1] = {0};

struct vars {
    uint8_t a; uint16_t b; uint32_t c; uint64_t d; uint8_t f; uint16_t k;
    int has_opt, has_ext;
    rg_bytes p, q;
};
struct out {
    uint64_t n; rg_bytes s;
    uint8_t t1, t8; uint16_t t13, t16; uint32_t t32; uint64_t t64;
    uint8_t f0[1], f3[3], f8[8];
    rg_bytes view, sdu; int assembled;
};

static unsigned long hits;
static uint64_t hit(uint64_t x)
{
    hits++;
    return x;
}
static void put_bytes(rg_bytes s)
{
    printf("%zu:", s.len);
    for (size_t i = 0; i < s.len; i++)
        printf("%02x", s.ptr[i]);
}
static void put_num(uint64_t n)
{
    printf("%" PRIu64, n);
}
"""


def _c_array(name: str, data: Value, decls: list[str]) -> str:
    """An exact-size global (so ASan sees reads past it) and the rg_bytes initializer."""
    assert isinstance(data, bytes)
    if not data:
        return "{rg_empty_byte, 0}"
    decls.append(f"static const uint8_t {name}[{len(data)}] = {{{', '.join(map(str, data))}}};")
    return f"{{{name}, {len(data)}}}"


def _c_vector(values: Values, tag: str, decls: list[str]) -> str:
    inits = [f".{v.member} = {values[v.name]}u" for v in NUM_VARS]
    inits += [f".has_{lay} = {int(values[f'has:{lay}'])}" for lay in LAYOUTS]
    inits += [
        f".{v.member} = {_c_array(f'{tag}_{v.member}', values[v.name], decls)}" for v in BYTES_VARS
    ]
    return "{" + ", ".join(inits) + "}"


def _c_target(s: Stmt) -> str:
    if isinstance(s, CallStmt):
        return "put_bytes(o.sdu);" if s.func == "set_sdu" else "put_num((uint64_t)o.assembled);"
    t = TARGETS[s.target.dotted]
    if isinstance(t.type, NumT):
        return f"put_num((uint64_t)o.{t.member});"
    if t.type.size is None:
        return f"put_bytes(o.{t.member});"
    return f"put_bytes(rg_bytes_make(o.{t.member}, {t.type.size}));"


def _c_case(i: int, case: Case, decls: list[str]) -> str:
    # External linkage: the out-of-line copy sees unknown inputs, as generated code does,
    # so the -O2 build cannot fold the constant test vectors into it.
    proto = f"void case_{i}(const struct vars *v)"
    lines = [f"{proto};", proto, "{", "    struct out o;"]
    # Garbage first, so that a missing zero-padding or truncation shows.
    lines += ["    memset(&o, 0xaa, sizeof o);", "    (void)v;", "    hits = 0;"]
    if case.c_expr is not None:
        member = "n" if isinstance(case.c_expr.type, NumT) else "s"
        lines.append(f"    o.{member} = {case.c_expr.text};")
    lines.append("    unsigned long h = hits;")
    if case.c_stmt is not None:
        lines.append(f"    {case.c_stmt}")
    if case.c_expr is None:
        lines.append('    fputs("-", stdout);')
    else:
        lines.append(
            "    put_num(o.n);" if isinstance(case.c_expr.type, NumT) else "    put_bytes(o.s);"
        )
    lines.append('    printf(" %lu ", h);')
    lines.append(
        f"    {_c_target(case.stmt)}" if case.stmt is not None else '    fputs("-", stdout);'
    )
    lines += ["    putchar('\\n');", "}"]
    vecs = ",\n    ".join(_c_vector(vv, f"d{i}_{j}", decls) for j, vv in enumerate(case.vectors))
    decls.append(f"static const struct vars V{i}[{len(case.vectors)}] = {{\n    {vecs}\n}};")
    return "\n".join(lines)


def c_program(cases: Sequence[Case]) -> str:
    decls: list[str] = []
    funcs = [_c_case(i, c, decls) for i, c in enumerate(cases)]
    calls = [
        f"    for (size_t j = 0; j < {len(c.vectors)}; j++) case_{i}(&V{i}[j]);"
        for i, c in enumerate(cases)
    ]
    main = ["int main(void)", "{", *calls, "    return 0;", "}"]
    return "\n\n".join([PRELUDE, *decls, *funcs, "\n".join(main)]) + "\n"


def run_cases(cases: Sequence[Case], workdir: Path) -> list[str]:
    """Compile all cases as one program, run it, return one output line per (case, vector)."""
    assert CC is not None
    src, exe = workdir / "cases.c", workdir / "cases"
    src.write_text(c_program(cases))
    # The sanitizer build runs; the -O2 build (as generated stacks are built) only has to
    # compile, because some warnings (-Warray-bounds, -Wstringop-*) need the optimizer.
    # Both at once: two cores.
    builds = [
        [CC, *CFLAGS, str(src), "-o", str(exe)],
        [CC, *CFLAGS_O2, "-c", str(src), "-o", str(workdir / "cases_o2.o")],
    ]
    procs = [subprocess.Popen(b, stderr=subprocess.PIPE, text=True) for b in builds]
    for b, proc in zip(builds, procs, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            pytest.fail(f"C compilation failed ({' '.join(b)}):\n{err[:4000]}")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    if run.returncode != 0:
        pytest.fail(f"C program failed ({src}, status {run.returncode}):\n{run.stderr[:4000]}")
    lines = run.stdout.splitlines()
    assert len(lines) == sum(len(c.vectors) for c in cases)
    return lines


def expected_line(case: Case, values: Values) -> tuple[str, int, str]:
    value, hits = "-", 0
    if case.expr is not None:
        v, hits = evaluate(case.expr, values)
        value = render(v)
    target = "-" if case.stmt is None else expected_target(case.stmt, values)
    return value, hits, target


def check_results(cases: Sequence[Case], lines: list[str], exact_hits: bool) -> list[str]:
    """Mismatches between the C program and the reference, as readable messages."""
    bad: list[str] = []
    it = iter(lines)
    for case in cases:
        for values in case.vectors:
            got_value, got_hits, got_target = next(it).split(" ")
            want_value, want_hits, want_target = expected_line(case, values)
            # C may skip operands whose value cannot matter (x << 64), never evaluate more.
            hits_ok = int(got_hits) == want_hits if exact_hits else int(got_hits) <= want_hits
            if (got_value, got_target) != (want_value, want_target) or not hits_ok:
                c_text = case.c_expr.text if case.c_expr else case.c_stmt
                bad.append(
                    f"{case.describe()}\n  values {values}\n  C: {c_text}\n"
                    f"  got {got_value} hits {got_hits} target {got_target}\n"
                    f"  want {want_value} hits {want_hits} target {want_target}"
                )
    return bad


# ---------------------------------------------------------------------------------------
# Random well-typed expressions (Hypothesis), all run by one C program

N_RANDOM_CASES = 300
TREE_DEPTH = 6
EDGES = [0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 65, 200, 255, 256, 0xFFFF, 2**32 - 1, 2**32, 2**63, M64]


def _bits(width: int) -> st.SearchStrategy[int]:
    top = (1 << width) - 1
    return st.one_of(st.sampled_from([x for x in EDGES if x <= top]), st.integers(0, top))


literals = st.one_of(st.sampled_from(EDGES), st.integers(0, 70), st.integers(0, M64))
small = st.integers(0, 14)


def _name(dotted: str) -> Name:
    return Name(tuple(dotted.split(".")))


num_leaves = st.one_of(
    literals.map(Num),
    st.booleans().map(Bool),
    st.sampled_from([_name(v.name) for v in NUM_VARS]),
    st.just(_name(COUNTED)),  # often, so that short-circuits are seen in the hit counts
    st.sampled_from(LAYOUTS).map(lambda lay: Call("has", (Name((lay,)),))),
)
UNARY = ["!", "~", "-"]
BINARY = ["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "&&", "||"]
BINARY += ["==", "!=", "<", "<=", ">", ">="]


@st.composite
def num_exprs(draw: st.DrawFn, depth: int) -> Expr:
    # No leaves near the root: a tree is then rarely a bare constant or name.
    kinds = ["leaf", "leaf"] if depth < TREE_DEPTH - 1 else []
    kind = draw(st.sampled_from([*kinds, "binary", "unary", "binary", "bytes", "minmax"]))
    if depth <= 0 or kind == "leaf":
        return draw(num_leaves)
    sub = num_exprs(depth - 1)
    if kind == "unary":
        return Unary(draw(st.sampled_from(UNARY)), draw(sub))
    if kind == "binary":
        op = draw(st.sampled_from(BINARY))
        right = draw(st.one_of(sub, small.map(Num)) if op in ("<<", ">>", "/", "%") else sub)
        return Binary(op, draw(sub), right)
    if kind == "minmax":
        return Call(draw(st.sampled_from(["min", "max"])), (draw(sub), draw(sub)))
    s = bytes_exprs(depth - 1)
    form = draw(st.sampled_from(["len", "varint", "varint_len", "index", "==", "!="]))
    if form == "index":
        return Index(draw(s), draw(st.one_of(small.map(Num), sub)))
    if form in ("==", "!="):
        return Binary(form, draw(s), draw(s))
    return Call(form, (draw(s),))


@st.composite
def bytes_exprs(draw: st.DrawFn, depth: int) -> Expr:
    if depth <= 0 or draw(st.booleans()):
        return draw(st.sampled_from([_name(v.name) for v in BYTES_VARS]))
    bound = st.one_of(st.none(), small.map(Num), num_exprs(depth - 1))
    return Slice(draw(bytes_exprs(depth - 1)), draw(bound), draw(bound))


@st.composite
def vectors(draw: st.DrawFn) -> Values:
    values: Values = {
        v.name: draw(_bits(v.type.width)) for v in NUM_VARS if isinstance(v.type, NumT)
    }
    values["payload"] = draw(st.binary(max_size=12))
    values["header.q"] = draw(st.binary(min_size=4, max_size=4))
    for lay in LAYOUTS:
        values[f"has:{lay}"] = draw(st.booleans())
    return values


@st.composite
def random_cases(draw: st.DrawFn) -> Case:
    is_num = draw(st.sampled_from([True, True, False]))
    e = draw(num_exprs(TREE_DEPTH) if is_num else bytes_exprs(TREE_DEPTH - 1))
    targets = [t for t in TARGETS.values() if isinstance(t.type, NumT) == is_num]
    target = draw(st.sampled_from(targets))
    return Case(e, Assign(_name(target.name), e), draw(st.lists(vectors(), min_size=3, max_size=3)))


@needs_cc
def test_random_expressions_match_the_reference(tmp_path: Path) -> None:
    cases: list[Case] = []

    # Hypothesis generates the cases (translating inside the property, so a translator
    # crash shrinks); the C side runs once for all of them, because a sanitizer build per
    # example would cost a second each.
    @settings(
        max_examples=N_RANDOM_CASES,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(random_cases())
    def collect(case: Case) -> None:
        cases.append(case.translate())

    collect()
    bad = check_results(cases, run_cases(cases, tmp_path), exact_hits=False)
    assert not bad, f"{len(bad)} mismatches, first ones:\n" + "\n".join(bad[:5])


# ---------------------------------------------------------------------------------------
# Targeted cases, all run by one C program (module fixture); each test checks its group
# against hand-written results and, through check_results, the reference evaluator.

BASE: Values = {
    "header.a": 0,
    "header.b": 0,
    "temp.c": 0,
    "perm.d": 0,
    "header.f": 0,
    "temp.k": 5,
    "payload": bytes(range(10)),
    "header.q": b"\xde\xad\xbe\xef",
    "has:opt": True,
    "has:ext": False,
}

# group -> [(source, variable overrides, expected value, expected evaluations of temp.k)]
Row = tuple[str, dict[str, Value], Value, int | None]
V1 = bytes.fromhex("25")
V2 = bytes.fromhex("7bbd")
V4 = bytes.fromhex("9d7f3e7d")
V8 = bytes.fromhex("c2197c5eff14e88c")
TARGETED: dict[str, list[Row]] = {
    "division": [
        ("perm.d / temp.c", {"perm.d": 7, "temp.c": 2}, 3, None),
        ("perm.d / temp.c", {"perm.d": 7, "temp.c": 0}, 0, None),
        ("perm.d % temp.c", {"perm.d": 7, "temp.c": 4}, 3, None),
        ("perm.d % temp.c", {"perm.d": 7, "temp.c": 0}, 0, None),
        ("perm.d % (header.a - header.a)", {"perm.d": 7, "header.a": 9}, 0, None),
        ("perm.d / (header.a & 0)", {"perm.d": M64, "header.a": 9}, 0, None),
        # A literal divisor 0 is an error (RG015) for the validator, but still translates.
        ("perm.d / 0", {"perm.d": 7}, 0, None),
        ("perm.d % 0", {"perm.d": 7}, 0, None),
        ("perm.d / 1", {"perm.d": M64}, M64, None),
    ],
    "shift": [
        ("perm.d << 63", {"perm.d": 3}, 1 << 63, None),
        ("perm.d << 64", {"perm.d": 3}, 0, None),
        ("perm.d << 200", {"perm.d": 3}, 0, None),
        ("perm.d >> 63", {"perm.d": M64}, 1, None),
        ("perm.d >> 64", {"perm.d": M64}, 0, None),
        ("perm.d >> 200", {"perm.d": M64}, 0, None),
        ("perm.d << temp.c", {"perm.d": 3, "temp.c": 63}, 1 << 63, None),
        ("perm.d << temp.c", {"perm.d": 3, "temp.c": 64}, 0, None),
        ("perm.d << temp.c", {"perm.d": 3, "temp.c": 200}, 0, None),
        ("perm.d >> temp.c", {"perm.d": M64, "temp.c": 63}, 1, None),
        ("perm.d >> temp.c", {"perm.d": M64, "temp.c": 64}, 0, None),
        ("perm.d >> temp.c", {"perm.d": M64, "temp.c": 200}, 0, None),
        ("header.a << perm.d", {"header.a": 1, "perm.d": M64}, 0, None),
        ("header.a << perm.d", {"header.a": 1, "perm.d": 2**32 + 1}, 0, None),
        ("1 << 63", {}, 1 << 63, None),
        ("1 << 64", {}, 0, None),
    ],
    "wrap": [
        ("perm.d + 1", {"perm.d": M64}, 0, None),
        ("header.a - header.b", {"header.a": 1, "header.b": 2}, M64, None),
        ("perm.d * perm.d", {"perm.d": 2**32}, 0, None),
        ("perm.d * 3", {"perm.d": 2**63 + 1}, (3 * (2**63 + 1)) & M64, None),
        # uint16_t * uint16_t would overflow a promoted int (UB): zero-extended first.
        ("header.b * header.b", {"header.b": 0xFFFF}, 0xFFFF * 0xFFFF, None),
        ("temp.c * temp.c", {"temp.c": 2**32 - 1}, ((2**32 - 1) ** 2) & M64, None),
        ("header.a << 60", {"header.a": 0xFF}, (0xFF << 60) & M64, None),
        ("-header.a", {"header.a": 1}, M64, None),
        ("-perm.d", {"perm.d": 0}, 0, None),
        ("-perm.d", {"perm.d": 2**63}, 2**63, None),
        ("~header.a", {"header.a": 0}, M64, None),
        ("~header.f", {"header.f": 1}, M64 - 1, None),
        ("0 - 1", {}, M64, None),
        ("0xffffffffffffffff + 0xffffffffffffffff", {}, M64 - 1, None),
    ],
    "compare": [
        ("header.a - header.b < 5", {"header.a": 1, "header.b": 2}, 0, None),
        ("perm.d > 0", {"perm.d": 2**63}, 1, None),
        ("perm.d >= 0", {"perm.d": 0}, 1, None),  # -Wtype-limits bait
        ("header.a < 256", {"header.a": 255}, 1, None),
        ("header.f == 2", {"header.f": 1}, 0, None),  # 1-bit field vs 2
        ("perm.d == perm.d", {"perm.d": 5}, 1, None),  # -Wtautological-compare bait
        ("header.a & 1 == 2", {"header.a": 3}, 0, None),  # bitwise comparison bait
        ("(header.a | 1) == 0", {"header.a": 0}, 0, None),
        ("!(header.a << 1)", {"header.a": 0x80}, 0, None),  # -Wint-in-bool-context bait
        ("header.a * header.b && 1", {"header.a": 2, "header.b": 3}, 1, None),
        ("~(header.a < 3)", {"header.a": 0}, M64 - 1, None),  # -Wbool-operation bait
        ("~has(opt)", {}, M64 - 1, None),
        ("header.b && perm.d", {"header.b": 2, "perm.d": 4}, 1, None),
        ("!perm.d", {"perm.d": 2**63}, 0, None),
        ("min(perm.d, header.a)", {"perm.d": M64, "header.a": 3}, 3, None),
        ("max(perm.d, header.a)", {"perm.d": M64, "header.a": 3}, M64, None),
        ("has(opt) + has(ext) * 2", {"has:opt": True, "has:ext": True}, 3, None),
        ("has(opt) + has(ext) * 2", {"has:opt": False, "has:ext": True}, 2, None),
    ],
    "slice": [
        ("payload[2:5]", {}, bytes([2, 3, 4]), None),
        ("payload[8:100]", {}, bytes([8, 9]), None),
        ("payload[100:200]", {}, b"", None),
        ("payload[7:3]", {}, b"", None),
        ("payload[5:5]", {}, b"", None),
        ("payload[:4]", {}, bytes(range(4)), None),
        ("payload[:40]", {}, bytes(range(10)), None),
        ("payload[4:]", {}, bytes(range(4, 10)), None),
        ("payload[40:]", {}, b"", None),
        ("payload[:]", {}, bytes(range(10)), None),
        ("payload[0xffffffffffffffff:0xffffffffffffffff]", {}, b"", None),
        ("payload[perm.d:]", {"perm.d": M64}, b"", None),
        ("payload[temp.c:perm.d]", {"temp.c": 3, "perm.d": 2**32 + 5}, bytes(range(3, 10)), None),
        ("payload[2:][1:3]", {}, bytes([3, 4]), None),
        ("payload[3:8][10:]", {}, b"", None),
        ("payload[3:8][:2]", {}, bytes([3, 4]), None),
        ("payload[1:3]", {"payload": b""}, b"", None),
        ("payload[1:3]", {"payload": b"\x07"}, b"", None),
        ("payload[0:3]", {"payload": b"\x07"}, b"\x07", None),
        ("header.q[1:]", {}, b"\xad\xbe\xef", None),
        ("header.q[2:9]", {}, b"\xbe\xef", None),
        ("payload[9]", {}, 9, None),
        ("payload[10]", {}, 0, None),
        ("payload[0xffffffffffffffff]", {}, 0, None),
        # 2^63 is offset -2^63 to gcc: -Warray-bounds at -O2 unless rg_index excludes it
        ("payload[0x8000000000000000]", {}, 0, None),
        ("header.q[0x8000000000000000]", {}, 0, None),
        ("header.q[1:][0x8000000000000000]", {}, 0, None),
        ("payload[0]", {"payload": b""}, 0, None),
        ("header.q[3]", {}, 0xEF, None),
        ("header.q[4]", {}, 0, None),
        ("payload[3:9][5]", {}, 8, None),
        ("payload[3:9][6]", {}, 0, None),
        ("len(payload[7:3])", {}, 0, None),
        ("len(payload[3:])", {}, 7, None),
        ("len(payload)", {"payload": b""}, 0, None),
        ("payload[0:2] == payload[5:7]", {"payload": b"ab\x00\x00\x00ab"}, 1, None),
        ("payload[0:2] == payload[5:8]", {"payload": b"ab\x00\x00\x00ab"}, 1, None),  # clamps
        ("payload[0:2] != payload[5:9]", {"payload": b"ab\x00\x00\x00abc"}, 1, None),
        ("payload[0:0] == header.q[4:]", {}, 1, None),
        ("header.q == header.q[0:4]", {}, 1, None),
        ("header.q != payload[0:4]", {"payload": b"\xde\xad\xbe\xef\x00"}, 0, None),
    ],
    "varint": [
        ("varint(payload)", {"payload": V1}, 37, None),
        ("varint_len(payload)", {"payload": V1}, 1, None),
        ("varint(payload)", {"payload": V2}, 15293, None),
        ("varint_len(payload)", {"payload": V2}, 2, None),
        ("varint(payload)", {"payload": bytes.fromhex("4025")}, 37, None),
        ("varint(payload)", {"payload": V4}, 494878333, None),
        ("varint_len(payload)", {"payload": V4}, 4, None),
        ("varint(payload)", {"payload": V8}, 151288809941952652, None),
        ("varint_len(payload)", {"payload": V8}, 8, None),
        ("varint(payload)", {"payload": V8 + b"\xff"}, 151288809941952652, None),
        ("varint(payload)", {"payload": b"\x25\xff"}, 37, None),
        ("varint(payload)", {"payload": b"\xff" * 8}, 2**62 - 1, None),
        # truncated and empty
        ("varint(payload)", {"payload": V8[:7]}, 0, None),
        ("varint_len(payload)", {"payload": V8[:7]}, 0, None),
        ("varint(payload)", {"payload": V4[:3]}, 0, None),
        ("varint_len(payload)", {"payload": V4[:3]}, 0, None),
        ("varint(payload)", {"payload": V2[:1]}, 0, None),
        ("varint_len(payload)", {"payload": V2[:1]}, 0, None),
        ("varint(payload)", {"payload": b""}, 0, None),
        ("varint_len(payload)", {"payload": b""}, 0, None),
        # on a slice: the length field then the value, as in docs 4.4
        ("varint(payload[1:])", {"payload": b"\x00" + V4}, 494878333, None),
        ("varint(payload[1:3])", {"payload": b"\x00" + V4}, 0, None),
        ("varint(payload[varint_len(payload):])", {"payload": V2 + V1}, 37, None),
    ],
    "short_circuit": [
        ("header.a && temp.k", {"header.a": 0}, 0, 0),
        ("header.a && temp.k", {"header.a": 1}, 1, 1),
        ("header.a && temp.k", {"header.a": 1, "temp.k": 0}, 0, 1),
        ("header.a || temp.k", {"header.a": 1}, 1, 0),
        ("header.a || temp.k", {"header.a": 0}, 1, 1),
        ("header.a || temp.k", {"header.a": 0, "temp.k": 0}, 0, 1),
        ("header.a && temp.k == 5 || temp.k", {"header.a": 0}, 1, 1),
        ("header.a && (temp.k || temp.k)", {"header.a": 0}, 0, 0),
        ("!header.a && temp.k + temp.k", {"header.a": 1}, 0, 0),
        ("header.a && payload[temp.k] == 5", {"header.a": 0}, 0, 0),
        ("false && temp.k", {}, 0, 0),
        ("true || temp.k", {}, 1, 0),
        # control: the bitwise operators evaluate both sides
        ("header.a & temp.k", {"header.a": 0}, 0, 1),
        ("temp.k + temp.k", {}, 10, 2),
    ],
}

# Statements: (source, overrides, stored result as printed by the harness)
STMTS: list[tuple[str, dict[str, Value], str]] = [
    ("temp.t8 = header.b", {"header.b": 0x1234}, "52"),
    ("temp.t13 = perm.d", {"perm.d": M64}, str(0x1FFF)),
    ("temp.t1 = header.a", {"header.a": 2}, "0"),
    ("temp.t1 = header.a", {"header.a": 3}, "1"),
    ("temp.t16 = perm.d - 1", {"perm.d": 0}, "65535"),
    ("temp.t32 = perm.d", {"perm.d": 2**40 + 7}, "7"),
    ("temp.t64 = perm.d", {"perm.d": M64}, str(M64)),
    ("temp.t8 = 300", {}, "44"),
    ("temp.t8 = 0xffffffffffffffff", {}, "255"),
    ("temp.f3 = payload", {}, "3:000102"),
    ("temp.f3 = payload", {"payload": b"\x07"}, "3:070000"),
    ("temp.f3 = payload", {"payload": b""}, "3:000000"),
    ("temp.f3 = payload[8:]", {}, "3:080900"),
    ("temp.f8 = header.q", {}, "8:deadbeef00000000"),
    ("temp.f0 = payload", {}, "0:"),
    ("temp.view = payload[2:4]", {}, "2:0203"),
    ("temp.view = payload[20:]", {}, "0:"),
    ("set_sdu(payload[7:])", {}, "3:070809"),
    ("assemble()", {}, "1"),
]


def _targeted_cases() -> dict[str, list[Case]]:
    groups: dict[str, list[Case]] = {
        g: [Case(parse_expr(src), None, [{**BASE, **over}]) for src, over, _, _ in rows]
        for g, rows in TARGETED.items()
    }
    groups["stmt"] = [Case(None, parse_stmt(src), [{**BASE, **over}]) for src, over, _ in STMTS]
    for cases in groups.values():
        for c in cases:
            c.translate()
    return groups


@pytest.fixture(scope="module")
def targeted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[Case], list[str]]]:
    """Cases and output lines per group; all groups compiled into one program."""
    groups = _targeted_cases()
    flat = [c for cases in groups.values() for c in cases]
    it = iter(run_cases(flat, tmp_path_factory.mktemp("targeted")))
    return {g: (cases, [next(it) for _ in cases]) for g, cases in groups.items()}


def _check_group(targeted: dict[str, tuple[list[Case], list[str]]], group: str) -> list[str]:
    """The group's output lines, after checking them against the reference evaluator."""
    cases, lines = targeted[group]
    bad = check_results(cases, lines, exact_hits=True)
    assert not bad, "C and the reference evaluator disagree:\n" + "\n".join(bad[:5])
    return lines


@needs_cc
@pytest.mark.parametrize("group", list(TARGETED))
def test_targeted(targeted: dict[str, tuple[list[Case], list[str]]], group: str) -> None:
    lines = _check_group(targeted, group)
    for (src, over, want, want_hits), line in zip(TARGETED[group], lines, strict=True):
        got_value, got_hits, _ = line.split(" ")
        assert got_value == render(want), f"{src} with {over}"
        if want_hits is not None:
            assert int(got_hits) == want_hits, f"{src} with {over}: evaluations of temp.k"


@needs_cc
def test_targeted_statements(targeted: dict[str, tuple[list[Case], list[str]]]) -> None:
    lines = _check_group(targeted, "stmt")
    for (src, over, want), line in zip(STMTS, lines, strict=True):
        assert line.split(" ")[2] == want, f"{src} with {over}"


# ---------------------------------------------------------------------------------------
# The translator's text and errors (no compiler needed)


def test_text_uses_guards_only_where_needed() -> None:
    assert to_c(resolved(parse_expr("perm.d / 4")), ENV).text == "(((uint64_t)v->d) / UINT64_C(4))"
    assert to_c(resolved(parse_expr("perm.d / temp.c")), ENV).text.startswith("rg_op_div(")
    assert to_c(resolved(parse_expr("perm.d << 64")), ENV).text == "UINT64_C(0)"
    assert to_c(resolved(parse_expr("1 + 2 * 3")), ENV).text == "UINT64_C(7)"
    assert to_c(resolved(parse_expr("0x10000")), ENV).text == "UINT64_C(0x10000)"


def test_types_are_the_checkers() -> None:
    assert to_c(resolved(parse_expr("header.a & 0xf")), ENV).type == NumT(4)
    assert to_c(resolved(parse_expr("header.a == 1")), ENV).type == NumT(1)
    assert to_c(resolved(parse_expr("varint_len(payload)")), ENV).type == NumT(4)
    assert to_c(resolved(parse_expr("header.q[1:3]")), ENV).type == BytesT(2)
    assert to_c(resolved(parse_expr("payload[temp.c:]")), ENV).type == BytesT(None)


def test_conditions() -> None:
    assert cond_to_c(resolved(parse_expr("header.a < 3 && has(opt)")), ENV) == (
        "(rg_op_lt(((uint64_t)v->a), UINT64_C(3)) && !!(v->has_opt))"
    )
    assert cond_to_c(resolved(parse_expr("header.a * 2")), ENV) == (
        "rg_op_truth((((uint64_t)v->a) * UINT64_C(2)))"
    )


@pytest.mark.parametrize(
    "src",
    [
        "payload + 1",
        "!payload",
        "payload && 1",
        "header.a[0]",
        "len(header.a)",
        "payload < payload",
    ],
)
def test_ill_typed_expressions_are_rejected(src: str) -> None:
    # sema reports them, so no resolved tree reaches the back-end; a bare parse (no types) is
    # refused rather than guessed at
    _, diags = resolve_expr(parse_expr(src), SCOPE, allow_virtual=False)
    assert [d for d in diags if d.code in FATAL]
    with pytest.raises(ValueError, match="not resolved"):
        to_c(parse_expr(src), ENV)
    with pytest.raises(ValueError, match="not resolved"):
        cond_to_c(parse_expr(src), ENV)


@pytest.mark.parametrize(
    ("src", "msg"),
    [
        ("temp.t8 = payload", "cannot assign"),
        ("temp.f3 = 1", "cannot assign"),
        ("set_sdu(1)", "byte slice"),
        ("frobnicate()", "cannot translate"),
    ],
)
def test_ill_typed_statements_are_rejected(src: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        stmt_to_c(resolved_stmt(parse_stmt(src)), ENV)


def test_statement_text() -> None:
    assert stmt_to_c(resolved_stmt(parse_stmt("temp.t13 = header.b")), ENV) == (
        "o.t13 = (uint16_t)(((uint64_t)v->b) & UINT64_C(8191));"
    )
    assert stmt_to_c(resolved_stmt(parse_stmt("temp.t32 = perm.d")), ENV) == (
        "o.t32 = (((uint64_t)v->d) & UINT64_C(0xffffffff));"
    )
    assert (
        stmt_to_c(resolved_stmt(parse_stmt("temp.f3 = payload")), ENV)
        == "rg_bytes_store(o.f3, 3, v->p);"
    )
    assert stmt_to_c(resolved_stmt(parse_stmt("assemble()")), ENV) == "o.assembled = 1;"
