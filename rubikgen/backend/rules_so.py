"""Rule sets that can be swapped while the stack runs (`--rules-reload`; docs/rules.md,
runtime-c/include/rg/rg_rules.h).

Two halves:

- `RulesHost`, the stack's side, in place of `RulesC`: each layer's header, when it parses,
  is stamped with the packet number and its fixed part copied into the context (what any rule
  set may read); instances keep a decision slot; at the per-packet function's exit the
  instance lookup of stateful rules runs as with compiled-in rules, then the active set is
  called through one pointer (rg_rules_run).
- `RulesUnit`, a rule set: `match` and `act` over an rg_rules_view, the first-match code of
  `RulesC` reading fields from the header copies and writing through the stack's setter
  table. The same text is compiled into the stack (the set a run starts with) or into a
  shared object (`rubikgen ctl SOCKET rules reload R.yaml`).

The two meet through the *interface*: layer indexes, the readable fields' places, the setter
tables. Its hash, the fingerprint, is in both: a binary refuses a set made for another stack.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubikgen.expr.ast import Expr, Name
from rubikgen.ir.nodes import Program
from rubikgen.ir.rules import RELOAD_COPY_BYTES, FieldRef, Lit, RuleIR

from .layer_c import c_comment, c_string
from .rules_c import ACTING, RulesC, verdict_of

if TYPE_CHECKING:
    from .layer_c import LayerC

ABI = 1
MAX_COPY = RELOAD_COPY_BYTES  # bytes of a header's fixed part copied (fields beyond: unreadable)


@dataclass(frozen=True)
class Place:
    layer: int  # layer index
    bit: int
    width: int
    kind: str  # num | bytes
    little: bool


class Interface:
    """What rule sets may read and write in a stack, and its fingerprint."""

    def __init__(self, S: str, layers: dict[str, LayerC]) -> None:
        self.S = S
        self.lcs = layers
        self.places: dict[tuple[str, str], Place] = {}
        self.copy: dict[str, int] = {}  # layer -> bytes of its header copied
        self.set_num: list[tuple[str, str]] = []
        self.set_bytes: list[tuple[str, str]] = []
        for name, lc in layers.items():
            end = 0
            for fname, bit in lc.d.fixed_bits.items():
                f = lc.d.fields[fname]
                w = (f.width or 64) if f.kind == "num" else 8 * (f.size or 0)
                if w == 0 or bit + w > 8 * MAX_COPY:
                    continue
                little = f.kind == "num" and f.order == "little" and w % 8 == 0 and bit % 8 == 0
                self.places[(name, fname)] = Place(lc.index, bit, w, f.kind, little)
                end = max(end, (bit + w + 7) // 8)
                # the setters' filter (setters.py): not a tag, not of variable size
                if f.kind == "num" and f.const is None:
                    self.set_num.append((name, fname))
                elif f.kind != "num" and f.size is not None:
                    self.set_bytes.append((name, fname))
            self.copy[name] = end

    def fingerprint(self) -> str:
        desc = {
            "abi": ABI,
            "stack": self.S,
            "layers": [
                [lc.index, n, self.copy[n], lc.has_instance, lc.bidir] for n, lc in self.lcs.items()
            ],
            "places": sorted(
                [ly, f, p.layer, p.bit, p.width, p.kind, p.little]
                for (ly, f), p in self.places.items()
            ),
            "set_num": self.set_num,
            "set_bytes": self.set_bytes,
        }
        return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


_LOADS = {8: "rg_load_u8", 16: "rg_load_be16", 24: "rg_load_be24", 32: "rg_load_be32",
          48: "rg_load_be48", 64: "rg_load_be64"}  # fmt: skip
_LOADS_LE = {16: "rg_load_le16", 24: "rg_load_le24", 32: "rg_load_le32", 48: "rg_load_le48"}


def _load(pl: Place) -> str:
    """C reading a field from its header copy: one load for whole bytes (rg_pkt.h), the bit
    extraction of rg_rules_get otherwise."""
    at = f"v->hdr[{pl.layer}] + {pl.bit // 8}u"
    table = _LOADS_LE if pl.little else _LOADS
    if pl.bit % 8 == 0 and pl.width in table:
        return f"(uint64_t){table[pl.width]}({at})"
    return f"rg_rules_get(v->hdr[{pl.layer}], {pl.bit}u, {pl.width}u, {int(pl.little)})"


class RulesUnit(RulesC):
    """One rule set as a unit of C over rg_rules_view (rg_rules.h)."""

    def __init__(self, prog: Program, S: str, layers: dict[str, LayerC]) -> None:
        super().__init__(prog, S, layers)
        self.itf = Interface(S, layers)

    def unreadable(self) -> list[tuple[RuleIR, FieldRef]]:
        """Fields the rules read that a reloadable set cannot (not at a fixed place)."""
        return [
            (r, v)
            for r in self.rs.rules
            for v in r.refs.values()
            if isinstance(v, FieldRef)
            and (
                self.lcs[v.layer].index >= 64  # csum_mask's bits
                if v.virtual
                else (v.layer, v.field) not in self.itf.places
            )
        ]

    def csum_mask(self) -> int:
        """The layers whose checksum_bad the set reads: the stack verifies them at the parse."""
        return sum(
            1 << self.lcs[f.layer].index for fs in self.fields.values() for f in fs if f.virtual
        )

    def _val(self, r: RuleIR, e: Expr) -> str:
        if isinstance(e, Name):
            x = r.ref(e)
            if isinstance(x, FieldRef) and x.virtual:  # checksum_bad: verified at the parse
                return f"(uint64_t)v->csum_bad[{self.lcs[x.layer].index}]"
            if isinstance(x, FieldRef):
                return f"rf_{x.layer}_{x.field}"
        return super()._val(r, e)

    def _bytes(self, f: FieldRef) -> str:
        return f"rf_{f.layer}_{f.field}"

    @staticmethod
    def _eq128(p: str, lit: Lit) -> str:
        # the copy may be short only if the header was: then the layer's guard is not enough
        return f"(rs16_{p[3:]} && {RulesC._eq128(p, lit)})"

    def _set(self, f: FieldRef, value: int) -> str:
        if f.kind == "num":
            k = self.itf.set_num.index((f.layer, f.field))
            return f"v->set_num[{k}](v->ctx, UINT64_C({value})); /* {f.dotted} */"
        k = self.itf.set_bytes.index((f.layer, f.field))
        n = f.width // 8
        b = ", ".join(f"{x:#04x}" for x in value.to_bytes(n, "big"))
        return (
            f"{{ static const uint8_t v_[{n}] = {{{b}}}; v->set_bytes[{k}](v->ctx, v_); }}"
            f" /* {f.dotted} */"
        )

    def _action(self, r: RuleIR) -> list[str]:
        verdict = verdict_of(r)
        if verdict is not None:
            return [f"rg_verdict_give(v->verdict, v->fi, {verdict});"]
        return super()._action(r)

    def unit(self, symbol: str | None) -> str:
        """The C of the set; `symbol`: the exported descriptor's name (a shared object), or
        None for the compiled-in set (`static const rg_rules_desc {S}__rules_initial`)."""
        rs, n, S = self.rs, self.n, self.S
        p = f"rr_{S}_"  # static names apart from the stack's (the compiled-in set shares gen.c)
        out = [f"/* rule set compiled from {c_comment(rs.file)} (sha256 {rs.digest[:16]}) */"]
        names = ", ".join(c_string(r.name) for r in rs.rules) or "NULL"
        acts = ", ".join(c_string(r.action) for r in rs.rules) or "NULL"
        st = ", ".join("1" if r.stateful else "0" for r in rs.rules) or "0"
        out += [
            f"static const char *const {p}names[] = {{{names}}};",
            f"static const char *const {p}actions[] = {{{acts}}};",
            f"static const uint8_t {p}stateful[] = {{{st}}};",
            "",
            f"static unsigned {p}match(const rg_rules_view *v)",
            "{",
            "    (void)v; /* a set without rules */",
        ]
        for ly in self.used:
            i = self.lcs[ly].index
            out.append(f"    const int rs_{ly} = v->stamp[{i}] == v->pkt_no;")
        for ly, fs in self.fields.items():
            for f in fs:
                if f.virtual:
                    continue
                pl = self.itf.places[(f.layer, f.field)]
                end = (pl.bit + pl.width + 7) // 8
                if f.width > 64:  # an IPv6 address: where its bytes are in the copy
                    out.append(
                        f"    const uint8_t *const rf_{ly}_{f.field} RG_MAYBE_UNUSED = "
                        f"v->hdr[{pl.layer}] + {pl.bit // 8}u;"
                    )
                    out.append(
                        f"    const int rs16_{ly}_{f.field} RG_MAYBE_UNUSED = "
                        f"rs_{ly} && v->len[{pl.layer}] >= {end}u;"
                    )
                    continue
                get = _load(pl)
                out.append(
                    f"    const uint64_t rf_{ly}_{f.field} RG_MAYBE_UNUSED = "
                    f"rs_{ly} && v->len[{pl.layer}] >= {end}u ? {get} : 0;"
                )
        out.append(f"    unsigned best_ = {n}u;")
        ind = "    "
        for gi, g in enumerate(self.groups):
            out += self._group(gi, g, ind)
        for gi, rg in enumerate(self.ranges):
            out += self._range_group(gi, rg, ind)
        for r in rs.rules:
            if r in self.linear:
                out.append(f"{ind}/* {c_comment(self._where(r))} */")
                out.append(
                    f"{ind}if (best_ > {r.index}u && {self.pred(r, r.expr)}) best_ = {r.index}u;"
                )
        out += ["    return best_;", "}", ""]
        out += [
            f"static void {p}act(const rg_rules_view *v, unsigned rule, int rev_)",
            "{",
            "    (void)v;",
            "    (void)rev_;",
            "    switch (rule) {",
        ]
        for r in rs.rules:
            if r.action in ACTING:  # (clamp-mss is refused in reloadable sets: check.py)
                out.append(f"    case {r.index}u: /* {c_comment(self._where(r))} */")
                out += ["        " + x for x in self._action(r)]
                out.append("        break;")
        out += ["    default: break; /* pass, count */", "    }", "}", ""]
        decl = (
            f"RG_RULES_EXPORT const rg_rules_desc {symbol}"
            if symbol
            else f"static const rg_rules_desc {S}__rules_initial"
        )
        out += [
            f"{decl} = {{",
            f"    RG_RULES_ABI, {c_string(self.itf.fingerprint())}, {c_string(rs.file)},",
            f"    {c_string(rs.digest)}, {n}u, {p}names, {p}actions, {p}stateful,",
            f"    {p}match, {p}act, UINT64_C({self.csum_mask():#x}),",
            "};",
        ]
        return "\n".join(out)

    def source(self) -> str:
        """A shared object's whole source."""
        return "\n".join([
            f"/* a rule set for stack {self.S} (rubikgen ctl ... rules reload): generated, do "
            "not edit */",
            "#include <stdint.h>",
            "#include <stddef.h>",
            "",
            "#include \"rg/rg_pkt.h\"",
            "#include \"rg/rg_rules.h\"",
            "",
            "#define RG_RULES_EXPORT __attribute__((visibility(\"default\")))",
            "#ifndef RG_MAYBE_UNUSED",
            "#define RG_MAYBE_UNUSED __attribute__((unused))",
            "#endif",
            "",
            self.unit("rg_rules_set_v1"),
            "",
        ])  # fmt: skip


