"""Loading and checking a rules file against a stack (docs/rules.md).

A rule's `match` is an expression of the spec expression language over the header fields of
the stack's layers: `L.header.f` (the name specs use for another layer's field) or its short
form `L.f`; a bare layer name `L` holds when the packet reached that layer and parsed its
header. IPv4 addresses are written dotted (`10.0.0.1`), and `FIELD == a.b.c.d/n` compares a
prefix. Every problem is a Diagnostic at file:line:col, like spec errors.
"""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubikgen.expr.ast import BINARY_OPS, Binary, Bool, Expr, Name, Num, Unary, walk
from rubikgen.expr.parser import ExprSyntaxError, parse_expr
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Loaded, SourceMap, load_text
from rubikgen.ir.rules import (
    COMPARISONS,
    RELOAD_COPY_BYTES,
    FieldRef,
    LayerRef,
    Lit,
    Resolved,
    RuleIR,
    RuleSet,
)
from rubikgen.sema.checksums import fixed_offsets
from rubikgen.sema.stack_info import StackInfo
from rubikgen.sema.symbols import FieldInfo

from .model import RulesFile

LOGICAL = ("&&", "||")
MAX_KEY_BYTES = 8  # fields compared as numbers: up to 8 bytes
CHECKSUM_BAD = "checksum_bad"  # LAYER.checksum_bad: a checksum of the header does not verify
ADDR6_BYTES = 16  # IPv6 addresses: compared with == / != to an IPv6 address or prefix only

# an IPv6 literal: hex groups and at least two colons (`::` included), an optional /n; what it
# means is ipaddress's (RFC 4291 text forms, embedded IPv4 included)
_IPV6 = re.compile(
    r"(?<![\w.:])((?:[0-9A-Fa-f]{0,4}:){2,9}(?:[0-9A-Fa-f]{1,4}|\d{1,3}(?:\.\d{1,3}){3})?)"
    r"(?:/(\d{1,3}))?(?![\w.:])"
)
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:/(\d{1,3}))?(?![\w.])")


@dataclass
class StackFields:
    """What rules may name in a stack: its layers' header fields."""

    stack: str
    layers: dict[str, dict[str, FieldInfo]]
    protocols: dict[str, str]
    # fields the generated setters can write (backend/setters.py): at a fixed place in the
    # header, not a constant tag, of a fixed size
    settable: dict[str, set[str]]
    # layers whose protocol declares checksums: `LAYER.checksum_bad` (docs/rules.md)
    checksummed: set[str] = field(default_factory=set)
    # fields a reloadable rule set can read: at a fixed place in the header's first
    # RELOAD_COPY_BYTES (backend/rules_so.py copies them)
    readable: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of_model(cls, stack: str, info: StackInfo) -> StackFields:
        """What the checked stack's layers offer rules, from the semantic model (the check
        stage: nothing is lowered for it)."""
        layers = {n: dict(li.protocol.fields) for n, li in info.layers.items()}
        protos = {n: li.protocol.name for n, li in info.layers.items()}
        fixed = {n: fixed_offsets(li.protocol) for n, li in info.layers.items()}
        settable = {
            n: {f for f in fixed[n]
                if not (layers[n][f].kind == "num" and layers[n][f].const is not None)
                and not (layers[n][f].kind != "num" and layers[n][f].size is None)}
            for n in info.layers
        }  # fmt: skip
        summed = {n for n, li in info.layers.items() if li.protocol.model.checksums}
        readable: dict[str, set[str]] = {}
        for n in info.layers:
            fs = layers[n]
            readable[n] = {
                f for f, bit in fixed[n].items()
                if 0 < ((fs[f].width or 64) if fs[f].kind == "num" else 8 * (fs[f].size or 0))
                and bit + ((fs[f].width or 64) if fs[f].kind == "num" else 8 * (fs[f].size or 0))
                <= 8 * RELOAD_COPY_BYTES
            }  # fmt: skip
        return cls(stack, layers, protos, settable, summed, readable)


