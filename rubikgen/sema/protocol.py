"""Pass 2 of protocol analysis: expressions, statements, selector, sequence, PSM, events."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from rubikgen.expr import ExprSyntaxError, parse_expr, parse_stmt, resolve_expr, resolve_stmt
from rubikgen.expr.ast import Name, Num, Slice, walk
from rubikgen.expr.check import is_const
from rubikgen.expr.types import BytesT, NumT, Type, describe
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Path, SourceMap
from rubikgen.models.common import Callback, Transform, TypedArg, expr_text
from rubikgen.models.protocol import (
    AnyUntilStep,
    ElifStep,
    ElifStmt,
    ElseStep,
    ElseStmt,
    FieldSpec,
    IfStep,
    IfStmt,
    Linger,
    Lookup,
    RecordField,
    Selector,
)
from rubikgen.sema import builtins as B
from rubikgen.sema.checksums import check_checksums
from rubikgen.sema.framing import check_framing
from rubikgen.sema.limits import parse_duration
from rubikgen.sema.model import Key, LayerModel, Origin
from rubikgen.sema.scope import ProtocolScope
from rubikgen.sema.symbols import ProtocolInfo, check_ident
from rubikgen.sema.transforms import TRANSFORMS

_TOKEN = re.compile(r"[A-Za-z0-9_.]+|\|\||&&|==|!=|<=|>=|<<|>>|.", re.S)


def _const_of(e: Any) -> int | None:
    """The value of a constant expression, None otherwise (or when it does not parse)."""
    try:
        return is_const(parse_expr(expr_text(e)))
    except ExprSyntaxError:
        return None


class ExprChecker:
    """Parses and type-checks expressions at document paths, turning offsets into columns."""

    def __init__(
        self,
        info: ProtocolInfo,
        params: dict[str, ProtocolInfo],
        smap: SourceMap,
        diags: list[Diagnostic],
        table: LayerModel | None = None,
        owners: dict[str, str] | None = None,
        origin: Origin = "protocol",
    ) -> None:
        self.info = info
        self.params = params
        self.smap = smap
        self.diags = diags
        # Resolving one layer of a stack (sema/resolve.py): typed trees go to the layer's
        # model under (origin, their path), and parameter names are bound to the layers in
        # owners.
        self.table = table
        self.origin: Origin = origin
        self.owners = owners
        self.uses_virtual = False
        self.first_virtual: tuple[Path, int, int, str] | None = None
        # Extra hint for an unknown name (a stack knows more about where a name lives).
        self.missing_hint: Callable[[tuple[str, ...]], str | None] | None = None

    def _scope(self, ctx: B.Context) -> ProtocolScope:
        return ProtocolScope(self.info, self.params, ctx, self.owners)

    def syntax(self, path: Path, text: str, err: ExprSyntaxError) -> None:
        """Reports a parse error (RG010, or RG015 for a literal too large) over the token at
        its offset."""
        m = _TOKEN.match(text, err.offset)
        end = m.end() if m and m.end() > err.offset else err.offset + 1
        self.diags.append(
            self.smap.diag(
                err.code, err.message, path, hint=err.hint, offset=(err.offset, end), text=text
            )
        )

    def _report(
        self, path: Path, ds: Sequence[Any], scope: ProtocolScope, text: str | None = None
    ) -> None:
        for d in ds:
            msg, hint, code = d.message, d.hint, d.code
            if code == "RG011":
                nm = re.match(r"(?:unknown name )?'([^']+)'", msg)
                name = nm.group(1) if nm else None
                lay = re.match(r"unknown layout '([^']+)'", msg)
                if lay:  # has(L) where there is no packet
                    name = f"layout.{lay.group(1)}"
                for parts, why in scope.unavailable.items():
                    if ".".join(parts) == name:
                        code = "RG038"
                        shown = f"has({parts[1]})" if lay else name
                        msg = f"'{shown}' is not available in {scope.ctx.name}"
                        hint = why
                        break
                else:
                    parts = tuple(name.split(".")) if name else ()
                    # A name that exists in the child layer of an edge beats a did-you-mean.
                    better = (
                        self.missing_hint(parts)
                        if parts and self.missing_hint is not None
                        else None
                    )
                    if better is None and hint is None and parts:
                        better = scope.why_missing(parts)
                    if better:
                        hint = better
            if code == "RG014" and scope.ctx.name not in (
                B.TRANSITION.name,
                B.EVENT.name,
                B.HANDLER.name,
            ):
                # Not an action of a transition or event: no v. anywhere here, conditions included.
                nm = re.match(r"virtual reference '([^']+)'", msg)
                if nm:
                    msg = f"virtual reference '{nm.group(1)}' is not allowed in {scope.ctx.name}"
                    plain = nm.group(1).split(".", 1)[-1]
                    hint = (
                        f"v. is for the conditions of transitions, events and handlers; "
                        f"write '{plain}' for this packet's value"
                    )
            if code == "RG018" and msg.endswith("is not allowed here"):
                msg = msg.replace("here", f"in {scope.ctx.name}")
                if msg.startswith("assemble()") and scope.ctx.name == B.PREP.name:
                    hint = "prep runs before the sequence insert; call assemble() in an event or a transition"
            self.diags.append(
                self.smap.diag(
                    code,
                    msg,
                    path,
                    severity=d.severity,
                    hint=hint,
                    offset=(d.start, d.end),
                    text=text,
                )
            )

    def expr(
        self, path: Path, value: Any, ctx: B.Context, want: str = "any"
    ) -> tuple[Type | None, Any]:
        text = expr_text(value)
        try:
            e = parse_expr(text)
        except ExprSyntaxError as err:
            self.syntax(path, text, err)
            return None, None
        scope = self._scope(ctx)
        e, ds = resolve_expr(e, scope, allow_virtual=ctx.virtual, want=want)
        t = e.type
        self._report(path, ds, scope, text)
        if self.table is not None:
            self._keep(self.table.exprs, path, e)
        vref = next((n for n in walk(e) if isinstance(n, Name) and n.parts[0] == "v"), None)
        if vref is not None and not self.uses_virtual:
            self.uses_virtual = True
            self.first_virtual = (path, vref.start, vref.end, text)
        return t, e

    def _keep(self, into: dict[Key, Any], path: Path, node: Any) -> None:
        key: Key = (self.origin, path)
        if key in into:  # one place, one meaning: a second check here would hide the first
            raise ValueError(f"{key} checked twice in one layer")
        into[key] = node

    def virtual_needs_sequence(self, has_sequence: bool, what: str) -> None:
        """RG035 at the first v. reference when the protocol has no sequence."""
        if not self.uses_virtual or has_sequence or self.first_virtual is None:
            return
        path, start, end, text = self.first_virtual
        self.diags.append(
            self.smap.diag(
                "RG035",
                f"virtual reference needs a sequence, but {what} has none",
                path,
                offset=(start, end),
                text=text,
                hint="v.X holds once X was seen and the sequence has no hole up to its end; add a sequence "
                "or drop the 'v.'",
            )
        )

    def stmts(self, path: Path, stmts: list[Any], ctx: B.Context, calls: frozenset[str]) -> None:
        self.chain(
            path, stmts, lambda p, s: self.stmt(p, s, ctx, calls), IfStmt, ElifStmt, ElseStmt
        )

    def chain(
        self,
        path: Path,
        items: list[Any],
        each: Callable[[Path, Any], None],
        if_t: type,
        elif_t: type,
        else_t: type,
    ) -> None:
        """Checks if/elif/else ordering in a list and visits every item."""
        prev_if = False
        for i, item in enumerate(items):
            ipath = path + (i,)
            if isinstance(item, (elif_t, else_t)) and not prev_if:
                kw = "elif" if isinstance(item, elif_t) else "else"
                self.diags.append(
                    self.smap.diag(
                        "RG036",
                        f"'{kw}' does not follow an 'if' or 'elif'",
                        ipath + (kw,),
                        key=True,
                        hint="elif/else items must come right after the if item they belong to",
                    )
                )
            prev_if = isinstance(item, (if_t, elif_t))
            each(ipath, item)

    def stmt(self, path: Path, s: Any, ctx: B.Context, calls: frozenset[str]) -> None:
        cond_ctx = ctx
        if isinstance(s, str):
            try:
                st = parse_stmt(s)
            except ExprSyntaxError as err:
                self.syntax(path, s, err)
                return
            plain = B.Context(**{**ctx.__dict__, "virtual": False})
            scope = self._scope(plain)
            st, ds = resolve_stmt(st, scope, allowed_calls=calls)
            self._report(path, ds, scope, s)
            if self.table is not None:
                self._keep(self.table.stmts, path, st)
            return
        if isinstance(s, (IfStmt, ElifStmt)):
            key = "if" if isinstance(s, IfStmt) else "elif"
            cond = s.if_ if isinstance(s, IfStmt) else s.elif_
            self.expr(path + (key,), cond, cond_ctx, "bool")
            self.stmts(path + ("then",), s.then, ctx, calls)
            return
        if isinstance(s, ElseStmt):
            self.stmts(path + ("else",), s.else_, ctx, calls)
            return
        if isinstance(s, Callback):
            self.callback(path, s, ctx)
        if isinstance(s, Transform):
            self.transform(path, s, ctx)

    def transform(self, path: Path, tf: Transform, ctx: B.Context) -> None:
        spec = TRANSFORMS.get(tf.transform)
        if spec is None:
            known = ", ".join(sorted(TRANSFORMS))
            self.diags.append(
                self.smap.diag(
                    "RG044",
                    f"unknown transform '{tf.transform}'",
                    path + ("transform",),
                    hint=f"the runtime provides: {known}",
                )
            )
            return
        params = {n: (k, doc) for n, k, doc in spec.params}
        plain = B.Context(**{**ctx.__dict__, "virtual": False})
        for name, a in tf.args.items():
            apath = path + ("args", name)
            if name not in params:
                self.diags.append(
                    self.smap.diag(
                        "RG044",
                        f"transform '{spec.name}' has no argument '{name}'",
                        apath,
                        key=True,
                        hint="its arguments: " + ", ".join(params),
                    )
                )
                continue
            kind = params[name][0]
            t, _ = self.expr(apath, a, plain)
            if t is not None and (kind == "bytes") != isinstance(t, BytesT):
                self.diags.append(
                    self.smap.diag(
                        "RG012",
                        f"argument '{name}' of transform '{spec.name}' is a "
                        f"{'byte slice' if kind == 'bytes' else 'number'}, not a {describe(t)}",
                        apath,
                        hint=params[name][1],
                    )
                )
        missing = [n for n in params if n not in tf.args]
        if missing:
            self.diags.append(
                self.smap.diag(
                    "RG044",
                    f"transform '{spec.name}' needs argument(s) {', '.join(missing)}",
                    path + ("transform",),
                    hint="; ".join(f"{n}: {params[n][1]}" for n in missing),
                )
            )

    def callback(self, path: Path, cb: Callback, ctx: B.Context) -> None:
        check_ident(
            cb.callback, "handler name", self.smap, path + ("callback",), self.diags, key=False
        )
        plain = B.Context(**{**ctx.__dict__, "virtual": False})
        self.args(path + ("args",), cb.args, plain)

    def args(self, path: Path, args: dict[str, Any], ctx: B.Context) -> None:
        for name, a in args.items():
            apath = path + (name,)
            check_ident(name, "argument name", self.smap, apath, self.diags)
            if isinstance(a, TypedArg):
                t, _ = self.expr(apath + ("value",), a.value, ctx)
                if t is not None and (a.type == "bytes") != isinstance(t, BytesT):
                    self.diags.append(
                        self.smap.diag(
                            "RG012",
                            f"argument '{name}' is declared {a.type} but its value is a {describe(t)}",
                            apath + ("type",),
                        )
                    )
            else:
                self.expr(apath, a, ctx)


def _selector_item(ec: ExprChecker, path: Path, text: str) -> Type | None:
    try:
        e = parse_expr(text)
    except ExprSyntaxError as err:
        ec.syntax(path, text, err)
        return None
    ok = isinstance(e, Name) or (
        isinstance(e, Slice)
        and isinstance(e.value, Name)
        and (e.lo is None or (isinstance(e.lo, Num) and e.lo.value == 0))
        and isinstance(e.hi, Num)
    )
    if not ok:
        ec.diags.append(
            ec.smap.diag(
                "RG029",
                f"key item '{text}' is not a field or a fixed-size prefix",
                path,
                offset=(e.start, e.end),
                text=text,
                hint="key items are fields, variables or prefixes like header.dcid[:8]; no expressions",
            )
        )
        return None
    t, _ = ec.expr(path, text, B.SELECTOR)
    if isinstance(t, BytesT) and t.size is None:
        ec.diags.append(
            ec.smap.diag(
                "RG029",
                f"key item '{text}' has no fixed size",
                path,
                offset=(e.start, e.end),
                text=text,
                hint="take a fixed-size prefix, e.g. x[:8]",
            )
        )
    return t


def check_protocol(
    info: ProtocolInfo, params: dict[str, ProtocolInfo], ec: ExprChecker | None = None
) -> list[Diagnostic]:
    """Type-checks the protocol with one binding of its parameters (with ``ec``, a checker
    that also records what it resolves: sema/resolve.py)."""
    diags: list[Diagnostic] = [] if ec is None else ec.diags
    smap = info.smap
    m = info.model
    if ec is None:
        ec = ExprChecker(info, params, smap, diags)

    # Field lengths.
    for lname, fields in info.layouts.items():
        for f in fields:
            if f.length_expr is not None:
                key = "bits" if f.length_unit == "bits" else "bytes"
                ec.expr(f.path + (key,), f.length_expr, B.LAYOUT_LEN, "num")
                _check_field_order(ec, info, lname, f)

    # Header program.
    used_layouts: set[str] = set()

    def step(path: Path, s: Any) -> None:
        if isinstance(s, str):
            if s not in info.layouts:
                diags.append(
                    smap.diag("RG011", f"unknown layout '{s}'", path, hint=_dym(s, info.layouts))
                )
            used_layouts.add(s)
        elif isinstance(s, (IfStep, ElifStep)):
            key = "if" if isinstance(s, IfStep) else "elif"
            ec.expr(
                path + (key,), s.if_ if isinstance(s, IfStep) else s.elif_, B.HEADER_COND, "bool"
            )
            ec.chain(path + ("then",), s.then, step, IfStep, ElifStep, ElseStep)
        elif isinstance(s, ElseStep):
            ec.chain(path + ("else",), s.else_, step, IfStep, ElifStep, ElseStep)
        elif isinstance(s, AnyUntilStep):
            _check_any_until(ec, info, path + ("any_until",), s, used_layouts)

    ec.chain(("header",), m.header, step, IfStep, ElifStep, ElseStep)
    for lname in info.layouts:
        if lname not in used_layouts:
            diags.append(
                smap.diag(
                    "RG042",
                    f"layout '{lname}' is never parsed",
                    ("layouts", lname),
                    key=True,
                    severity="warning",
                    hint="add it to the header program or remove it",
                )
            )

    # Variables.
    for vname, v in info.perms.items():
        if v.init is not None:
            t, _ = ec.expr(v.path + ("init",), v.init, B.PERM_INIT)
            _assign_compat(ec, v.path + ("init",), f"perm.{vname}", v.kind, v.size, t)

    # Selector.
    sel = m.selector
    if sel is not None:
        if isinstance(sel, list):
            for i, item in enumerate(sel):
                _selector_item(ec, ("selector", i), item)
            if not sel:
                diags.append(
                    smap.diag("RG029", "empty selector", ("selector",), hint="list the key fields")
                )
        else:
            _check_selector(ec, sel)

    if m.lookup is not None:
        _check_lookup(ec, m.lookup, sel is not None, params)

    if sel is None and m.perm:
        first = next(iter(m.perm))
        diags.append(
            smap.diag(
                "RG030",
                "perm variables need a selector",
                ("perm", first),
                key=True,
                hint="perm variables live in an instance; add a selector, or use temp",
            )
        )

    # prep
    # set_sdu in prep trims the data handed on (e.g. UDP's length); a later assemble() replaces it.
    ec.stmts(("prep",), m.prep, B.PREP, frozenset({"set_sdu"}))

    check_framing(m, smap, sel is not None, diags)

    # Sequence.
    if m.sequence is not None:
        sq = m.sequence
        if sel is None:
            diags.append(
                smap.diag(
                    "RG030",
                    "a sequence needs a selector",
                    ("sequence",),
                    key=True,
                    hint="sequences belong to instances; add a selector that keys them",
                )
            )
        ec.expr(("sequence", "meta"), sq.meta, B.SEQUENCE, "num")
        t, _ = ec.expr(("sequence", "data"), sq.data, B.SEQUENCE, "bytes")
        if sq.data_len is not None:
            ec.expr(("sequence", "data_len"), sq.data_len, B.SEQUENCE, "num")
            k = _const_of(sq.data_len) if sq.unit == "message" else None
            if k is not None and k not in (0, 1):
                diags.append(
                    smap.diag(
                        "RG015",
                        f"data_len {k} in a message sequence: a packet inserts one unit or none",
                        ("sequence", "data_len"),
                        hint="with unit: message, data_len is 0 (no message) or 1 (one message, "
                        "whatever its length); phantom units do not exist",
                    )
                )
        if sq.early is not None:
            ec.expr(("sequence", "early"), sq.early, B.SEQUENCE, "bool")
            if sq.unit != "message":
                diags.append(
                    smap.diag(
                        "RG006",
                        "early applies to message sequences only",
                        ("sequence", "early"),
                        key=True,
                        hint="add unit: message, or drop early: a byte is never delivered out of order",
                    )
                )
        if sq.window is not None:
            for i, w in enumerate(sq.window):
                ec.expr(("sequence", "window", i), w, B.SEQUENCE, "num")
        if sq.ack is not None:
            ec.expr(("sequence", "ack"), sq.ack, B.SEQUENCE, "num")
            if sq.window is None:
                diags.append(
                    smap.diag(
                        "RG006",
                        "sequence ack needs a window",
                        ("sequence", "ack"),
                        key=True,
                        hint="ack refines the window's left edge for retention: give window too",
                    )
                )
        if (
            sq.overlap_policy is not None
            and "overwrite" in sq.model_fields_set
            and sq.overwrite != sq.overlap_policy
        ):
            diags.append(
                smap.diag(
                    "RG006",
                    f"overwrite: {sq.overwrite} contradicts overlap_policy: {sq.overlap_policy}",
                    ("sequence", "overwrite"),
                    key=True,
                    hint="overwrite is an alias of overlap_policy: keep one of them",
                )
            )
        if isinstance(sq.retain, str):
            name = sq.retain.removeprefix("option.")
            opt = m.options.get(name)
            if (
                not sq.retain.startswith("option.")
                or opt is None
                or not isinstance(opt.default, bool)
            ):
                diags.append(
                    smap.diag(
                        "RG006",
                        f"retain: '{sq.retain}' is not option.NAME of a boolean option",
                        ("sequence", "retain"),
                        hint="true, false, or option.NAME naming a boolean in options:",
                    )
                )
        # (an option's value may be on where nothing is buffered: then it does nothing, so a
        # flow-tracking copy of a protocol keeps the option)
        if sq.retain is True and (sq.unit != "byte" or not sq.buffer_data):
            diags.append(
                smap.diag(
                    "RG006",
                    "retain needs a byte sequence that buffers data (unit: byte, buffer_data)",
                    ("sequence", "retain"),
                    hint="retention keeps delivered bytes to compare: there are none without them",
                )
            )
        for k in ("max_bytes", "max_blocks"):
            v = getattr(sq, k)
            if v < 1 or v > 1 << 31:
                diags.append(
                    smap.diag("RG015", f"{k} {v} is out of range 1..2^31", ("sequence", k))
                )

    # PSM.
    if m.psm is not None:
        _check_psm(ec, info)

    # Events.
    _check_events(ec, info)

    ec.virtual_needs_sequence(m.sequence is not None, f"protocol '{m.protocol}'")

    if m.timeout is not None and parse_duration(m.timeout) is None:
        diags.append(
            smap.diag(
                "RG037",
                f"invalid timeout '{m.timeout}'",
                ("timeout",),
                hint="a positive number of seconds or a string like '30s', '500ms', '2m'",
            )
        )
    _check_linger(ec, m, smap, diags)
    diags.extend(check_checksums(info, params))
    return diags


RECORD_MAX = 4  # record fields per layer: rg_api.h RG_REC_MAX


def _check_linger(ec: Any, m: Any, smap: Any, diags: list[Diagnostic]) -> None:
    """`linger:` (a duration, or time + reopen) and perm variables' `record:`."""
    lg = m.linger
    if lg is not None:
        t = lg.time if isinstance(lg, Linger) else lg
        path: tuple[str | int, ...] = ("linger", "time") if isinstance(lg, Linger) else ("linger",)
        if parse_duration(t) is None:
            diags.append(
                smap.diag(
                    "RG037",
                    f"invalid linger '{t}'",
                    path,
                    hint="a positive number of seconds or a string like '30s', '500ms', '2m'",
                )
            )
        if m.selector is None:
            diags.append(
                smap.diag(
                    "RG043",
                    "linger needs a selector",
                    ("linger",),
                    hint="only instances linger; add a selector",
                )
            )
        elif m.psm is None or not m.psm.accept:
            diags.append(
                smap.diag(
                    "RG043",
                    "linger needs a PSM with accept states",
                    ("linger",),
                    hint="an instance lingers after it reached an accept state",
                )
            )
        if isinstance(lg, Linger) and lg.reopen is not None:
            ec.expr(("linger", "reopen"), lg.reopen, B.PREP, "bool")
    recs = [n for n, fd in m.perm.items() if isinstance(fd, FieldSpec) and fd.record]
    if len(recs) > RECORD_MAX:
        diags.append(
            smap.diag(
                "RG026",
                f"{len(recs)} record fields: at most {RECORD_MAX}",
                ("perm", recs[RECORD_MAX], "record"),
                hint="records carry a few values (rg_api.h RG_REC_MAX)",
            )
        )
    for vname, fd in m.perm.items():
        rec = fd.record if isinstance(fd, FieldSpec) else None
        if isinstance(rec, RecordField):
            for i, nm in enumerate([rec.name or vname, *rec.names]):
                if not re.fullmatch(r"[A-Za-z0-9_]+", nm):
                    diags.append(
                        smap.diag(
                            "RG026",
                            f"record name '{nm}' is not a word",
                            ("perm", vname, "record", "name" if i == 0 else "names"),
                            hint="letters, digits and _ (it is written into JSON unescaped)",
                        )
                    )
        if isinstance(rec, RecordField) and rec.letters is not None:
            if not re.fullmatch(r"[A-Za-z^]{1,15}", rec.letters):
                diags.append(
                    smap.diag(
                        "RG026",
                        f"record letters '{rec.letters}': 1 to 15 letters",
                        ("perm", vname, "record", "letters"),
                        hint="one letter per 4-bit code 1..15",
                    )
                )
        if isinstance(fd, FieldSpec) and fd.record is not None and fd.bytes is not None:
            diags.append(
                smap.diag(
                    "RG026",
                    f"perm.{vname}: only a number can be a record field",
                    ("perm", vname, "record"),
                    hint="give it bits: N",
                )
            )


