"""The stateless part of a rule set in BPF C: first match wins, each rule's hits counted in
the rg_rules array map. Same semantics as the C target's (backend/rules_c.py, docs/rules.md):
a leaf reading a layer the packet did not parse is false; when a layer repeats, its last
header counts. What needs user space's state (stateful rules, drop-flow, rewrites, checksum
verification) is an RG080 error at the rule's line."""

from __future__ import annotations

from rubikgen.expr.ast import Binary, Bool, Expr, Name, Num, Unary, walk
from rubikgen.ir import instrs as I
from rubikgen.ir.cond import Src
from rubikgen.ir.rules import COMPARISONS, FieldRef, LayerRef, Lit, RuleIR, RuleSet

from ..layer_c import LayerC
from .registry import EBPF
from .xcontext import Unlowerable, XContext

ACTIONS = ("pass", "count", "drop")
_GUARDED = {"/": "rg_op_div", "%": "rg_op_mod", "<<": "rg_op_shl", ">>": "rg_op_shr"}


def check(rs: RuleSet) -> None:
    for r in rs.rules:
        src = Src(rs.file, r.line, f"rule {r.name}")
        if r.stateful:
            raise Unlowerable(
                f"rule {r.name} is stateful: its decision lives in user space's instance",
                src, "drop such flows through the drop map (docs/xdp.md) or keep the rule "
                "for user space (build without --xdp)",
            )  # fmt: skip
        if r.action not in ACTIONS:
            raise Unlowerable(
                f"rule {r.name}: action {r.action} is not lowered to XDP (pass, count, drop)",
                src, "drop-flow and rewrites need user space",
            )  # fmt: skip
        for v in r.refs.values():
            if isinstance(v, FieldRef) and v.virtual:
                raise Unlowerable(
                    f"rule {r.name} reads {v.dotted}: checksums are not verified in XDP", src
                )


def rule_fields(rs: RuleSet) -> dict[str, list[FieldRef]]:
    out: dict[str, list[FieldRef]] = {}
    for r in rs.rules:
        for v in r.refs.values():
            if isinstance(v, FieldRef) and v not in out.setdefault(v.layer, []):
                out[v.layer].append(v)
    return out


def rule_layers(r: RuleIR) -> list[str]:
    out: list[str] = []
    for n in walk(r.expr):
        if isinstance(n, Name):
            x = r.ref(n)
            if isinstance(x, FieldRef | LayerRef) and x.layer not in out:
                out.append(x.layer)
    return out


def rf(f: FieldRef) -> str:
    return f"rgx_s->rf_{f.layer}_{f.field}"


def _val(r: RuleIR, e: Expr) -> str:
    if isinstance(e, Num):
        return f"{e.value}ULL"
    if isinstance(e, Bool):
        return "1ULL" if e.value else "0ULL"
    if isinstance(e, Name):
        x = r.ref(e)
        if isinstance(x, FieldRef):
            return f"((__u64){rf(x)})"
        if isinstance(x, Lit):
            return f"{x.value:#x}ULL"
        assert isinstance(x, LayerRef)
        return f"((__u64)rgx_s->rs_{x.layer})"
    if isinstance(e, Unary):
        a = _val(r, e.operand)
        return {"!": f"(__u64)!{a}", "~": f"({a} ^ ~0ULL)", "-": f"(0ULL - {a})"}[e.op]
    assert isinstance(e, Binary)
    a, b = _val(r, e.left), _val(r, e.right)
    if e.op in _GUARDED:
        return f"{_GUARDED[e.op]}({a}, {b})"
    if e.op in COMPARISONS or e.op in ("&&", "||"):
        return f"(__u64)({a} {e.op} {b})"
    return f"({a} {e.op} {b})"


def _eq128(f: FieldRef, lit: Lit) -> str:
    m, v = lit.mask, lit.value & lit.mask
    hi, lo = rf(f) + "[0]", rf(f) + "[1]"
    mh, ml, vh, vl = m >> 64, m & (2**64 - 1), v >> 64, v & (2**64 - 1)
    return f"((({hi} & {mh:#x}ULL) == {vh:#x}ULL) && (({lo} & {ml:#x}ULL) == {vl:#x}ULL))"


