"""The C of a rule set compiled into a stack (docs/rules.md).

The rules run once per packet, after the last layer (at the per-packet function's single exit,
R_done), on what the packet's layers parsed: each layer a rule names has a flag `rs_L`, set
when its header parsed in this packet, and a comparison that reads a field of a layer the
packet did not reach is false.

First match wins. Exact constraints (`FIELD == CONST`, `FIELD == a.b.c.d/n`, `FIELD & M ==
V`, in the top-level conjunction of a match) key the rule: rules with the same key fields
form a group, compiled to nested `switch`es on the key values (the C compiler turns them into
jump tables or binary searches), so the cost grows with the logarithm of the number of exact
rules; their other conditions are checked only for the rules the switch reaches. Rules
without an exact key (ranges, inequalities...) are checked one by one after, in order, each
only while no earlier rule matched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rubikgen.expr.ast import Binary, Bool, Expr, Name, Num, Unary, walk
from rubikgen.ir.lower_rules import instance_layers
from rubikgen.ir.nodes import Program
from rubikgen.ir.rules import COMPARISONS, FieldRef, LayerRef, Lit, RuleIR, RuleSet

from .layer_c import c_comment, c_string

if TYPE_CHECKING:
    from .layer_c import LayerC

VERDICT = {"drop": "RG_DROP", "drop-flow": "RG_DROP_FLOW"}
# reject: the verdict by its flags (rg_api.h, rg_reject.h RG_REJECT_F_*)
REJECT = ("RG_REJECT", "RG_REJECT_BOTH", "RG_REJECT_ADMIN", "RG_REJECT_MAX")
# actions with C to run (pass and count only count)
ACTING = ("drop", "drop-flow", "rewrite", "reject", "clamp-mss")


def verdict_of(r: RuleIR) -> str | None:
    """The verdict a rule gives (C), None for the actions that give none."""
    if r.action == "reject":
        return REJECT[r.reject_flags & 3]
    return VERDICT.get(r.action)


@dataclass
class Keyed:
    """A rule in an exact-match group: its key values and the rest of its conjunction."""

    rule: RuleIR
    values: tuple[int, ...]
    rest: list[Expr]


@dataclass
class Group:
    keys: tuple[tuple[FieldRef, int | None], ...]  # (field, mask or None)
    members: list[Keyed] = field(default_factory=list)


@dataclass
class Ranged:
    """A rule in a range group: the interval its bounds on the group's field allow."""

    rule: RuleIR
    lo: int
    hi: int
    rest: list[Expr]


@dataclass
class RangeGroup:
    fref: FieldRef
    members: list[Ranged] = field(default_factory=list)


MAX_RANGE_FANOUT = 16  # (interval, rule) pairs per rule before a range group stays linear


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "&&":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


_SWAP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _field_op_const(r: RuleIR, e: Binary) -> tuple[FieldRef, str, int] | None:
    """`FIELD op CONST` or `CONST op FIELD` as (field, op with the field on the left, const)."""
    a, b, op = e.left, e.right, e.op
    if isinstance(a, Num) and isinstance(b, Name):
        a, b, op = b, a, _SWAP[op]
    if not (isinstance(a, Name) and isinstance(b, Num)):
        return None
    f = r.ref(a)
    return (f, op, b.value) if isinstance(f, FieldRef) else None


def _empty(file: str) -> RuleSet:
    return RuleSet(file, hashlib.sha256(b"").hexdigest(), [])


