"""Name resolution and type checking of expressions and statements.

The checker knows the language (operators, built-in functions, statements); what names
mean is asked of a :class:`Scope` the caller implements.  Diagnostics carry offsets into
the expression text (the ``start``/``end`` of AST nodes); the caller maps them to files.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Protocol

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
    Str,
    Unary,
    children,
    unparse,
)
from .fold import is_const, is_multiple_of, trailing_zeros, width_bound
from .types import (
    BOOL,
    U8,
    U64,
    BytesT,
    NumT,
    Resolved,
    Type,
    describe,
    is_bytes,
    is_num,
    max_value,
)

__all__ = [
    "EXPR_FUNCTIONS",
    "STATEMENT_CALLS",
    "ExprDiag",
    "Resolved",
    "Scope",
    "Want",
    "check_expr",
    "check_stmt",
    "free_names",
    "is_const",
    "is_multiple_of",
    "layout_refs",
    "resolve_expr",
    "resolve_stmt",
    "trailing_zeros",
]


# Built-in functions usable in expressions, with their parameter kinds.
EXPR_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "has": ("layout",),
    "len": ("bytes",),
    "varint": ("bytes",),
    "varint_len": ("bytes",),
    "name_len": ("bytes", "num"),
    "min": ("num", "num"),
    "max": ("num", "num"),
    "ready_upto": ("num",),
}
# Calls that are statements (no value); check_stmt accepts those in `allowed_calls`.
STATEMENT_CALLS: dict[str, tuple[str, ...]] = {
    "assemble": (),
    "set_sdu": ("bytes",),
}

Want = Literal["any", "num", "bool", "bytes"]


class Scope(Protocol):
    """The names visible to one expression.

    ``resolve(parts)`` is called with the parts of a dotted name (``('header', 'ihl')``,
    ``('ip', 'header', 'saddr')``, ``('v', 'header', 'fin')``, ``('CLOSED',)``) and returns
    None for an unknown name.  For ``has(NAME)`` the checker calls
    ``resolve(('layout', NAME))`` and expects a Resolved with kind 'layout' (any type).

    ``candidates(parts)`` lists the names valid in the position of ``parts[-1]`` given
    ``parts[:-1]``: ``candidates(('hdr',))`` lists every top-level name (namespaces such as
    'header', 'temp', parameter names, builtins, states), ``candidates(('header', 'ilh'))``
    lists the header field names, ``candidates(('layout', 'x'))`` lists layout names.  The
    checker also calls it with an empty last part (``('header', '')``) to ask what may
    follow a prefix.  Used for "did you mean" hints only.
    """

    def resolve(self, parts: tuple[str, ...]) -> Resolved | None: ...

    def candidates(self, parts: tuple[str, ...]) -> list[str]: ...


@dataclass(frozen=True)
class ExprDiag:
    code: str
    message: str
    start: int
    end: int
    hint: str | None = None
    severity: str = "error"  # 'error' | 'warning'


# ---------------------------------------------------------------------------------------
# Helpers usable without a scope


def _names(e: Expr | Stmt, out: list[Name], layouts: list[Name]) -> None:
    stack: list[Expr | Stmt] = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Name):
            out.append(x)
        elif isinstance(x, Call) and x.func == "has":
            layouts.extend(a for a in x.args if isinstance(a, Name))
            stack.extend(reversed([a for a in x.args if not isinstance(a, Name)]))
        else:
            stack.extend(reversed(children(x)))


def free_names(e: Expr | Stmt) -> list[Name]:
    """Every value reference in source order (for a statement, the target first).

    Layout names inside ``has(...)`` are not values and are left out (see layout_refs).
    """
    out: list[Name] = []
    _names(e, out, [])
    return out


def layout_refs(e: Expr | Stmt) -> list[Name]:
    """The layout names used in ``has(LAYOUT)`` calls, in source order."""
    out: list[Name] = []
    _names(e, [], out)
    return out


def _closest(word: str, cands: Iterable[str]) -> str | None:
    pool = sorted({c for c in cands if c})
    for c in pool:
        if c.lower() == word.lower():
            return c
    m = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    return m[0] if m else None


def _a(t: Type | None) -> str:
    return ("a " if t is not None else "an ") + describe(t)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# Hints for names people bring from other languages.
_FOREIGN_FUNCS = {
    "not": "use '!' for logical not",
    "and": "use '&&'",
    "or": "use '||'",
    "sizeof": "use len(s) for the length of a byte slice",
    "length": "use len(s)",
    "strlen": "use len(s)",
    "abs": "numbers are unsigned",
}


# ---------------------------------------------------------------------------------------
# The checker


class _Checker:
    def __init__(self, scope: Scope, allow_virtual: bool) -> None:
        self.scope = scope
        self.allow_virtual = allow_virtual
        self.diags: list[ExprDiag] = []
        # What checking found, by node identity, for annotate(): types and name bindings.
        self.types: dict[int, Type | None] = {}
        self.refs: dict[int, Resolved] = {}

    def diag(
        self,
        code: str,
        message: str,
        node: Expr | Stmt | tuple[int, int],
        hint: str | None = None,
        severity: str = "error",
    ) -> None:
        start, end = node if isinstance(node, tuple) else (node.start, node.end)
        self.diags.append(ExprDiag(code, message, start, end, hint, severity))

    # -- names ---------------------------------------------------------------------------

    def name(self, n: Name) -> Type | None:
        r = self.scope.resolve(n.parts)
        if r is None:
            self.unknown(n)
            return None
        self.refs[id(n)] = r
        if r.kind == "layout":
            self.diag(
                "RG012",
                f"'{n.dotted}' is a layout, not a value",
                n,
                f"use has({n.dotted}) to test whether it was parsed, or name one of its fields",
            )
            return None
        if r.virtual and not self.allow_virtual:
            plain = ".".join(n.parts[1:]) if n.parts[0] == "v" else None
            self.diag(
                "RG014",
                f"virtual reference '{n.dotted}' is only allowed in conditions (when, if)",
                n,
                f"write '{plain}' to use this packet's value" if plain else None,
            )
        return r.type

    def unknown(self, n: Name) -> None:
        parts = n.parts
        dotted = n.dotted
        for i, part in enumerate(parts):
            cands = self.scope.candidates(parts[: i + 1])
            if part in cands:
                continue
            if i == 0 and len(parts) == 1:
                cands = [*cands, "true", "false"]
            guess = _closest(part, cands)
            hint = self._other_namespace(parts)
            if hint is None and guess is not None:
                fixed = (*parts[:i], guess, *parts[i + 1 :])
                if i == len(parts) - 1 or self.scope.resolve(fixed) is not None:
                    hint = f"did you mean '{'.'.join(fixed)}'?"
            if len(parts) == 1:
                r = self.scope.resolve(("layout", part))
                if r is not None and r.kind == "layout":
                    hint = f"'{part}' is a layout; use has({part}) to test whether it was parsed"
            if i == 0 and part in ("and", "or", "not"):
                hint = _FOREIGN_FUNCS[part]
            if i == 0:
                msg = f"unknown name '{dotted}'"
            else:
                msg = f"unknown name '{dotted}': '{'.'.join(parts[:i])}' has no '{part}'"
            self.diag("RG011", msg, n, hint)
            return
        follow = [c for c in self.scope.candidates((*parts, "")) if c]
        if follow:
            self.diag(
                "RG011",
                f"'{dotted}' is not a value",
                n,
                f"name a member, e.g. '{dotted}.{sorted(follow)[0]}'",
            )
        else:
            self.diag("RG011", f"unknown name '{dotted}'", n)

    def _other_namespace(self, parts: tuple[str, ...]) -> str | None:
        """'header.fin_seq' when fin_seq is a perm variable; 'seq' for 'header.seq'."""
        spaces = ("header", "temp", "perm")
        if len(parts) == 1:
            alts: list[tuple[str, ...]] = [(ns, parts[0]) for ns in spaces]
        elif parts[-2] in spaces:
            alts = [(*parts[:-2], ns, parts[-1]) for ns in spaces if ns != parts[-2]]
        else:
            return None
        for alt in alts:
            if self.scope.resolve(alt) is not None:
                return f"did you mean '{'.'.join(alt)}'?"
        return None

    # -- expressions ---------------------------------------------------------------------

    def expr(self, e: Expr) -> Type | None:
        t = self._expr(e)
        self.types[id(e)] = t
        return t

    def _expr(self, e: Expr) -> Type | None:
        match e:
            case Num(value=v):
                return NumT(max(1, v.bit_length()))
            case Bool():
                return BOOL
            case Str(value=b):
                return BytesT(len(b))
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
                return self.index(e)
        raise TypeError(f"not an expression: {e!r}")  # pragma: no cover

    def unary(self, e: Unary) -> Type | None:
        t = self.expr(e.operand)
        if is_bytes(t):
            hint = "use len(s) == 0 to test for an empty slice" if e.op == "!" else None
            self.diag("RG012", f"'{e.op}' needs a number, got {_a(t)}", e.operand, hint)
        return BOOL if e.op == "!" else U64

    def binary(self, e: Binary) -> Type | None:
        op = e.op
        lt = self.expr(e.left)
        rt = self.expr(e.right)
        if op in ("&&", "||"):
            for side, t in ((e.left, lt), (e.right, rt)):
                if is_bytes(t):
                    self.diag(
                        "RG012",
                        f"'{op}' needs conditions (numbers), got {_a(t)}",
                        side,
                        "use len(s) > 0 to test for a non-empty slice",
                    )
            return BOOL
        if op in ("==", "!="):
            if is_bytes(lt) != is_bytes(rt) and lt is not None and rt is not None:
                self.diag(
                    "RG012",
                    f"cannot compare {_a(lt)} with {_a(rt)}",
                    e,
                    "compare a byte with s[i], a length with len(s), or two slices",
                )
            elif is_bytes(lt) and is_bytes(rt):
                if lt.size is not None and rt.size is not None and lt.size != rt.size:
                    always = "false" if op == "==" else "true"
                    self.diag(
                        "RG016",
                        f"slices of {_plural(lt.size, 'byte')} and {_plural(rt.size, 'byte')} "
                        f"never compare equal: this comparison is always {always}",
                        e,
                        None,
                        "warning",
                    )
            elif is_num(lt) and is_num(rt):
                self.range_check(e, lt, rt)
            return BOOL
        if op in ("<", "<=", ">", ">="):
            if is_bytes(lt) or is_bytes(rt):
                if is_bytes(lt) and is_bytes(rt):
                    msg = (
                        f"'{op}' cannot compare byte slices; slices compare only with '==' and '!='"
                    )
                    at: Expr = e
                else:
                    msg = f"'{op}' needs two numbers, got {_a(lt)} and {_a(rt)}"
                    at = e.left if is_bytes(lt) else e.right  # the operand that is wrong
                self.diag("RG012", msg, at, "compare lengths with len(s) or bytes with s[i]")
            elif is_num(lt) and is_num(rt):
                self.range_check(e, lt, rt)
            return BOOL
        # Arithmetic and bitwise operators.
        bad = [(side, t) for side, t in ((e.left, lt), (e.right, rt)) if is_bytes(t)]
        if bad:
            where: Expr = bad[0][0] if len(bad) == 1 else e
            self.diag(
                "RG012",
                f"'{op}' needs two numbers, got {_a(lt)} and {_a(rt)}",
                where,
                "use len(s) for a slice's length, s[i] for one byte, varint(s) for a QUIC varint",
            )
            return U64
        if op in ("/", "%") and is_const(e.right) == 0:
            what = "division" if op == "/" else "modulo"
            self.diag(
                "RG015",
                f"{what} by zero",
                e.right,
                f"'{op} 0' always gives 0 at run time; this is probably a mistake",
            )
        lw = lt.width if is_num(lt) else 64
        rw = rt.width if is_num(rt) else 64
        return NumT(min(64, width_bound(op, lw, rw, is_const(e.right))))

    def range_check(self, e: Binary, lt: NumT, rt: NumT) -> None:
        """RG016: a constant compared with a value that can never reach it."""
        lc, rc = is_const(e.left), is_const(e.right)
        if (lc is None) == (rc is None):
            return
        if rc is not None:
            other, t, c, op = e.left, lt, rc, e.op
        else:
            assert lc is not None
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
            other, t, c, op = e.right, rt, lc, flipped.get(e.op, e.op)
        top = max_value(t)
        if t.width >= 64 or c <= top:
            return
        # other <= top < c
        always = op in ("!=", "<", "<=")
        self.diag(
            "RG016",
            f"'{unparse(other)}' holds at most {top} ({_plural(t.width, 'bit')}), so it can never "
            f"be {c}: this comparison is always {str(always).lower()}",
            e,
            "check the constant or the field's width",
            "warning",
        )

    def call(self, c: Call) -> Type | None:
        f = c.func
        fs, fe = c.start, c.start + len(f)
        if f == "has":
            return self.has(c)
        if f in STATEMENT_CALLS:
            self.diag(
                "RG017",
                f"{f}() is a statement and has no value",
                (fs, fe),
                "write it as its own item of a 'prep' or 'do' list",
            )
            for a in c.args:
                self.expr(a)
            return None
        params = EXPR_FUNCTIONS.get(f)
        if params is None:
            guess = _closest(f, EXPR_FUNCTIONS)
            hint = _FOREIGN_FUNCS.get(f) or (f"did you mean '{guess}'?" if guess else None)
            if hint is None:
                hint = "functions are " + ", ".join(EXPR_FUNCTIONS)
            self.diag("RG017", f"unknown function '{f}'", (fs, fe), hint)
            for a in c.args:
                self.expr(a)
            return None
        if len(c.args) != len(params):
            self.diag(
                "RG017",
                f"{f}() takes {_plural(len(params), 'argument')}, got {len(c.args)}",
                c,
                f"write {f}({', '.join('s' if p == 'bytes' else 'n' for p in params)})",
            )
        types = [self.arg(f, a, p) for a, p in zip(c.args, params, strict=False)]
        for a in c.args[len(params) :]:
            self.expr(a)
        if f == "ready_upto":
            # asks the packet direction's sequence: only where the sequence exists and is filled
            if self.scope.resolve(("ready_upto",)) is None:
                self.diag(
                    "RG038",
                    "ready_upto() asks this packet's sequence, which is not available here",
                    (fs, fe),
                    "use it in a transition, event or handler of a protocol with a sequence",
                )
            return BOOL
        if f in ("min", "max"):
            widths = [t.width if is_num(t) else 64 for t in types] or [64]
            return NumT(min(widths) if f == "min" else max(widths))
        if f == "varint_len":
            return NumT(4)
        if f == "name_len":  # at most RG_NAME_MAX (255) bytes
            return NumT(8)
        return U64

    def arg(self, f: str, a: Expr, kind: str) -> Type | None:
        t = self.expr(a)
        if kind == "bytes" and is_num(t):
            self.diag("RG012", f"{f}() needs a byte slice, got {_a(t)}", a)
        elif kind == "num" and is_bytes(t):
            self.diag(
                "RG012", f"{f}() needs a number, got {_a(t)}", a, "use len(s) for a slice's length"
            )
        return t

    def has(self, c: Call) -> Type:
        if len(c.args) != 1:
            self.diag(
                "RG017",
                f"has() takes 1 argument (a layout name), got {len(c.args)}",
                c,
                "write has(LAYOUT)",
            )
            return BOOL
        a = c.args[0]
        if not isinstance(a, Name) or len(a.parts) != 1:
            self.diag(
                "RG017", "has() takes a layout name", a, "write has(LAYOUT), e.g. has(ip_opt)"
            )
            return BOOL
        layout = a.parts[0]
        r = self.scope.resolve(("layout", layout))
        if r is not None and r.kind == "layout":
            self.refs[id(a)] = r
            self.types[id(a)] = r.type
        if r is None or r.kind != "layout":
            guess = _closest(layout, self.scope.candidates(("layout", layout)))
            self.diag(
                "RG011",
                f"unknown layout '{layout}'",
                a,
                f"did you mean '{guess}'?" if guess else "has() takes the name of a layout",
            )
        return BOOL

    def bound(self, e: Expr | None, what: str) -> None:
        if e is None:
            return
        t = self.expr(e)
        if is_bytes(t):
            self.diag(
                "RG012", f"{what} must be a number, got {_a(t)}", e, "use len(s) for a length"
            )

    def slice(self, e: Slice) -> Type | None:
        vt = self.expr(e.value)
        self.bound(e.lo, "a slice bound")
        self.bound(e.hi, "a slice bound")
        if is_num(vt):
            self.diag(
                "RG012",
                f"cannot slice {_a(vt)}",
                e,
                "only byte slices can be sliced; use '>>' and '&' to extract bits of a number",
            )
            return None
        size = vt.size if is_bytes(vt) else None
        lo = 0 if e.lo is None else is_const(e.lo)
        hi = size if e.hi is None else is_const(e.hi)
        if size is not None:
            for b, k in ((e.lo, lo), (e.hi, hi)):
                if b is not None and k is not None and k > size:
                    self.diag(
                        "RG015",
                        f"'{unparse(e.value)}' has {_plural(size, 'byte')}; "
                        f"bound {k} is past its end (indices clamp)",
                        b,
                        None,
                        "warning",
                    )
        if lo is None or hi is None:
            return BytesT(None)
        if e.lo is not None and e.hi is not None and lo > hi:
            self.diag("RG015", f"the slice [{lo}:{hi}] is always empty", e, None, "warning")
        if size is not None:
            lo, hi = min(lo, size), min(hi, size)
        return BytesT(max(0, hi - lo))

    def index(self, e: Index) -> Type | None:
        vt = self.expr(e.value)
        self.bound(e.index, "an index")
        if is_num(vt):
            self.diag(
                "RG012",
                f"cannot index {_a(vt)}",
                e,
                "only byte slices can be indexed; use (x >> n) & 0xff to extract a byte",
            )
            return U8
        k = is_const(e.index)
        if is_bytes(vt) and vt.size is not None and k is not None and k >= vt.size:
            self.diag(
                "RG015",
                f"'{unparse(e.value)}' has {_plural(vt.size, 'byte')}; index {k} is past its end",
                e.index,
                None,
                "warning",
            )
        return U8

    def want(self, e: Expr, t: Type | None, want: str) -> None:
        if t is None or want == "any":
            return
        if want == "bool" and is_bytes(t):
            self.diag(
                "RG012",
                f"a condition must be a number (non-zero is true), got {_a(t)}",
                e,
                "use len(s) > 0 to test for a non-empty slice",
            )
        elif want == "num" and is_bytes(t):
            self.diag(
                "RG012", f"expected a number, got {_a(t)}", e, "use len(s) for a slice's length"
            )
        elif want == "bytes" and is_num(t):
            self.diag("RG012", f"expected a byte slice, got {_a(t)}", e, None)


def _sorted(diags: list[ExprDiag]) -> list[ExprDiag]:
    return sorted(diags, key=lambda d: (d.start, d.end))


def check_expr(
    e: Expr, scope: Scope, *, allow_virtual: bool, want: Want | str = "any"
) -> tuple[Type | None, list[ExprDiag]]:
    """Type-check an expression.

    Returns its type (None when an error makes it unknowable) and the diagnostics, sorted
    by position.  ``want``: 'num' (a number), 'bool' (a condition: any number),
    'bytes' (a byte slice) or 'any'.  ``allow_virtual``: whether ``v.`` references may
    appear (conditions of transitions, events and handlers).
    """
    if want not in ("any", "num", "bool", "bytes"):
        raise ValueError(f"want must be 'any', 'num', 'bool' or 'bytes', not {want!r}")
    c = _Checker(scope, allow_virtual)
    t = c.expr(e)
    c.want(e, t, want)
    return t, _sorted(c.diags)


def _annotate(c: _Checker, n: Any) -> Any:
    """A copy of the tree with every node's type and every name's binding from the check."""
    kw: dict[str, Any] = {}
    for f in fields(n):
        v = getattr(n, f.name)
        if isinstance(v, Node):
            kw[f.name] = _annotate(c, v)
        elif isinstance(v, tuple) and v and isinstance(v[0], Node):
            kw[f.name] = tuple(_annotate(c, x) for x in v)
    if id(n) in c.types:
        kw["type"] = c.types[id(n)]
    if isinstance(n, Name) and id(n) in c.refs:
        kw["ref"] = c.refs[id(n)]
    return replace(n, **kw)


def resolve_expr(
    e: Expr, scope: Scope, *, allow_virtual: bool, want: Want | str = "any"
) -> tuple[Expr, list[ExprDiag]]:
    """check_expr, returning the tree with every node's type and every name's binding
    (``Node.type``, ``Name.ref``): what lowering and the back-end read instead of checking
    again. Nodes an error left untyped have ``type`` None."""
    if want not in ("any", "num", "bool", "bytes"):
        raise ValueError(f"want must be 'any', 'num', 'bool' or 'bytes', not {want!r}")
    c = _Checker(scope, allow_virtual)
    t = c.expr(e)
    c.want(e, t, want)
    return _annotate(c, e), _sorted(c.diags)


def resolve_stmt(
    s: Stmt, scope: Scope, *, allowed_calls: frozenset[str]
) -> tuple[Stmt, list[ExprDiag]]:
    """check_stmt, returning the statement with its expressions resolved (see resolve_expr)."""
    c = _Checker(scope, allow_virtual=False)
    if isinstance(s, Assign):
        _check_assign(c, s)
    else:
        _check_call_stmt(c, s, allowed_calls)
    return _annotate(c, s), _sorted(c.diags)


_READ_ONLY = {
    "field": "header fields are read-only",
    "foreign_field": "header fields are read-only",
    "foreign_temp": "another layer's temp variables cannot be written",
    "builtin": "it is a built-in value",
    "state": "it is a PSM state",
    "transition": "it is a PSM transition",
    "event": "it is an event",
    "layout": "it is a layout",
}


def check_stmt(s: Stmt, scope: Scope, *, allowed_calls: frozenset[str]) -> list[ExprDiag]:
    """Check a statement; virtual references are never allowed in statements.

    ``allowed_calls``: the statement calls valid here (e.g. {'assemble', 'set_sdu'}).  The
    checker knows the signatures of assemble() and set_sdu(bytes); other allowed names
    have their arguments checked as expressions only.
    """
    c = _Checker(scope, allow_virtual=False)
    if isinstance(s, Assign):
        _check_assign(c, s)
    else:
        _check_call_stmt(c, s, allowed_calls)
    return _sorted(c.diags)


def _check_assign(c: _Checker, s: Assign) -> None:
    target = s.target
    r = c.scope.resolve(target.parts)
    vt = c.expr(s.value)
    dotted = target.dotted
    if r is None:
        c.unknown(target)
        return
    c.refs[id(target)] = r
    c.types[id(target)] = r.type
    if not r.assignable or r.virtual:
        reason = (
            "virtual references are read-only"
            if r.virtual
            else _READ_ONLY.get(r.kind, "it is read-only")
        )
        c.diag(
            "RG013",
            f"cannot assign to '{dotted}': {reason}",
            target,
            "assign to temp.X, perm.X or a parameter layer's P.perm.X",
        )
        return
    tt = r.type
    if vt is None:
        return
    if is_num(tt) and is_bytes(vt):
        c.diag(
            "RG013",
            f"cannot assign {_a(vt)} to '{dotted}', {_a(tt)}",
            s.value,
            "use len(s), s[i] or varint(s) to get a number",
        )
    elif is_bytes(tt) and is_num(vt):
        c.diag("RG013", f"cannot assign {_a(vt)} to '{dotted}', {_a(tt)}", s.value)
    elif is_bytes(tt) and is_bytes(vt):
        if tt.size is not None and vt.size is not None and tt.size != vt.size:
            c.diag(
                "RG013",
                f"'{dotted}' holds {_plural(tt.size, 'byte')} but the value has {vt.size}",
                s.value,
                f"slice the value to {tt.size} bytes, e.g. [:{tt.size}]",
                "warning",
            )
    elif is_num(tt):
        k = is_const(s.value)
        if k is not None and k > max_value(tt):
            c.diag(
                "RG015",
                f"{k} does not fit in '{dotted}' ({_plural(tt.width, 'bit')}); "
                f"it is truncated to {k & max_value(tt)}",
                s.value,
                None,
                "warning",
            )


def _check_call_stmt(c: _Checker, s: CallStmt, allowed_calls: frozenset[str]) -> None:
    f = s.func
    fs, fe = s.start, s.start + len(f)
    if f not in allowed_calls:
        if f in STATEMENT_CALLS:
            allowed = ", ".join(f"{x}()" for x in sorted(allowed_calls))
            c.diag(
                "RG018",
                f"{f}() is not allowed here",
                (fs, fe),
                f"allowed here: {allowed}" if allowed else "no calls are allowed here",
            )
        elif f in EXPR_FUNCTIONS:
            c.diag(
                "RG018",
                f"{f}() computes a value; as a statement it does nothing",
                (fs, fe),
                f"assign it: 'temp.x = {unparse(s)}'",
            )
        else:
            guess = _closest(f, set(allowed_calls) | set(STATEMENT_CALLS))
            c.diag(
                "RG017",
                f"unknown statement '{f}()'",
                (fs, fe),
                f"did you mean '{guess}()'?"
                if guess
                else "statement calls are assemble() and set_sdu(s)",
            )
        for a in s.args:
            c.expr(a)
        return
    params = STATEMENT_CALLS.get(f)
    if params is None:
        for a in s.args:
            c.expr(a)
        return
    if len(s.args) != len(params):
        c.diag(
            "RG017",
            f"{f}() takes {_plural(len(params), 'argument')}, got {len(s.args)}",
            s,
            f"write {f}({', '.join('s' for _ in params)})",
        )
    for a, p in zip(s.args, params, strict=False):
        c.arg(f, a, p)
    for a in s.args[len(params) :]:
        c.expr(a)