def pred(r: RuleIR, e: Expr) -> str:
    """The C truth of e (rules_c.RulesC.pred's semantics)."""
    if isinstance(e, Binary) and e.op in ("&&", "||"):
        return f"({pred(r, e.left)} {e.op} {pred(r, e.right)})"
    if isinstance(e, Unary) and e.op == "!":
        return f"!{pred(r, e.operand)}"
    if isinstance(e, Bool):
        return "1" if e.value else "0"
    if isinstance(e, Name) and isinstance(r.ref(e), LayerRef):
        return f"rgx_s->rs_{r.ref(e).layer}"  # type: ignore[union-attr]
    layers = []
    for n in walk(e):
        if isinstance(n, Name):
            x = r.ref(n)
            if isinstance(x, FieldRef | LayerRef) and x.layer not in layers:
                layers.append(x.layer)
    guards = [f"rgx_s->rs_{n}" for n in layers]
    if isinstance(e, Binary) and e.op in ("==", "!="):
        for a, b in ((e.left, e.right), (e.right, e.left)):
            lit = r.ref(b) if isinstance(b, Name) else None
            fa = r.ref(a) if isinstance(a, Name) else None
            if isinstance(lit, Lit) and lit.bits == 128 and isinstance(fa, FieldRef):
                core = _eq128(fa, lit)
                core = core if e.op == "==" else f"!{core}"
                return "(" + " && ".join([*guards, core]) + ")"
            if isinstance(lit, Lit) and lit.prefix is not None:
                core = f"(({_val(r, a)} & {lit.mask:#x}ULL) {e.op} {lit.value:#x}ULL)"
                return "(" + " && ".join([*guards, core]) + ")"
    if isinstance(e, Binary) and e.op in COMPARISONS:
        core = f"({_val(r, e.left)} {e.op} {_val(r, e.right)})"
    else:
        core = f"({_val(r, e)} != 0)"
    return "(" + " && ".join([*guards, core]) + ")"


def evaluate(rs: RuleSet) -> list[str]:
    """The rules at R_done: the first rule that holds counts the packet and decides it."""
    out = []
    for i, r in enumerate(rs.rules):
        verdict = "XDP_DROP" if r.action == "drop" else "RGX_UP"  # pass, count: to user space
        stat = "RGX_ST_RULE_DROP" if r.action == "drop" else "RGX_ST_RULE_PASS"
        text = r.match_text.replace("*/", "* /")
        out += [
            f"/* {rs.file}:{r.line} rule {r.name}: {text} -> {r.action} */",
            f"if ({pred(r, r.expr)}) {{",
            f"    rgx_count(&rg_rules, {i}, plen); rgx_stat({stat});",
            f"    return {verdict};",
            "}",
        ]
    return out


# -- the rules' opcodes (ir/instrs.py) -----------------------------------------------------


@EBPF.register(I.RuleRead)
def rule_read(ins: I.RuleRead, lc: LayerC, cx: XContext) -> str:
    # the layer parsed: its stamp and the rules' copies (program.py's RGX_RULES_<layer>)
    return f"if (err_{lc.name} == 0) RGX_RULES_{lc.name}();"


@EBPF.register(I.RuleKey)
def rule_key(ins: I.RuleKey, lc: LayerC, cx: XContext) -> str:
    # only for stateful rules and drop-flow, which check() refuses
    raise Unlowerable(f"layer {lc.name}: rules that keep their decision in an instance", ins.src)


@EBPF.register(I.ApplyRules)
def apply_rules(ins: I.ApplyRules, lc: None, cx: XContext) -> list[str]:
    """The rules at rgx_done (program.py): evaluate's lines."""
    rs = ins.desc.rules
    return evaluate(rs) if rs is not None else []