class RulesC:
    """The C of a program's rules (Program.rules): what its rule opcodes render (the
    renderers of backend/c/rules.py call the methods named after them) and what is rendered
    once per stack (context fields, tables, support functions)."""

    def __init__(self, prog: Program, S: str, layers: dict[str, LayerC]):
        assert prog.rules is not None
        desc = prog.rules
        # a reloadable build started without a set: none until a reload
        rs = desc.rules if desc.rules is not None else _empty("(none)")
        self.rs = rs
        self.S = S
        self.lcs = layers
        self.n = len(rs.rules)
        used = desc.layers()
        self.fields: dict[str, list[FieldRef]] = desc.fields()  # per layer: the fields rules read
        self.used = [n for n in layers if n in used]
        # stateful rules and drop-flow act on the instance of the deepest layer with one
        self.inst = instance_layers(prog, desc)
        self.groups, self.linear = self._split()
        self.ranges = self._ranges()
        self.mirror = self._mirrors()  # stateful rewrites: what replies get

    def _mirrors(self) -> dict[tuple[str, str], tuple[str, str]]:
        """(layer, field) pairs the selectors' sides swap: ip.saddr <-> ip.daddr, tcp.sport <->
        tcp.dport. A stateful rewrite of F gives the replies' mirror of F the same value: the
        whole connection is rewritten consistently (a port moved both ways, like
        tcprewrite --portmap)."""
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for ly in self.inst:
            d = self.lcs[ly].d
            for a, p in zip(d.key_a, d.key_p or [], strict=False):
                if not (isinstance(a.expr, Name) and isinstance(p.expr, Name)):
                    continue
                ra, rp = a.expr.ref, p.expr.ref
                fa = ((ra.owner if ra and ra.owner else ly), a.expr.parts[-1])
                fp = ((rp.owner if rp and rp.owner else ly), p.expr.parts[-1])
                out[fa], out[fp] = fp, fa
        return out

    # -- the rule opcodes (backend/c/rules.py) and the per-packet code (cgen.py) --------------
    def has_slot(self, layer: str) -> bool:
        return layer in self.inst

    def locals(self) -> str:
        out = ["    /* rules: selector keys built in this packet */"]
        out += [f"    uint8_t kb_{n} RG_MAYBE_UNUSED = 0;" for n in self.inst]
        return "\n".join(out)

    def on_parsed(self, layer: str, fields: tuple[FieldRef, ...]) -> str:
        """RuleRead: the header parsed, the rules may read it; the fields they read, copied
        (big-endian values of byte fields)."""
        # in the context, not locals: nothing held in registers across the whole function;
        # the packet number stamps the layer as parsed in this packet (no per-packet reset)
        out = [f"if (err_{layer} == 0) {{ /* rules */", f"    ctx->rs_{layer} = ctx->pkt_no;"]
        for f in fields:
            n = f.width // 8
            if f.virtual:  # checksum_bad: verified now, while the header's bytes are there
                i = self.lcs[layer].index
                out.append(f"    ctx->rf_{layer}_{f.field} = {self.S}__rules_csum_bad(ctx, {i}u);")
                continue
            if f.width > 64:  # an IPv6 address: its bytes (compared by pred)
                out.append(f"    memcpy(ctx->rf_{layer}_{f.field}, h_{layer}.{f.field}.ptr, {n}u);")
                continue
            load = {1: "rg_load_u8({p})", 2: "rg_load_be16({p})", 4: "rg_load_be32({p})",
                    8: "rg_load_be64({p})"}.get(n, "rg_load_ben({p}, " + str(n) + ")")  # fmt: skip
            v = (f"(uint64_t)h_{layer}.{f.field}" if f.kind == "num"
                 else "(uint64_t)" + load.format(p=f"h_{layer}.{f.field}.ptr"))  # fmt: skip
            out.append(f"    ctx->rf_{layer}_{f.field} = {v};")
        out.append("}")
        return "\n".join(out)

    def on_key(self, layer: str) -> str:
        """RuleKey: the layer's key is built in this packet."""
        return f"kb_{layer} = 1; /* rules: the key of this packet */"

    def on_close(self, layer: str) -> str:
        """In L_close: an instance a stateful rule took lingers in the rules' table of the
        layer (its keys, the rule), so that packets after its end (a duplicate last ACK, a
        late retransmission) still get the rule's action until the layer's timeout."""
        if layer not in self.inst:
            return ""
        lc = self.lcs[layer]
        rev = "in->fi.key_p" if lc.bidir else "NULL"
        return "\n".join([
            "    if (in->rule__) { /* rules: the decision outlives the instance */",
            f"        rg_flow_set_time(ctx->rl_{layer}, ctx->clock.now);",
            "        int d_ = 0; /* a key seen before (a reused 4-tuple): its record is updated */",
            f"        struct {self.S}__rl_rec *p_ = (struct {self.S}__rl_rec *)rg_flow_lookup_n("
            f"ctx->rl_{layer}, in->fi.key_a, {lc.key_len}, &d_);",
            f"        if (p_ == NULL) p_ = (struct {self.S}__rl_rec *)rg_flow_create_n("
            f"ctx->rl_{layer}, in->fi.key_a, {rev}, {lc.key_len});",
            "        /* bit 31 (the direction that matched) is relative to the stored key */",
            "        if (p_) p_->rule = in->rule__ ^ (d_ ? 0x80000000u : 0u);",
            "    }",
        ])  # fmt: skip

    # -- exact-match groups -----------------------------------------------------------------
    def _key_of(self, r: RuleIR, e: Expr) -> tuple[FieldRef, int | None, int] | None:
        """(field, mask, value) when e is an exact constraint on one field."""
        if not isinstance(e, Binary) or e.op != "==":
            return None
        for a, b in ((e.left, e.right), (e.right, e.left)):
            mask: int | None = None
            if isinstance(a, Binary) and a.op == "&" and isinstance(a.right, Num):
                mask, a = a.right.value, a.left
            if not isinstance(a, Name):
                continue
            fa = r.ref(a)
            if not isinstance(fa, FieldRef) or fa.width > 64:  # IPv6 addresses: pred tests them
                continue
            if isinstance(b, Num):
                return fa, mask, b.value & (mask if mask is not None else ~0)
            if isinstance(b, Name) and mask is None:
                lb = r.ref(b)
                if isinstance(lb, Lit):
                    m = None if lb.prefix is None else lb.mask
                    return fa, m, lb.value & (m if m is not None else ~0)
        return None

    def _split(self) -> tuple[list[Group], list[RuleIR]]:
        groups: dict[tuple[tuple[FieldRef, int | None], ...], Group] = {}
        linear: list[RuleIR] = []
        for r in self.rs.rules:
            keys: dict[tuple[FieldRef, int | None], int] = {}
            rest: list[Expr] = []
            for c in _conjuncts(r.expr):
                k = self._key_of(r, c)
                if k is not None and (k[0], k[1]) not in keys:
                    keys[(k[0], k[1])] = k[2]
                else:
                    rest.append(c)
            if not keys:
                linear.append(r)
                continue
            sig = tuple(sorted(keys, key=lambda x: (x[0].layer, x[0].field, x[1] or 0)))
            g = groups.setdefault(sig, Group(sig))
            g.members.append(Keyed(r, tuple(keys[s] for s in sig), rest))
        return list(groups.values()), linear

    def _bound(self, r: RuleIR, e: Expr) -> tuple[FieldRef, int, int] | None:
        """(field, lo, hi) when e bounds one numeric field by a constant."""
        if not isinstance(e, Binary) or e.op not in ("<", "<=", ">", ">="):
            return None
        fc = _field_op_const(r, e)
        if fc is None or fc[0].width > 64:
            return None
        f, op, c = fc
        top = (1 << f.width) - 1
        lo, hi = {"<": (0, c - 1), "<=": (0, c), ">": (c + 1, top), ">=": (c, top)}[op]
        return f, max(0, lo), min(hi, top)

    def _ranges(self) -> list[RangeGroup]:
        """Linear rules that bound a field (`F >= a && F <= b`) grouped by that field: one
        binary search over the groups' interval boundaries instead of a test per rule."""
        groups: dict[FieldRef, RangeGroup] = {}
        for r in list(self.linear):
            cs = _conjuncts(r.expr)
            bounds = [(c, self._bound(r, c)) for c in cs]
            first = next((b[0] for _c, b in bounds if b is not None), None)
            if first is None:
                continue
            lo, hi, rest = 0, (1 << first.width) - 1, []
            for c, b in bounds:
                if b is not None and b[0] == first:
                    lo, hi = max(lo, b[1]), min(hi, b[2])
                else:
                    rest.append(c)
            groups.setdefault(first, RangeGroup(first)).members.append(Ranged(r, lo, hi, rest))
        out = []
        for g in groups.values():
            if len(g.members) < 4:  # a few tests in a row cost less than a search
                continue
            if sum(len(m) for m in self._intervals(g)[1]) > MAX_RANGE_FANOUT * len(g.members):
                continue  # heavily nested ranges: the table would grow quadratically
            out.append(g)
            taken = {id(m.rule) for m in g.members}
            self.linear = [r for r in self.linear if id(r) not in taken]
        return out

    @staticmethod
    def _intervals(g: RangeGroup) -> tuple[list[int], list[list[Ranged]]]:
        """Boundaries p_0 < p_1 < ... (interval k: [p_k, p_k+1 - 1], the last open) and the
        members covering each interval, in rule order."""
        pts = sorted({0} | {m.lo for m in g.members} | {m.hi + 1 for m in g.members})
        cover: list[list[Ranged]] = []
        for k, p in enumerate(pts):
            if k + 1 == len(pts):  # past every member's hi: nobody's
                cover.append([])
                break
            end = pts[k + 1] - 1
            cover.append([m for m in g.members if m.lo <= p and end <= m.hi])
        return pts, cover

    def _range_group(self, gi: int, g: RangeGroup, ind: str) -> list[str]:
        pts, cover = self._intervals(g)
        f = g.fref
        r0 = g.members[0].rule
        v = self._val(r0, _name_of(r0, f))
        out = [f"{ind}/* range group {gi}: {f.dotted} ({len(g.members)} rules, "
               f"{len(pts)} intervals) */"]  # fmt: skip
        out.append(f"{ind}if (rs_{f.layer}) {{")
        out.append(f"{ind}    static const uint64_t pts_[] = {{"
                   + ", ".join(f"UINT64_C({p})" for p in pts) + "};")  # fmt: skip
        out.append(f"{ind}    const uint64_t v_ = {v};")
        out.append(f"{ind}    unsigned lo_ = 0, hi_ = {len(pts)}u; /* the last p_k <= v_ */")
        out.append(f"{ind}    while (hi_ - lo_ > 1u) {{")
        out.append(f"{ind}        const unsigned mid_ = (lo_ + hi_) / 2u;")
        out.append(f"{ind}        if (pts_[mid_] <= v_) lo_ = mid_; else hi_ = mid_;")
        out.append(f"{ind}    }}")
        out.append(f"{ind}    switch (lo_) {{")
        for k, ms in enumerate(cover):
            if not ms:
                continue
            out.append(f"{ind}    case {k}u:")
            for m in ms:
                r = m.rule
                cond = " && ".join(self.pred(r, c) for c in m.rest) or "1"
                out.append(f"{ind}        /* {c_comment(self._where(r))} */")
                out.append(f"{ind}        if (best_ > {r.index}u && {cond}) best_ = {r.index}u;")
            out.append(f"{ind}        break;")
        out.append(f"{ind}    default: break;")
        out.append(f"{ind}    }}")
        out.append(f"{ind}}}")
        return out

    # -- expressions ------------------------------------------------------------------------
    def _val(self, r: RuleIR, e: Expr) -> str:
        if isinstance(e, Num):
            return f"UINT64_C({e.value})"
        if isinstance(e, Bool):
            return "UINT64_C(1)" if e.value else "UINT64_C(0)"
        if isinstance(e, Name):
            x = r.ref(e)
            if isinstance(x, Lit):
                return f"UINT64_C({x.value})"
            if isinstance(x, LayerRef):
                return f"(uint64_t)rs_{x.layer}"
            return f"ctx->rf_{x.layer}_{x.field}"
        if isinstance(e, Unary):
            a = self._val(r, e.operand)
            return {"!": f"(uint64_t)!({a})", "~": f"(~{a})", "-": f"(UINT64_C(0) - {a})"}[e.op]
        assert isinstance(e, Binary)
        a, b = self._val(r, e.left), self._val(r, e.right)
        op = e.op
        if op in ("/", "%"):  # no trap on zero: x / 0 == 0, like the specs' C
            return f"(({b}) ? ({a}) {op} ({b}) : UINT64_C(0))"
        if op in ("<<", ">>"):
            return f"(({b}) < 64 ? ({a}) {op} ({b}) : UINT64_C(0))"
        if op in COMPARISONS:
            return f"(uint64_t)({a} {op} {b})"
        if op in ("&&", "||"):
            return f"(uint64_t)(({a}) != 0 {op} ({b}) != 0)"
        return f"({a} {op} {b})"

    def _layers(self, r: RuleIR, e: Expr) -> list[str]:
        out: list[str] = []
        for n in walk(e):
            if isinstance(n, Name):
                x = r.ref(n)
                if isinstance(x, FieldRef | LayerRef) and x.layer not in out:
                    out.append(x.layer)
        return out

    def pred(self, r: RuleIR, e: Expr) -> str:
        """C truth of e; a leaf reading a layer the packet did not parse is false."""
        if isinstance(e, Binary) and e.op in ("&&", "||"):
            return f"({self.pred(r, e.left)} {e.op} {self.pred(r, e.right)})"
        if isinstance(e, Unary) and e.op == "!":
            return f"!{self.pred(r, e.operand)}"
        if isinstance(e, Bool):
            return "1" if e.value else "0"
        if isinstance(e, Name) and isinstance(r.ref(e), LayerRef):
            return f"rs_{r.ref(e).layer}"  # type: ignore[union-attr]
        guards = [f"rs_{n}" for n in self._layers(r, e)]
        if isinstance(e, Binary) and e.op in ("==", "!="):
            for a, b in ((e.left, e.right), (e.right, e.left)):
                lit = r.ref(b) if isinstance(b, Name) else None
                fa = r.ref(a) if isinstance(a, Name) else None
                if isinstance(lit, Lit) and lit.bits == 128 and isinstance(fa, FieldRef):
                    core = self._eq128(self._bytes(fa), lit)  # FIELD == IPv6 address or prefix
                    core = core if e.op == "==" else f"!{core}"
                    return "(" + " && ".join([*guards, core]) + ")"
                if isinstance(lit, Lit) and lit.prefix is not None:  # FIELD == a.b.c.d/n
                    core = f"(({self._val(r, a)} & {lit.mask:#x}u) {e.op} {lit.value:#x}u)"
                    return "(" + " && ".join([*guards, core]) + ")"
        if isinstance(e, Binary) and e.op in COMPARISONS:
            k = self._fold(r, e)
            if k is not None:  # decided by the field's width (the C compiler would warn)
                return "(" + " && ".join([*guards, k]) + ")"
            core = f"({self._val(r, e.left)} {e.op} {self._val(r, e.right)})"
        else:
            core = f"({self._val(r, e)} != 0)"
        return "(" + " && ".join([*guards, core]) + ")"

    def _bytes(self, f: FieldRef) -> str:
        """The C pointer to the copy of a 16-byte field (an IPv6 address)."""
        return f"ctx->rf_{f.layer}_{f.field}"

    @staticmethod
    def _eq128(p: str, lit: Lit) -> str:
        """16 bytes at p against an IPv6 address or prefix: two 64-bit halves, masked."""
        m, v = lit.mask, lit.value & lit.mask
        parts = []
        for k, sh in ((0, 64), (8, 0)):
            mk, vk = (m >> sh) & (2**64 - 1), (v >> sh) & (2**64 - 1)
            if mk == 0:
                continue
            load = f"rg_load_be64({p}{' + 8' if k else ''})"
            x = load if mk == 2**64 - 1 else f"({load} & UINT64_C({mk:#x}))"
            parts.append(f"{x} == UINT64_C({vk:#x})")
        return "(" + (" && ".join(parts) or "1") + ")"

    def _fold(self, r: RuleIR, e: Binary) -> str | None:
        """ "1"/"0" when `FIELD op CONST` has the same value for every value of the field."""
        fc = _field_op_const(r, e)
        if fc is None:
            return None
        f, op, c = fc
        hi = (1 << f.width) - 1
        ops = {"==": lambda x: x == c, "!=": lambda x: x != c, "<": lambda x: x < c,
               "<=": lambda x: x <= c, ">": lambda x: x > c, ">=": lambda x: x >= c}  # fmt: skip
        lo_v, hi_v = ops[op](0), ops[op](hi)
        if op in ("==", "!=") and c <= hi:
            return None
        # monotonic in x: the same truth at 0 and at the largest value is the same everywhere
        return ("1" if lo_v else "0") if lo_v == hi_v else None

    def _where(self, r: RuleIR) -> str:
        return f"{self.rs.file}:{r.line} rule {r.name}: {r.match_text}"

    def inst_lookup(self) -> list[str]:
        """The deepest instance of the packet (or one that ended in it): its recorded rule
        (rec_), where it keeps it (slot_), the packet's direction (pdir_), its flow (fi_)."""
        out = ["        uint32_t *slot_ = NULL, rec_ = 0, pdir_ = 0;",
               "        rg_flow_info *fi_ RG_MAYBE_UNUSED = NULL;"]  # fmt: skip
        for ly in self.inst:  # deepest first: the first instance (or ended one) decides
            lc = self.lcs[ly]
            tmo = lc.timeout_ns or 60_000_000_000
            out += [
                f"        if (ctx->rl_{ly}->nlive) rg_flow_expire(ctx->rl_{ly}, ctx->clock.now, "
                f"UINT64_C({tmo}));",
                f"        if (!slot_ && !rec_ && has_inst_{ly}) {{",
                f"            slot_ = &inst_{ly}->rule__;",
                f"            fi_ = &inst_{ly}->fi;",
                f"            pdir_ = (uint32_t)({lc.dir_expr()});",
                "            rec_ = *slot_;",
                f"        }} else if (!slot_ && !rec_ && kb_{ly} && ctx->rl_{ly}->nlive) {{",
                "            int d_ = 0;",
                f"            rg_flow_set_time(ctx->rl_{ly}, ctx->clock.now);",
                f"            struct {self.S}__rl_rec *p_ = (struct {self.S}__rl_rec *)"
                f"rg_flow_lookup_n(ctx->rl_{ly}, kf_{ly}, {lc.key_len}, &d_);",
                "            if (p_) { /* an instance a stateful rule took, ended */",
                "                rec_ = p_->rule;",
                "                pdir_ = d_ != 0;",
                "            }",
                "        }",
            ]
        return out

    # -- the hook ---------------------------------------------------------------------------
    def hook(self) -> str:
        n = self.n
        if n == 0:
            return f"    /* rules ({c_comment(self.rs.file)}): none */"
        out = [f"    /* rules ({c_comment(self.rs.file)}): first match wins; {n} = none */"]
        out.append("    {")
        out += [f"        const int rs_{ly} = ctx->rs_{ly} == ctx->pkt_no;" for ly in self.used]
        out.append(f"        unsigned best_ = {n}u;")
        slot_lines: list[str] = []
        if self.inst:
            out += self.inst_lookup()
            # bit 31 of a record: the direction of the packet that matched (replies: mirrors)
            out.append("        const int rev_ RG_MAYBE_UNUSED = rec_ && (rec_ >> 31) != pdir_;")
            out.append(f"        if (rec_ != 0 && (rec_ & 0x7fffffffu) <= {n}u) {{")
            out.append(
                "            best_ = (rec_ & 0x7fffffffu) - 1u; /* a stateful rule took it */"
            )
            out.append("        } else {")
            ind = "            "
            slot_lines = [
                f"{ind}if (slot_ && best_ < {n}u && rules_stateful_[best_]) {{",
                f"{ind}    *slot_ = (best_ + 1u) | (pdir_ << 31);",
                f"{ind}}}",
            ]
        else:
            ind = "        "
        for gi, g in enumerate(self.groups):
            out += self._group(gi, g, ind)
        for gi, rg in enumerate(self.ranges):
            out += self._range_group(gi, rg, ind)
        for r in self.rs.rules:
            if r in self.linear:
                out.append(f"{ind}/* {c_comment(self._where(r))} */")
                out.append(f"{ind}if (best_ > {r.index}u && {self.pred(r, r.expr)}) "
                           f"best_ = {r.index}u;")  # fmt: skip
        out += slot_lines
        if self.inst:
            out.append("        }")
        out.append(f"        if (best_ < {n}u) {{")
        out.append("            ctx->rule_hits[best_]++;")
        acts = [r for r in self.rs.rules if r.action in ACTING]
        if acts:
            out.append("            switch (best_) {")
            for r in acts:
                out.append(f"            case {r.index}u: /* {c_comment(self._where(r))} */")
                out += ["                " + x for x in self._action(r)]
                out.append("                break;")
            out.append("            default: break; /* pass, count */")
            out.append("            }")
        out.append("        }")
        out.append("    }")
        return "\n".join(out)

    def _set(self, f: FieldRef, value: int) -> str:
        """A setter call (setters.py: numbers by value, byte fields by their bytes)."""
        fn = f"{self.S}_set_{f.layer}_{f.field}"
        if f.kind == "num":
            return f"{fn}(ctx, UINT64_C({value}));"
        n = f.width // 8
        b = ", ".join(f"{x:#04x}" for x in value.to_bytes(n, "big"))
        return f"{{ static const uint8_t v_[{n}] = {{{b}}}; {fn}(ctx, v_); }}"

    def _action(self, r: RuleIR) -> list[str]:
        verdict = verdict_of(r)
        if verdict is not None:
            fi = "fi_" if self.inst else "NULL"
            return [f"rg_verdict_give(&ctx->verdict, {fi}, {verdict});"]
        if r.action == "clamp-mss":
            # every TCP layer of the packet whose header is in the frame (rg_tcp_clamp_mss:
            # SYN and SYN-ACK only, a larger MSS only; checksums fixed up, RFC 1624)
            return [f"{self.S}__rules_clamp_mss(ctx, {self.lcs[ly].index}u, {r.clamp_mss}u); "
                    f"/* {ly} */" for ly in r.clamp_layers if ly in self.lcs]  # fmt: skip
        fwd = [self._set(f, v) for f, v in r.rewrite]
        if not (r.stateful and self.inst):
            return fwd
        back = []  # a reply: the mirror of each field (its other side) gets the value
        for f, v in r.rewrite:
            m = self.mirror.get((f.layer, f.field))
            if m is None:
                back.append(self._set(f, v))
            else:
                mf = FieldRef(m[0], m[1], f.kind, f.width)
                back.append(self._set(mf, v) + f" /* mirror of {f.dotted} */")
        return ["if (!rev_) {", *["    " + x for x in fwd], "} else {",
                *["    " + x for x in back], "}"]  # fmt: skip

    def _group(self, gi: int, g: Group, ind: str) -> list[str]:
        layers: list[str] = []
        for f, _m in g.keys:
            if f.layer not in layers:
                layers.append(f.layer)
        names = ", ".join(f.dotted + (f" & {m:#x}" if m is not None else "") for f, m in g.keys)
        out = [f"{ind}/* exact group {gi}: {names} ({len(g.members)} rules) */"]
        out.append(f"{ind}if ({' && '.join(f'rs_{x}' for x in layers)}) {{")
        r0 = g.members[0].rule
        for k, (f, m) in enumerate(g.keys):
            v = self._val(r0, _name_of(r0, f))
            if m is not None:
                v = f"({v} & UINT64_C({m:#x}))"
            out.append(f"{ind}    const uint64_t k{k}_ = {v};")
        out += self._switch(g, 0, g.members, ind + "    ")
        out.append(f"{ind}}}")
        return out

    def _switch(self, g: Group, k: int, members: list[Keyed], ind: str) -> list[str]:
        if k == len(g.keys):
            out = []
            for m in members:  # in rule order: the first whose other conditions hold
                r = m.rule
                cond = " && ".join(self.pred(r, c) for c in m.rest) or "1"
                out.append(f"{ind}/* {c_comment(self._where(r))} */")
                out.append(f"{ind}if (best_ > {r.index}u && {cond}) best_ = {r.index}u;")
            return out
        by: dict[int, list[Keyed]] = {}
        for m in members:
            by.setdefault(m.values[k], []).append(m)
        out = [f"{ind}switch (k{k}_) {{"]
        for v, ms in by.items():
            out.append(f"{ind}case UINT64_C({v:#x}):")
            out += self._switch(g, k + 1, ms, ind + "    ")
            out.append(f"{ind}    break;")
        out.append(f"{ind}default: break;")
        out.append(f"{ind}}}")
        return out

    # -- context, descriptors ---------------------------------------------------------------
    def ctx_fields(self) -> str:
        out = [f"    uint64_t rule_hits[{max(1, self.n)}]; /* rules: hits per rule */"]
        out += [f"    uint64_t rs_{n}; /* rules: the packet in which layer {n} last parsed */"
                for n in self.used]  # fmt: skip
        out += [f"    uint64_t rf_{f.layer}_{f.field}; /* rules: its value then */"
                for fs in self.fields.values() for f in fs if f.width <= 64]  # fmt: skip
        out += [f"    uint8_t rf_{f.layer}_{f.field}[{f.width // 8}]; /* rules: its bytes then */"
                for fs in self.fields.values() for f in fs if f.width > 64]  # fmt: skip
        out += [f"    rg_flow *rl_{n}; /* rules: ended instances stateful rules took */"
                for n in self.inst]  # fmt: skip
        return "\n".join(out)

    def ctx_new(self) -> str:
        out = [
            f"    ctx->stats->nrules = {self.n}u;",
            f"    ctx->stats->rule_name = {self.S}_rule_names;",
            f"    ctx->stats->rule_action = {self.S}_rule_actions;",
            "    ctx->stats->rule_hits = ctx->rule_hits;",
        ]
        return "\n".join(out + self.linger_new())

    def linger_new(self) -> list[str]:
        """Context creation: the linger table of each layer whose ended instances stateful
        rules keep (compiled-in and reloadable sets alike)."""
        out = []
        for n in self.inst:
            lc = self.lcs[n]
            out += [
                "    {",
                "        rg_flow_cfg rc_;",
                "        memset(&rc_, 0, sizeof rc_);",
                f"        rc_.key_len = {lc.key_len};",
                f"        rc_.payload_size = sizeof(struct {self.S}__rl_rec);",
                "        rc_.cap = 1u << 16; /* the oldest are evicted beyond */",
                f"        rc_.bidir = {1 if lc.bidir else 0};",
                f"        rc_.seed = seed + 101u + {lc.index};",
                f"        ctx->rl_{n} = rg_flow_new(&rc_);",
                f"        if (ctx->rl_{n} == NULL) goto fail;",
                "    }",
            ]
        return out

    def ctx_free(self) -> str:
        return "\n".join(f"    if (ctx->rl_{n}) rg_flow_free(ctx->rl_{n});" for n in self.inst)

    def csum_support(self) -> str:
        """`S__rules_csum_bad(ctx, layer)`: 1 when a checksum of the layer's header, parsed in
        this packet, does not verify (rg_csum_verify 0; not verifiable counts as good, like
        tshark's unverified status)."""
        S = self.S
        return "\n".join([
            f"struct {S}_ctx;",
            f"static void {S}__csum_pkt(struct {S}_ctx *ctx, rg_csum_pkt *c); /* below */",
            f"static RG_MAYBE_UNUSED uint64_t {S}__rules_csum_bad(void *vctx, unsigned layer)",
            "{",
            "    rg_csum_pkt c;",
            f"    {S}__csum_pkt((struct {S}_ctx *)vctx, &c);",
            "    for (unsigned i = 0; i < c.ndesc; i++)",
            "        if (c.desc[i].layer == layer && rg_csum_verify(&c, &c.desc[i]) == 0) return 1;",
            "    return 0;",
            "}",
        ])  # fmt: skip

    def reads_checksums(self) -> bool:
        """A rule reads `LAYER.checksum_bad` (verified from the header's span)."""
        return any(f.virtual for fs in self.fields.values() for f in fs)

    def clamp_support(self) -> str:
        """`S__rules_clamp_mss(ctx, layer, mss)`: rg_tcp_clamp_mss on the current packet."""
        S = self.S
        out = [] if self.reads_checksums() else [
            f"struct {S}_ctx;",
            f"static void {S}__csum_pkt(struct {S}_ctx *ctx, rg_csum_pkt *c); /* below */",
        ]  # fmt: skip
        return "\n".join([
            *out,
            f"static RG_MAYBE_UNUSED void {S}__rules_clamp_mss(void *vctx, unsigned layer, "
            "unsigned mss)",
            "{",
            "    rg_csum_pkt c;",
            f"    {S}__csum_pkt((struct {S}_ctx *)vctx, &c);",
            "    (void)rg_tcp_clamp_mss(&c, layer, (uint16_t)mss);",
            "}",
        ])  # fmt: skip

    def clamps(self) -> bool:
        """A rule clamps the MSS (writes the frame through the spans)."""
        return any(r.action == "clamp-mss" for r in self.rs.rules)

    def support(self) -> str:
        virt = self.reads_checksums()
        csum = self.csum_support() + "\n" if virt else ""
        csum += self.clamp_support() + "\n" if self.clamps() else ""
        rec = csum + (f"/* an ended instance a stateful rule took (rules' linger table) */\n"
               f"struct {self.S}__rl_rec {{\n    uint32_t rule; /* 1 + rule | dir << 31 */\n}};\n")  # fmt: skip
        return rec + self._support()

    def _support(self) -> str:
        rules = self.rs.rules
        names = ", ".join(c_string(r.name) for r in rules) or "NULL"  # no empty initialisers
        acts = ", ".join(c_string(r.action) for r in rules) or "NULL"
        st = ", ".join("1" if r.stateful else "0" for r in rules) or "0"
        return "\n".join([
            f"/* rules compiled from {c_comment(self.rs.file)} (sha256 {self.rs.digest[:16]}) */",
            f"static const char *const {self.S}_rule_names[] = {{{names}}};",
            f"static const char *const {self.S}_rule_actions[] = {{{acts}}};",
            f"static const uint8_t rules_stateful_[] RG_MAYBE_UNUSED = {{{st}}};",
        ])  # fmt: skip


def _name_of(r: RuleIR, f: FieldRef) -> Name:
    for n in walk(r.expr):
        if isinstance(n, Name) and r.ref(n) == f:
            return n
    raise ValueError(f"rule {r.name}: no reference to {f.dotted}")  # pragma: no cover