def load(path: str, text: str | None = None) -> tuple[Loaded | None, list[Diagnostic]]:
    """The rules file parsed and validated against the model (no stack needed)."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            return None, [Diagnostic("RG007", f"cannot read rules file: {e}", path, 1, 1)]
    loaded = load_text(path, text)
    if loaded.diags:
        return loaded, list(loaded.diags)
    if not isinstance(loaded.data, dict) or "rules" not in loaded.data:
        hint = "a rules file is a mapping: `rules: [{name, match, action}, ...]`"
        return loaded, [loaded.smap.diag("RG004", "no top-level 'rules' key", (), hint=hint)]
    from rubikgen.front.schema_errors import convert

    try:
        RulesFile.model_validate(loaded.data)
    except ValidationError as e:
        return loaded, convert(e, loaded.data, loaded.smap, RulesFile)
    return loaded, []


def _did_you_mean(name: str, options: list[str]) -> str | None:
    near = difflib.get_close_matches(name, options, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(x) for x in near)}?" if near else None


class _Checker:
    def __init__(self, smap: SourceMap, sf: StackFields, reloadable: bool = False) -> None:
        self.smap = smap
        self.sf = sf
        self.reloadable = reloadable  # --rules-reload: only fields sf.readable
        self.diags: list[Diagnostic] = []

    def err(self, code: str, msg: str, path: tuple[Any, ...], text: str | None = None,
            span: tuple[int, int] | None = None, hint: str | None = None,
            severity: str = "error") -> None:  # fmt: skip
        self.diags.append(
            self.smap.diag(code, msg, path, offset=span, text=text, hint=hint, severity=severity)
        )

    # -- names --------------------------------------------------------------------------
    def field(self, dotted: str, path: tuple[Any, ...], text: str | None,
              span: tuple[int, int] | None) -> FieldRef | LayerRef | None:  # fmt: skip
        parts = dotted.split(".")
        layers = self.sf.layers
        lay = parts[0]
        if lay not in layers:
            self.err("RG011", f"unknown layer '{lay}' in stack {self.sf.stack}", path, text,
                     span, _did_you_mean(lay, list(layers))
                     or f"the layers: {', '.join(layers)}")  # fmt: skip
            return None
        if len(parts) == 1:
            return LayerRef(lay)
        if len(parts) == 3 and parts[1] == "header":
            fname = parts[2]
        elif len(parts) == 2:
            fname = parts[1]
        else:
            self.err("RG011", f"unknown name '{dotted}'", path, text, span,
                     f"write LAYER.header.FIELD or LAYER.FIELD (e.g. {lay}.header.FIELD)")  # fmt: skip
            return None
        fields = layers[lay]
        if fname == CHECKSUM_BAD and fname not in fields:
            if lay in self.sf.checksummed and self.reloadable and list(layers).index(lay) >= 64:
                self.err("RG010", f"'{dotted}': a reloadable rule set (--rules-reload) reads "
                         "the checksums of a stack's first 64 layers only", path, text, span,
                         "build without --rules-reload to match on it")  # fmt: skip
                return None
            if lay in self.sf.checksummed:
                return FieldRef(lay, fname, "num", 1, virtual=True)
            self.err("RG011", f"layer '{lay}' ({self.sf.protocols[lay]}) declares no checksum: "
                     f"'{CHECKSUM_BAD}' is for layers whose protocol has `checksums:`", path,
                     text, span)  # fmt: skip
            return None
        if fname not in fields:
            proto = self.sf.protocols[lay]
            self.err("RG011", f"layer '{lay}' ({proto}) has no header field '{fname}'", path,
                     text, span, _did_you_mean(fname, list(fields))
                     or f"its fields: {', '.join(fields)}")  # fmt: skip
            return None
        hf = fields[fname]
        if self.reloadable and fname not in self.sf.readable.get(lay, set()):
            self.err("RG010", f"'{dotted}' is not at a fixed place in the first "
                     f"{RELOAD_COPY_BYTES} bytes of its header: a reloadable rule set "
                     "(--rules-reload) cannot read it", path, text, span,
                     "match on fields at a fixed place, or build without --rules-reload")  # fmt: skip
            return None
        if hf.kind == "num":
            return FieldRef(lay, fname, "num", hf.width or 64)
        if hf.size == ADDR6_BYTES:  # an IPv6 address: types() restricts how it is compared
            return FieldRef(lay, fname, "bytes", 128)
        if hf.size is None or hf.size > MAX_KEY_BYTES:
            what = "a variable-length" if hf.size is None else f"a {hf.size}-byte"
            self.err("RG012", f"'{dotted}' is {what} field: rules compare fields of at most "
                     f"{MAX_KEY_BYTES} bytes", path, text, span,
                     "variable-length fields cannot be matched; 16-byte fields (IPv6 "
                     "addresses) only with == or != to an address or prefix")  # fmt: skip
            return None
        return FieldRef(lay, fname, "bytes", hf.size * 8)

    # -- expressions ----------------------------------------------------------------------
    def expr(self, text: str, path: tuple[Any, ...]) -> tuple[Expr, dict[Any, Resolved]] | None:
        lits: dict[str, Lit] = {}

        def sub(m: re.Match[str]) -> str:
            octets = [int(m.group(i)) for i in range(1, 5)]
            bad = next((o for o in octets if o > 255), None)
            pre = m.group(5)
            if bad is not None or (pre is not None and int(pre) > 32):
                what = f"octet {bad} above 255" if bad is not None else f"prefix /{pre} above 32"
                self.err("RG015", f"bad IPv4 literal '{m.group(0)}': {what}", path, text,
                         (m.start(), m.end()))  # fmt: skip
            v = 0
            for o in octets:
                v = (v << 8) | (o & 0xFF)
            p = None if pre is None else min(int(pre), 32)
            if p is not None and v & ~Lit(v, p).mask & 0xFFFFFFFF:
                self.err("RG015", f"'{m.group(0)}' has bits set after the /{p} prefix", path,
                         text, (m.start(), m.end()),
                         "write the network address (host bits zero)")  # fmt: skip
            ph = f"_ip{len(lits)}"
            ph = ph + "_" * (len(m.group(0)) - len(ph))
            lits[ph] = Lit(v, p)
            return ph

        def sub6(m: re.Match[str]) -> str:
            whole, pre = m.group(0), m.group(2)
            try:
                net = ipaddress.IPv6Network(whole, strict=True)
            except ValueError as x:
                hint = (
                    "write the network address (host bits zero)" if "host bits" in str(x) else None
                )
                self.err("RG015", f"bad IPv6 literal '{whole}': {x}", path, text,
                         (m.start(), m.end()), hint)  # fmt: skip
                net = ipaddress.IPv6Network("::/128")
            ph = f"_ip{len(lits)}"
            ph = ph + "_" * (len(whole) - len(ph))
            p = None if pre is None else net.prefixlen
            lits[ph] = Lit(int(net.network_address), p, 128)
            return ph

        src = _IPV6.sub(sub6, text)
        src = _IPV4.sub(sub, src)  # placeholders even for bad literals: names still checked
        try:
            e = parse_expr(src)
        except ExprSyntaxError as x:
            self.err(x.code, x.message, path, text, (x.offset, x.offset + 1), x.hint)
            return None
        refs: dict[Any, Resolved] = {}
        before = len(self.diags)
        for n in walk(e):
            if isinstance(n, Name):
                if n.dotted in lits:
                    refs[(n.start, n.end)] = lits[n.dotted]
                    continue
                r = self.field(n.dotted, path, text, (n.start, n.end))
                if r is not None:
                    refs[(n.start, n.end)] = r
            elif not isinstance(n, Num | Bool | Unary | Binary):
                self.err("RG017", "rules take numbers, fields, operators and comparisons only "
                         "(no functions, indexing or slices)", path, text, (n.start, n.end))  # fmt: skip
        if len(self.diags) > before:
            return None
        self.types(e, refs, path, text)
        if len(self.diags) > before:
            return None
        return e, refs

    def types(self, e: Expr, refs: dict[Any, Resolved], path: tuple[Any, ...], text: str) -> None:
        """CIDR literals only as `FIELD == a.b.c.d/n` (or !=), against a 4-byte field; a
        constant compared with a field must fit it (a warning otherwise, like RG016)."""
        ok_cidr: set[tuple[int, int]] = set()
        ok_v6: set[tuple[int, int]] = set()  # 16-byte fields and IPv6 literals, paired by ==/!=
        for n in walk(e):
            if not isinstance(n, Binary) or n.op not in COMPARISONS:
                continue
            for a, b in ((n.left, n.right), (n.right, n.left)):
                ra = refs.get((a.start, a.end)) if isinstance(a, Name) else None
                rb = refs.get((b.start, b.end)) if isinstance(b, Name) else None
                if (n.op in ("==", "!=") and isinstance(ra, FieldRef) and ra.width == 128
                        and isinstance(rb, Lit) and rb.bits == 128):  # fmt: skip
                    ok_v6 |= {(a.start, a.end), (b.start, b.end)}
                    continue
                if isinstance(rb, Lit) and rb.prefix is not None and rb.bits == 32:
                    if n.op in ("==", "!=") and isinstance(ra, FieldRef) and ra.width == 32:
                        ok_cidr.add((b.start, b.end))
                if isinstance(ra, FieldRef) and isinstance(b, Num) and b.value >> ra.width:
                    self.err("RG016", f"{b.value} does not fit '{ra.dotted}' ({ra.width} bits): "
                             "the comparison is constant", path, text, (n.start, n.end),
                             severity="warning")  # fmt: skip
        for span, r in refs.items():
            if isinstance(r, FieldRef) and r.width == 128 and span not in ok_v6:
                self.err("RG012", f"'{r.dotted}' is a 16-byte field: it is only compared with "
                         "== or != to an IPv6 address or prefix", path, text, span,
                         "IPv6 addresses: e.g. ipv6.saddr == 2001:db8::1, "
                         "ipv6.daddr != 2001:db8::/32")  # fmt: skip
            elif isinstance(r, Lit) and r.bits == 128 and span not in ok_v6:
                self.err("RG012", "an IPv6 address or prefix is only compared with == or != to "
                         "a 16-byte field", path, text, span, "e.g. ipv6.saddr == 2001:db8::1")  # fmt: skip
            elif (
                isinstance(r, Lit) and r.prefix is not None and span not in ok_cidr and r.bits == 32
            ):
                self.err("RG012", "a prefix (a.b.c.d/n) is only compared with == or != against "
                         "a 4-byte field", path, text, span, "e.g. ip.saddr == 10.0.0.0/8")  # fmt: skip
        for n in walk(e):
            if isinstance(n, Binary) and n.op not in BINARY_OPS:  # pragma: no cover - parser
                self.err("RG010", f"unknown operator {n.op}", path, text, (n.start, n.end))

    def value(self, v: Any, target: FieldRef, path: tuple[Any, ...]) -> int | None:
        if isinstance(v, str) and target.width == 128:  # an IPv6 address
            try:
                return int(ipaddress.IPv6Address(v.strip()))
            except ValueError as x:
                self.err("RG015", f"bad IPv6 address '{v}': {x}", path)
                return None
        if isinstance(v, str):
            m = _IPV4.fullmatch(v.strip())
            if m is None or m.group(5) is not None or target.width != 32:
                self.err("RG012", f"'{v}' is not a value for '{target.dotted}' "
                         f"({target.width} bits)", path,
                         hint="a number, or a dotted IPv4 address for a 4-byte field")  # fmt: skip
                return None
            octets = [int(m.group(i)) for i in range(1, 5)]
            if max(octets) > 255:
                self.err("RG015", f"bad IPv4 address '{v}'", path)
                return None
            return int.from_bytes(bytes(octets), "big")
        if v < 0 or v >> target.width:
            self.err("RG015", f"{v} does not fit '{target.dotted}' ({target.width} bits)", path,
                     hint=f"at most {(1 << target.width) - 1}")  # fmt: skip
            return None
        return int(v)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")


class _SyntaxChecker(_Checker):
    """A rules file without a stack (`spec:` missing): everything but what the names mean."""

    def field(self, dotted: str, path: tuple[Any, ...], text: str | None,
              span: tuple[int, int] | None) -> FieldRef | LayerRef | None:  # fmt: skip
        if not _DOTTED.match(dotted):
            self.err("RG011", f"'{dotted}' is not a field name", path, text, span,
                     "write LAYER, LAYER.FIELD or LAYER.header.FIELD")  # fmt: skip
        return None


def check_syntax(loaded: Loaded) -> list[Diagnostic]:
    """The checks of a (model-valid) rules file that need no stack: expression syntax,
    literals, operators, names' shape, duplicate rule names."""
    return check(loaded, StackFields("", {}, {}, {}), checker=_SyntaxChecker)[1]