def _check_field_order(ec: ExprChecker, info: ProtocolInfo, lname: str, f: Any) -> None:
    later = {g.name for g in info.layouts[lname] if g.index >= f.index}
    try:
        e = parse_expr(f.length_expr)
    except ExprSyntaxError:
        return
    for n in walk(e):
        if (
            isinstance(n, Name)
            and len(n.parts) == 2
            and n.parts[0] == "header"
            and n.parts[1] in later
        ):
            key = "bits" if f.length_unit == "bits" else "bytes"
            ec.diags.append(
                ec.smap.diag(
                    "RG038",
                    f"length of '{f.name}' reads field '{n.parts[1]}', which is parsed after it",
                    f.path + (key,),
                    offset=(n.start, n.end),
                    text=f.length_expr,
                    hint="a length may use only earlier fields",
                )
            )


def _check_any_until(
    ec: ExprChecker, info: ProtocolInfo, path: Path, s: AnyUntilStep, used: set[str]
) -> None:
    smap, diags = ec.smap, ec.diags
    au = s.any_until
    tags: dict[int, str] = {}
    width: int | None = None
    default: str | None = None
    for i, lname in enumerate(au.layouts):
        lp = path + ("layouts", i)
        used.add(lname)
        if lname not in info.layouts:
            diags.append(
                smap.diag("RG011", f"unknown layout '{lname}'", lp, hint=_dym(lname, info.layouts))
            )
            continue
        fields = info.layouts[lname]
        if not fields or fields[0].kind != "num" or fields[0].width not in (8, 16):
            diags.append(
                smap.diag(
                    "RG025",
                    f"layout '{lname}' must start with an 8- or 16-bit tag field",
                    lp,
                    hint="any_until dispatches on the first field of each layout",
                )
            )
            continue
        tag = fields[0]
        if width is not None and tag.width != width:
            diags.append(
                smap.diag(
                    "RG025",
                    f"tag of '{lname}' is {tag.width} bits; earlier layouts use {width}",
                    lp,
                    hint="all layouts of one loop need tags of the same width",
                )
            )
        width = width or tag.width
        if tag.const is None:
            if default is not None:
                diags.append(
                    smap.diag(
                        "RG025",
                        f"'{lname}' and '{default}' are both default layouts (no const tag)",
                        lp,
                        hint="give one of them a const tag",
                    )
                )
            default = lname
        elif tag.const in tags:
            diags.append(
                smap.diag(
                    "RG025",
                    f"tag {tag.const} of '{lname}' is already used by '{tags[tag.const]}'",
                    lp,
                )
            )
        else:
            tags[tag.const] = lname
    if au.until is not None:
        ec.expr(path + ("until",), au.until, B.HEADER_COND, "bool")
    if not 1 <= au.max <= 65536:
        diags.append(smap.diag("RG025", f"max {au.max} is out of range 1..65536", path + ("max",)))