def reload_hash(hash_: str) -> str:
    """The spec hash of a `--rules-reload` build (not the compiled-in one's: pipeline.py)."""
    return hashlib.sha256(f"{hash_} rules-reload".encode()).hexdigest()[:16]


class RulesHost(RulesC):
    """The stack's side of `--rules-reload` (the hooks of RulesC the C renderers call, backend/c/)."""

    def __init__(self, prog: Program, S: str, layers: dict[str, LayerC]) -> None:
        assert prog.rules is not None and prog.rules.reload
        super().__init__(prog, S, layers)
        self.stack_spec = prog.rules.stack_spec
        self.unit_ = RulesUnit(prog, S, layers)
        bad = self.unit_.unreadable()
        if bad:  # the check stage refuses them (rules/check.py, RG010): a bug if one gets here
            r, f = bad[0]
            raise ValueError(f"rule {r.name}: {f.dotted} is not readable by a reloadable set")
        self.itf = self.unit_.itf

    def on_parsed(self, layer: str, fields: tuple[FieldRef, ...] = ()) -> str:
        lc = self.lcs[layer]
        i, k = lc.index, self.itf.copy[layer]
        out = [
            f"if (err_{layer} == 0) {{ /* rules (reloadable): the header, for any rule set */",
            f"    ctx->rv_stamp[{i}] = ctx->pkt_no;",
        ]
        if lc.d.checksums and i < 64:  # LAYER.checksum_bad, for a set that reads it
            out.append(
                f"    if (RG_UNLIKELY(ctx->rules->csum_mask >> {i} & 1u)) "
                f"ctx->rv_csum[{i}] = (uint8_t){self.S}__rules_csum_bad(ctx, {i}u);"
            )
        if k:
            out += [
                f"    if (cur_{layer} >= {k}u) {{",
                f"        memcpy(ctx->rv_hdr_{layer}, in_{layer}.ptr, {k}u);",
                f"        ctx->rv_len[{i}] = {k}u;",
                "    } else {",
                f"        memcpy(ctx->rv_hdr_{layer}, in_{layer}.ptr, cur_{layer});",
                f"        ctx->rv_len[{i}] = (uint32_t)cur_{layer};",
                "    }",
            ]
        out.append("}")
        return "\n".join(out)

    def hook(self) -> str:
        S = self.S
        out = [
            f"    /* rules: the active rule set (rg_rules.h; {c_comment(self.rs.file)} first) */"
        ]
        out.append("    {")
        look = self.inst_lookup()
        out += look[:2]  # the declarations; the lookup only for sets that can use it
        out.append("        if (ctx->rules->need_inst) {")
        out += ["    " + x for x in look[2:]]
        out.append("        }")
        out += [
            "        const rg_rules_view v_ = {ctx, ctx->rv_stamp, ctx->rv_len,",
            "            (const uint8_t *const *)ctx->rv_hdrs, ctx->pkt_no, &ctx->verdict, fi_,",
            f"            {S}__rv_set_num, {S}__rv_set_bytes, ctx->rv_csum}};",
            "        rg_rules_run(ctx->rules, &v_, slot_, rec_, pdir_);",
            "    }",
        ]
        return "\n".join(out)

    def _csum_fn(self) -> str:
        summed = any(lc.d.checksums for lc in self.lcs.values())
        return f"{self.S}__rules_csum_bad" if summed else "NULL"

    def ctx_fields(self) -> str:
        nl = max(1, len(self.lcs))
        out = [
            "    rg_rules_rt *rules; /* rules: the active set (rg_rules.h) */",
            f"    uint64_t rv_stamp[{nl}]; /* rules: by layer, the packet its header parsed in */",
            f"    uint32_t rv_len[{nl}]; /* rules: ... the bytes copied */",
            f"    uint8_t *rv_hdrs[{nl}]; /* rules: ... the copy */",
            f"    uint8_t rv_csum[{nl}]; /* rules: ... a checksum did not verify */",
        ]
        out += [
            f"    uint8_t rv_hdr_{n}[{k}]; /* rules: layer {n}'s header, fixed part */"
            for n, k in self.itf.copy.items()
            if k
        ]
        out += [f"    rg_flow *rl_{n}; /* rules: ended instances stateful rules took */"
                for n in self.inst]  # fmt: skip
        return "\n".join(out)

    def ctx_new(self) -> str:
        S = self.S
        out = [f"    ctx->rv_hdrs[{self.lcs[n].index}] = ctx->rv_hdr_{n};"
               for n, k in self.itf.copy.items() if k]  # fmt: skip
        out += self.linger_new()
        out += [
            f"    ctx->rules = rg_rules_rt_new(&{S}__rules_initial, ctx->stats, &ctx->pkt_no,",
            f"                                 {S}__rules_fp, {S}__rules_spec);",
            "    if (ctx->rules == NULL) goto fail;",
        ]
        return "\n".join(out)

    def ctx_free(self) -> str:
        out = ["    rg_rules_rt_free(ctx->rules);"]
        out += [f"    if (ctx->rl_{n}) rg_flow_free(ctx->rl_{n});" for n in self.inst]
        return "\n".join(out)

    def support(self) -> str:
        S = self.S
        num = ", ".join(f"{S}_set_{ly}_{f}" for ly, f in self.itf.set_num) or "NULL"
        byt = ", ".join(f"{S}_set_{ly}_{f}" for ly, f in self.itf.set_bytes) or "NULL"
        return "\n".join([
            "#include \"rg/rg_rules.h\"",
            "#define RG_RULES_EXPORT",
            "/* an ended instance a stateful rule took (rules' linger table) */",
            f"struct {S}__rl_rec {{",
            "    uint32_t rule; /* 1 + global id | dir << 31 (rg_rules.h) */",
            "};",
            "/* what rule sets may read and write (rg_rules.h): its hash, the sets' setters */",
            f"static const char {S}__rules_fp[] = {c_string(self.itf.fingerprint())};",
            f"static const char {S}__rules_spec[] = {c_string(self.stack_spec)};",
            f"static void (*const {S}__rv_set_num[])(void *, uint64_t) = {{{num}}};",
            f"static void (*const {S}__rv_set_bytes[])(void *, const uint8_t *) = {{{byt}}};",
            self.csum_support() if self._csum_fn() != "NULL" else "",
            self.unit_.unit(None),
        ])  # fmt: skip


def rules_backend(prog: Program, S: str, layers: dict[str, LayerC]) -> RulesC | None:
    """What the rules' renderers (backend/c/rules.py) and the program-level code read:
    compiled in (RulesC), reloadable (RulesHost), none (a program without rules)."""
    if prog.rules is None:
        return None
    return RulesHost(prog, S, layers) if prog.rules.reload else RulesC(prog, S, layers)