def check(
    loaded: Loaded,
    sf: StackFields,
    reloadable: bool = False,
    checker: type[_Checker] = _Checker,
) -> tuple[RuleSet | None, list[Diagnostic]]:
    """The rules of a loaded (model-valid) rules file checked against a stack's fields (for a
    reloadable rule set: only the fields it can read)."""
    data, smap = loaded.data, loaded.smap
    c = checker(smap, sf, reloadable)
    seen: dict[str, int] = {}
    out: list[RuleIR] = []
    for i, r in enumerate(data["rules"]):
        base = ("rules", i)
        name = r["name"]
        if name in seen:
            c.err("RG022", f"two rules named '{name}'", (*base, "name"),
                  hint=f"the first is rule {seen[name] + 1}")  # fmt: skip
        seen.setdefault(name, i)
        m = r["match"]
        text = ("true" if m else "false") if isinstance(m, bool) else m
        got = c.expr(text, (*base, "match"))
        act = r["action"]
        rewrites: list[tuple[FieldRef, int]] = []
        flags, mss, tcp_layers = 0, 0, []
        if isinstance(act, str) and act == "reject":
            pass
        elif isinstance(act, dict) and "reject" in act:
            opts = act["reject"] or {}
            flags = (1 if opts.get("both") else 0) | (2 if opts.get("icmp") == "admin" else 0)
            act = "reject"
        elif isinstance(act, dict) and "clamp-mss" in act:
            mss = int(act["clamp-mss"])
            tcp_layers = [n for n, p in sf.protocols.items() if p == "tcp"]
            if reloadable:
                c.err("RG010", "clamp-mss is not available in a reloadable rule set "
                      "(--rules-reload)", (*base, "action", "clamp-mss"),
                      hint="build without --rules-reload to clamp the MSS")  # fmt: skip
            elif not tcp_layers and checker is _Checker:
                c.err("RG012", f"stack {sf.stack} has no TCP layer: clamp-mss has nothing to "
                      "clamp", (*base, "action", "clamp-mss"))  # fmt: skip
            act = "clamp-mss"
        elif isinstance(act, dict):
            for fname, v in act["rewrite"].items():
                where = (*base, "action", "rewrite", fname)
                ref = c.field(fname, where, None, None)
                if isinstance(ref, LayerRef):
                    c.err("RG012", f"'{fname}' is a layer, not a field", where)
                elif ref is not None and ref.field not in sf.settable.get(ref.layer, set()):
                    c.err("RG012", f"'{fname}' cannot be rewritten: it has no fixed place in "
                          f"the {ref.layer} header", where, hint="only fields at a fixed offset "
                          "(not options, not constant tags) have setters")  # fmt: skip
                elif ref is not None:
                    val = c.value(v, ref, where)
                    if val is not None:
                        rewrites.append((ref, val))
            act = "rewrite"
        if got is None:
            continue
        line = smap.pos(base).line
        out.append(RuleIR(i, name, line, text, got[0], got[1], act, rewrites,
                          bool(r.get("stateful", False)), flags, mss, tcp_layers))  # fmt: skip
    errors = [d for d in c.diags if d.severity == "error"]
    if errors:
        return None, c.diags
    digest = hashlib.sha256(loaded.text.encode()).hexdigest()
    return RuleSet(loaded.file, digest, out), c.diags