def _check_selector(ec: ExprChecker, sel: Selector) -> None:
    smap, diags = ec.smap, ec.diags
    if sel.key is not None and sel.sides is not None:
        diags.append(
            smap.diag(
                "RG029",
                "a selector has either 'key' (unidirectional) or 'sides' (bidirectional), not both",
                ("selector", "sides"),
                key=True,
                hint="remove one of them",
            )
        )
    elif sel.key is None and sel.sides is None:
        diags.append(
            smap.diag(
                "RG029",
                "a selector needs 'key' (unidirectional) or 'sides' (bidirectional)",
                ("selector",),
                key=True,
                hint="write key: [...] or sides: [[...], [...]], or a plain list for a unidirectional key",
            )
        )
    if sel.key is not None:
        for i, item in enumerate(sel.key):
            _selector_item(ec, ("selector", "key", i), item)
    if sel.sides is not None:
        if len(sel.sides) != 2:
            diags.append(
                smap.diag(
                    "RG029",
                    f"'sides' needs exactly two half keys, not {len(sel.sides)}",
                    ("selector", "sides"),
                    hint="e.g. [[ip.header.saddr, header.sport], [ip.header.daddr, header.dport]]",
                )
            )
        else:
            a, b = sel.sides
            if len(a) != len(b):
                diags.append(
                    smap.diag(
                        "RG029",
                        f"the half keys have {len(a)} and {len(b)} items",
                        ("selector", "sides", 1),
                        hint="both sides list the same kinds of fields in the same order",
                    )
                )
            ta = [_selector_item(ec, ("selector", "sides", 0, i), x) for i, x in enumerate(a)]
            tb = [_selector_item(ec, ("selector", "sides", 1, i), x) for i, x in enumerate(b)]
            for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
                if x is not None and y is not None and _key_size(x) != _key_size(y):
                    diags.append(
                        smap.diag(
                            "RG012",
                            f"key item {i + 1} is a {describe(x)} on one side and a {describe(y)} on the other",
                            ("selector", "sides", 1, i),
                        )
                    )
    for i, item in enumerate(sel.common):
        _selector_item(ec, ("selector", "common", i), item)
    if sel.create_if is not None:
        ec.expr(("selector", "create_if"), sel.create_if, B.SELECTOR, "bool")


def _key_shape(sel: Any) -> tuple[str, list[int]]:
    """A selector's (or lookup's) shape: unidirectional or not, items per part."""
    if isinstance(sel, list):
        return "key", [len(sel), 0]
    if sel.sides is not None:
        return "sides", [len(s) for s in sel.sides] + [len(sel.common)]
    return "key", [len(sel.key or []), len(sel.common)]


def _check_lookup(
    ec: ExprChecker, lk: Lookup, has_selector: bool, params: dict[str, ProtocolInfo]
) -> None:
    """lookup: a key of this packet searched in a parameter layer's instance table."""
    smap, diags = ec.smap, ec.diags
    if has_selector:
        diags.append(
            smap.diag(
                "RG029",
                "a protocol with 'lookup' has no selector: its handlers name the instance found",
                ("lookup",),
                key=True,
                hint="remove the selector, or the lookup",
            )
        )
    if (lk.key is None) == (lk.sides is None):
        diags.append(
            smap.diag(
                "RG029",
                "a lookup needs exactly one of 'key' (unidirectional) and 'sides' (bidirectional)",
                ("lookup",),
                key=True,
                hint="write the key as the table's selector is written",
            )
        )
        return
    items: list[tuple[Path, str]] = [(("lookup", "key", i), x) for i, x in enumerate(lk.key or [])]
    for j, side in enumerate(lk.sides or []):
        items += [(("lookup", "sides", j, i), x) for i, x in enumerate(side)]
    items += [(("lookup", "common", i), x) for i, x in enumerate(lk.common)]
    for path, x in items:
        _selector_item(ec, path, x)
    target = params.get(lk.table)
    if target is None:
        if lk.table not in ec.info.param_files:
            diags.append(
                smap.diag(
                    "RG011",
                    f"unknown parameter '{lk.table}': a lookup searches a parameter's layer",
                    ("lookup", "table"),
                    hint=_dym(lk.table, ec.info.param_files) or "declare it under params",
                )
            )
        return
    tsel = target.model.selector
    if tsel is None:
        diags.append(
            smap.diag(
                "RG029",
                f"parameter '{lk.table}' is a '{target.name}' layer, which has no instances "
                "(no selector) to look up",
                ("lookup", "table"),
            )
        )
        return
    mine, theirs = _key_shape(lk), _key_shape(tsel)
    if mine != theirs:
        diags.append(
            smap.diag(
                "RG029",
                f"the lookup's key ({mine[0]}, items {mine[1]}) does not have the shape of "
                f"'{target.name}''s selector ({theirs[0]}, items {theirs[1]})",
                ("lookup",),
                key=True,
                hint="list the same kinds of items, in the same order, as the table's selector",
            )
        )


def _key_size(t: Type) -> tuple[str, int | None]:
    if isinstance(t, BytesT):
        return ("bytes", t.size)
    return ("num", (t.width + 7) // 8 if isinstance(t, NumT) else None)


def _assign_compat(
    ec: ExprChecker, path: Path, target: str, kind: str, size: int | None, t: Type | None
) -> None:
    if t is None:
        return
    if (kind == "bytes") != isinstance(t, BytesT):
        want = "a byte slice" if kind == "bytes" else "a number"
        ec.diags.append(
            ec.smap.diag("RG012", f"{target} is {want} but the value is a {describe(t)}", path)
        )
    elif (
        kind == "bytes"
        and size is not None
        and isinstance(t, BytesT)
        and t.size is not None
        and t.size != size
    ):
        ec.diags.append(
            ec.smap.diag("RG012", f"{target} holds {size} bytes but the value has {t.size}", path)
        )


def _dym(name: str, options: Any) -> str | None:
    import difflib

    best = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f"did you mean '{best[0]}'?" if best else None


def _check_psm(ec: ExprChecker, info: ProtocolInfo) -> None:
    smap, diags = ec.smap, ec.diags
    psm = info.model.psm
    assert psm is not None
    if info.model.selector is None:
        diags.append(
            smap.diag(
                "RG030",
                "a PSM needs a selector",
                ("psm",),
                key=True,
                hint="the PSM state lives in an instance; add a selector that keys it",
            )
        )
    states = psm.states
    seen: dict[str, int] = {}
    for i, s in enumerate(states):
        if s in seen:
            diags.append(smap.diag("RG022", f"state '{s}' is listed twice", ("psm", "states", i)))
        seen.setdefault(s, i)

    def known(s: str, path: Path, key: bool = False) -> bool:
        if s in seen:
            return True
        diags.append(
            smap.diag(
                "RG032",
                f"undefined state '{s}'",
                path,
                key=key,
                hint=_dym(s, seen) or "add it to psm.states",
            )
        )
        return False

    start: str | None = None
    if psm.start is None:
        diags.append(
            smap.diag(
                "RG031",
                "the PSM has no start state",
                ("psm",),
                key=True,
                hint=f"add start: {states[0]}",
            )
        )
    elif isinstance(psm.start, list):
        if len(psm.start) != 1:
            diags.append(
                smap.diag(
                    "RG031",
                    f"the PSM has {len(psm.start)} start states; it needs exactly one",
                    ("psm", "start"),
                    hint="an instance begins in one state; keep one and reach the others by transitions",
                )
            )
        if psm.start and known(psm.start[0], ("psm", "start", 0)):
            start = psm.start[0]
    elif known(psm.start, ("psm", "start")):
        start = psm.start
    for i, s in enumerate(psm.accept):
        known(s, ("psm", "accept", i))

    tnames: dict[str, int] = {}
    edges: dict[str, set[str]] = {s: set() for s in states}
    # For shadowing: per source state, is there an earlier always-true transition?
    always: dict[str, str] = {}
    bad_target = False  # an undefined target makes reachability meaningless (no RG033 cascade)
    for i, t in enumerate(psm.transitions):
        tp: Path = ("psm", "transitions", i)
        if (
            check_ident(t.name, "transition name", smap, tp + ("name",), diags, key=False)
            and t.name in tnames
        ):
            diags.append(
                smap.diag("RG022", f"transition '{t.name}' is defined twice", tp + ("name",))
            )
        tnames.setdefault(t.name, i)
        if isinstance(t.from_, list):
            srcs = [(s, tp + ("from", j)) for j, s in enumerate(t.from_)]
        elif t.from_ == "*":
            srcs = [(s, tp + ("from",)) for s in states]
        else:
            srcs = [(t.from_, tp + ("from",))]
        valid_srcs = [s for s, p in srcs if t.from_ == "*" or known(s, p)]
        to_ok = known(t.to, tp + ("to",))
        bad_target = bad_target or not to_ok
        const_val = None
        if t.when is not None:
            _, e = ec.expr(tp + ("when",), t.when, B.TRANSITION, "bool")
            const_val = _const_truth(e)
        ec.stmts(tp + ("do",), t.do, B.TRANSITION, frozenset({"assemble", "set_sdu"}))
        if const_val is False:
            wtext = expr_text(t.when)
            diags.append(
                smap.diag(
                    "RG034",
                    f"transition '{t.name}' can never fire: its condition is always false",
                    tp + ("when",),
                    severity="warning",
                    offset=(0, len(wtext)),
                    text=wtext,
                    hint="fix the condition or remove the transition",
                )
            )
        shadowed = [s for s in valid_srcs if s in always]
        if valid_srcs and len(shadowed) == len(valid_srcs):
            by = always[shadowed[0]]
            diags.append(
                smap.diag(
                    "RG034",
                    f"transition '{t.name}' can never fire: '{by}' before it always matches from "
                    f"{', '.join(shadowed) if len(shadowed) < 4 else 'every source state'}",
                    tp + ("name",),
                    severity="warning",
                    hint="transitions are tried in order; move this one up or give the earlier one a condition",
                )
            )
        always_true = t.when is None or const_val is True
        for s in valid_srcs:
            if to_ok:
                edges.setdefault(s, set()).add(t.to)
            if always_true:
                always.setdefault(s, t.name)
    for i, name in enumerate(psm.setup):
        if name not in tnames:
            diags.append(
                smap.diag(
                    "RG032",
                    f"undefined transition '{name}' in setup",
                    ("psm", "setup", i),
                    hint=_dym(name, tnames) or "setup lists transitions of this PSM",
                )
            )
    if start is not None and not bad_target:
        reach = {start}
        todo = [start]
        while todo:
            s = todo.pop()
            for d in edges.get(s, ()):
                if d not in reach:
                    reach.add(d)
                    todo.append(d)
        for i, s in enumerate(states):
            if s not in reach:
                diags.append(
                    smap.diag(
                        "RG033",
                        f"state '{s}' is unreachable from the start state '{start}'",
                        ("psm", "states", i),
                        severity="warning",
                        hint="add a transition into it or remove it",
                    )
                )


def _const_truth(e: Any) -> bool | None:
    from rubikgen.expr import is_const
    from rubikgen.expr.ast import Bool

    if e is None:
        return None
    if isinstance(e, Bool):
        return e.value
    try:
        v = is_const(e)
    except Exception:
        return None
    return None if v is None else bool(v)


def _check_events(ec: ExprChecker, info: ProtocolInfo) -> None:
    smap, diags = ec.smap, ec.diags
    events = info.model.events
    known = set(events) | set(B.BUILTIN_EVENTS)
    for name, ev in events.items():
        ep: Path = ("events", name)
        check_ident(name, "event name", smap, ep, diags)
        if name in B.BUILTIN_EVENTS:
            diags.append(
                smap.diag(
                    "RG022",
                    f"event '{name}' has the name of a built-in event",
                    ep,
                    key=True,
                    hint="built-in events are raised by the runtime; pick another name",
                )
            )
        for key, names in (("with", ev.with_), ("before", ev.before)):
            lst = [names] if isinstance(names, str) else list(names or [])
            for j, other in enumerate(lst):
                if other in B.LIFECYCLE_EVENTS:
                    diags.append(
                        smap.diag(
                            "RG043",
                            f"event '{name}' cannot hook '{other}': it is raised when the "
                            "instance ends, outside the per-packet pipeline events run in",
                            ep + (key,) + ((j,) if not isinstance(names, str) else ()),
                            hint=f"give the stack a handler with 'with: {other}' on this layer",
                        )
                    )
        if ev.when is not None:
            ec.expr(ep + ("when",), ev.when, B.EVENT, "bool")
        ec.stmts(ep + ("do",), ev.do, B.EVENT, frozenset({"assemble", "set_sdu"}))
    order_edges = event_order_edges(
        {n: (e.before, e.with_) for n, e in events.items()}, known, smap, ("events",), diags
    )
    check_event_cycles(order_edges, smap, ("events",), diags)


def _as_list(v: str | list[str] | None) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def _event_hint(name: str, known: set[str]) -> str:
    dym = _dym(name, known)
    if dym:
        return dym
    own = sorted(k for k in known if k not in B.BUILTIN_EVENTS)
    return (
        f"defined here: {', '.join(own)}; " if own else "no events are defined here; "
    ) + f"built-in: {', '.join(B.BUILTIN_EVENTS)}"


def event_order_edges(
    rel: dict[str, tuple[list[str], str | list[str] | None]],
    known: set[str],
    smap: SourceMap,
    base: Path,
    diags: list[Diagnostic],
    skip: set[str] | frozenset[str] = frozenset(),
) -> dict[str, list[tuple[str, Path]]]:
    """Returns a -> [(b, path)] meaning a runs before b; reports unknown names. Names in
    `skip` (already reported otherwise) are ignored."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for name, (before, with_) in rel.items():
        for i, b in enumerate(before):
            if b in skip:
                continue
            p = base + (name, "before", i)
            if b not in known:
                diags.append(
                    smap.diag("RG041", f"event '{b}' is not defined", p, hint=_event_hint(b, known))
                )
                continue
            out.setdefault(name, []).append((b, p))
        for i, w in enumerate(_as_list(with_)):
            if w in skip:
                continue
            p = base + (name, "with") + ((i,) if isinstance(with_, list) else ())
            if w not in known:
                diags.append(
                    smap.diag("RG041", f"event '{w}' is not defined", p, hint=_event_hint(w, known))
                )
                continue
            out.setdefault(w, []).append((name, p))
    return out


def check_event_cycles(
    edges: dict[str, list[tuple[str, Path]]], smap: SourceMap, base: Path, diags: list[Diagnostic]
) -> None:
    """RG040 for each cycle of the order, at the relation that closes it. Edges whose path is
    just `base` come from elsewhere (a stack's view of its protocols' own relations): a cycle
    made only of those is reported there, and one that has any is reported at its first own
    relation."""
    state: dict[str, int] = {}
    stack: list[str] = []
    into: list[Path | None] = []  # path of the relation that led to stack[i]

    def visit(n: str, via: Path | None) -> None:
        state[n] = 1
        stack.append(n)
        into.append(via)
        for m, p in edges.get(n, []):
            if state.get(m) == 1:
                k = stack.index(m)
                cyc = stack[k:] + [m]
                rels = [x for x in into[k + 1 :] if x is not None] + [p]
                own = [x for x in rels if len(x) > len(base)]
                if own:
                    at = p if len(p) > len(base) else own[0]
                    diags.append(
                        smap.diag(
                            "RG040",
                            f"event order is cyclic: {' -> '.join(cyc)}",
                            at,
                            hint="'before' and 'with' must form an order; remove one relation",
                        )
                    )
            elif state.get(m) is None:
                visit(m, p)
        stack.pop()
        into.pop()
        state[n] = 2

    for n in list(edges):
        if state.get(n) is None:
            visit(n, None)
