"""Per-layer C: names, structs, the expression environment and the header parser.

Every layer of a stack gets its own C, even when two layers share a protocol (tcp over ip and
tcp6 over ipv6): a parameter's fields have the bound layer's types. Inside the per-packet
function each layer owns these locals (all declared at the top of the function):

    h_L      struct L_L_hdr: parsed header fields (views into the packet for byte fields)
    t_L      struct L_L_tmp: temps (zeroed on every pass)
    inst_L   struct L_L_inst *: the instance, or the layer's zeroed scratch instance
    has_inst_L, dir_L   a real instance? its direction (0 = to_passive)
    in_L, cur_L         the layer's input and the parse cursor
    sdu_L               the data for the next layer
    ev_L[]   fired flags of events and handlers; psm_L the transition fired (0 = none)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from rubikgen.expr.ast import Name
from rubikgen.expr.types import BOOL, BytesT, NumT, Type
from rubikgen.ir.layout import (
    AnyUntil,
    Elif,
    Else,
    HField,
    If,
    KeyItem,
    LayerDesc,
    Parse,
    Step,
    Var,
)

from . import lean_walk
from .cexpr import CExpr, CRef, cond_to_c, lit, to_c
from .lean_walk import LeanWalk

# the overlap event's values (sema.builtins.OVERLAP_VALUES) -> rg_seq_res fields
_OVERLAP_FIELDS = {"overlap_seq": "ovl_seq", "overlap_len": "ovl_bytes", "overlap_new": "ovl_new"}


def ctype_of_width(w: int) -> str:
    if w <= 8:
        return "uint8_t"
    if w <= 16:
        return "uint16_t"
    if w <= 32:
        return "uint32_t"
    return "uint64_t"


def c_string(s: str) -> str:
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'


def c_comment(s: str) -> str:
    return s.replace("*/", "* /").replace("/*", "/ *")


def _balanced(text: str) -> bool:
    """text's parentheses close in order (one operand, not `a) && f(b`)."""
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


@dataclass
class KeyPart:
    name: str
    expr: Any
    kind: str  # "num" | "bytes"
    size: int
    side: int  # 0 side a, 1 common, 2 side p (rg_keypart.common)
    off: int = 0


@dataclass
class LayerC:
    """Everything the C back-end derives for one layer."""

    d: LayerDesc
    index: int
    layers: dict[str, LayerC]  # all layers of the stack, by name (for parameter references)
    events: list[str] = field(
        default_factory=list
    )  # fired-flag slots: own events, builtins, handlers
    key_fwd: list[KeyPart] = field(default_factory=list)
    key_rev: list[KeyPart] = field(default_factory=list)
    key_len: int = 0
    find_fwd: list[KeyPart] = field(default_factory=list)  # lookup: the key searched for
    atoms: int = 0
    rule_slot: bool = False  # rules with stateful/drop-flow actions: inst has rule__ (rules_c)
    # any_until loops and their lean walks, used where nothing reads their fields (lean_walk.py)
    walks: list[LeanWalk] = field(default_factory=list)

    # -- names ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.d.name

    def t(self, what: str) -> str:
        """Type / function name of this layer: L_<layer>_<what>."""
        return f"L_{self.name}_{what}"

    def v(self, what: str) -> str:
        """Local variable of this layer in the per-packet function."""
        return f"{what}_{self.name}"

    @property
    def spec_file(self) -> str:
        return self.d.spec_file

    @property
    def has_instance(self) -> bool:
        return self.d.has_instance

    @property
    def bidir(self) -> bool:
        return self.d.bidirectional

    @property
    def ndirs(self) -> int:
        return 2 if self.bidir else 1

    @property
    def has_seq(self) -> bool:
        return self.d.seq is not None and self.has_instance

    @property
    def states(self) -> list[str]:
        return self.d.states

    @property
    def start_state(self) -> int:
        return self.d.start_state

    @property
    def setup_mask(self) -> int:
        return self.d.setup_mask

    @property
    def timeout_ns(self) -> int:
        return self.d.timeout_ns

    def ev_index(self, name: str) -> int:
        return self.events.index(name)

    def dir_expr(self) -> str:
        return self.v("dir") if self.bidir else "0"

    # -- setup ------------------------------------------------------------------------------
    def prepare(self, handlers: list[str], transforms: list[str] | None = None) -> None:
        self.events = list(self.d.events) + list(handlers)
        self.transforms = sorted(set(transforms or []))
        if self.has_instance:
            self._key()
        if self.d.find_table is not None:
            self._find_key()

    def _parts(self, items: list[KeyItem], side: int) -> list[KeyPart]:
        out = []
        for it in items:
            ce = to_c(it.expr, self.env())
            if isinstance(ce.type, NumT):
                out.append(KeyPart(it.text, it.expr, "num", (ce.type.width + 7) // 8, side))
            else:
                assert isinstance(ce.type, BytesT) and ce.type.size is not None
                out.append(KeyPart(it.text, it.expr, "bytes", ce.type.size, side))
        return out

    def _find_key(self) -> None:
        """A lookup's key, laid out as the forward key of the table it searches."""
        d = self.d
        self.find_fwd = self._parts(d.find_a, 0)
        if d.find_p is not None:
            self.find_fwd += self._parts(d.find_p, 2)
        self.find_fwd += self._parts(d.find_common, 1)
        off = 0
        for kp in self.find_fwd:
            kp.off = off
            off += kp.size

    def _key(self) -> None:
        d = self.d
        parts = self._parts

        # A bidirectional key is both half keys: (a, p, common) stored forward and
        # (p, a, common) swapped, so one probe with the packet's (src half, dst half) finds
        # the instance from either side.
        a = parts(d.key_a, 0)
        c = parts(d.key_common, 1)
        if d.key_p is not None:
            p = parts(d.key_p, 2)
            self.key_fwd = a + p + c
            self.key_rev = [replace(kp) for kp in p + a + c]  # own offsets
        else:
            self.key_fwd = a + c
            self.key_rev = []
        for keyparts in (self.key_fwd, self.key_rev):
            off = 0
            for kp in keyparts:
                kp.off = off
                off += kp.size
        self.key_len = max(1, sum(kp.size for kp in self.key_fwd))

    def env(self, **kw: Any) -> LayerEnv:
        return LayerEnv(self, **kw)

    # -- structs ----------------------------------------------------------------------------
    def header_fields(self) -> list[HField]:
        return list(self.d.fields.values())

    def hdr_struct(self) -> str:
        lines = [f"/* {self.spec_file}: header of layer {self.name} ({self.d.protocol}) */"]
        lines.append(f"struct {self.t('hdr')} {{")
        for f in self.header_fields():
            ln = f.line
            if f.kind == "num":
                lines.append(f"    {ctype_of_width(f.width or 64)} {f.name}; /* line {ln} */")
            else:
                lines.append(f"    rg_bytes {f.name}; /* line {ln} */")
        for lay in self.d.layouts:
            lines.append(f"    uint8_t has__{lay};")
        lines.append("    uint8_t pad__;")
        lines.append("};")
        init = [
            f".{f.name} = {{rg_empty_byte, 0}}" for f in self.header_fields() if f.kind != "num"
        ]
        lines.append(
            f"static const struct {self.t('hdr')} {self.t('hdr_init')} RG_MAYBE_UNUSED = "
            f"{{{', '.join(init) or '0'}}};"
        )
        return "\n".join(lines)

    @staticmethod
    def _var_decl(v: Var) -> str:
        if v.kind == "num":
            return f"{ctype_of_width(v.width or 64)} {v.name};"
        if v.size is not None:
            return f"uint8_t {v.name}[{v.size}];"
        return f"rg_bytes {v.name};"

    def tmp_struct(self) -> str:
        lines = [f"struct {self.t('tmp')} {{"]
        for v in self.d.temps.values():
            lines.append(f"    {self._var_decl(v)} /* {self.spec_file}:{v.line} */")
        lines.append("    uint8_t pad__;")
        lines.append("};")
        init = [f".{v.name} = {{rg_empty_byte, 0}}" for v in self.d.temps.values()
                if v.kind != "num" and v.size is None]  # fmt: skip
        lines.append(
            f"static const struct {self.t('tmp')} {self.t('tmp_init')} RG_MAYBE_UNUSED = {{{', '.join(init) or '0'}}};"
        )
        return "\n".join(lines)

    def inst_struct(self) -> str:
        lines = [f"/* {self.spec_file}: instance of layer {self.name} */"]
        lines.append(f"struct {self.t('inst')} {{")
        lines.append("    rg_flow_info fi; /* uid, key, state, user data (rg_api.h) */")
        lines.append("    uint64_t tmask;  /* transitions fired in the instance's life */")
        if self.has_seq:
            lines.append(f"    rg_seq seq[{self.ndirs}];")
        if self.d.frame is not None:
            lines.append(
                f"    rg_framer fr[{self.ndirs}]; /* framing: a straddling unit per direction */"
            )
        if self.atoms:
            lines.append(f"    uint32_t vend[{self.atoms}][{self.ndirs}]; /* virtual latches */")
            lines.append(f"    uint8_t vl[{self.atoms}][{self.ndirs}];")
        for v in self.d.perms.values():
            lines.append(f"    {self._var_decl(v)} /* {self.spec_file}:{v.line} */")
        for tn in getattr(self, "transforms", []):
            st = self.d.transform_states[tn]
            lines.append(f"    {st} xf_{tn}; /* state of transform {tn} (a key cache) */")
        if self.rule_slot:
            lines.append("    uint32_t rule__; /* rules: 1 + the stateful rule that took it */")
        lines.append("};")
        return "\n".join(lines)

    def always_parsed(self) -> set[str]:
        """Layouts the header program parses on every packet that parses at all."""
        return {s.layout for s in self.d.header if isinstance(s, Parse)}

    def zero_conditional(self) -> list[str]:
        """Clear what a packet may leave unparsed (header-zeroing): fields and has-flags of
        layouts under an if or in an any_until. Many fields: one struct copy is cheaper."""
        always = self.always_parsed()
        h = self.v("h")
        cond = [f for f in self.header_fields() if f.layout not in always]
        if len(cond) > 8:
            return [f"{h} = {self.t('hdr_init')};"]
        out = []
        for f in cond:
            out.append(f"{h}.{f.name} = " + ("0;" if f.kind == "num" else "rg_bytes_empty();"))
        for lay in self.d.layouts:
            if lay not in always:
                out.append(f"{h}.has__{lay} = 0;")
        return out

    # -- header parser ----------------------------------------------------------------------
    def header_code(self) -> str:
        """C statements parsing the header from in_L at cur_L; on failure they set err_L and
        jump to HE_L. Returns '' when the header program is empty."""
        self._hc_jumps = 0
        self._tmp = 0
        body = self._steps(self.d.header, 1)
        return "\n".join(body)

    def _fail(self, reason: str) -> str:
        self._hc_jumps += 1
        # err_L is the reason + 1: 0 means "parsed" (RG_REASON_TRUNCATED is 0)
        return f"{{ {self.v('err')} = 1u + {reason}; goto HE_{self.name}; }}"

    def _steps(self, steps: list[Step], ind: int, lo: int = 0) -> list[str]:
        """lo: bytes the cursor has passed at least when these steps start (for ends_first)."""
        out: list[str] = []
        pad = "    " * ind
        env = self.env()
        for s in steps:
            if isinstance(s, Parse):
                out += self._layout(s.layout, ind)
                lo += lean_walk.fixed_bytes(self.d.layouts[s.layout])
            elif isinstance(s, If):
                c = cond_to_c(s.cond, env)
                out.append(f"{pad}if ({c}) {{")
                out += self._steps(s.then, ind + 1, lo)
                out.append(f"{pad}}}")
            elif isinstance(s, Elif):
                c = cond_to_c(s.cond, env)
                out[-1] = f"{pad}}} else if ({c}) {{"
                out += self._steps(s.then, ind + 1, lo)
                out.append(f"{pad}}}")
            elif isinstance(s, Else):
                out[-1] = f"{pad}}} else {{"
                out += self._steps(s.then, ind + 1, lo)
                out.append(f"{pad}}}")
            elif isinstance(s, AnyUntil):
                out += self._any_until(s, ind, lo)
        return out

    def _load(self, f: HField, base: str, bit: int) -> str:
        w = f.width or 64
        if bit % 8 == 0 and w % 8 == 0 and w in (8, 16, 24, 32, 48, 64):
            p = f"{base} + {bit // 8}" if bit else base
            if w == 8:
                return f"rg_load_u8({p})"
            order = "le" if f.order == "little" else "be"
            return f"rg_load_{order}{w}({p})"
        if bit % 8 == 0 and w % 8 == 0 and f.order == "big":
            p = f"{base} + {bit // 8}" if bit else base
            return f"rg_load_ben({p}, {w // 8})"
        # a bit field inside one 1-, 2- or 4-byte big-endian word: one load, shift and mask
        # (rg_bits_u's general byte loop does not always fold away)
        lead = bit % 8
        for nb, load in ((1, "rg_load_u8"), (2, "rg_load_be16"), (4, "rg_load_be32")):
            if lead + w <= nb * 8:
                p = f"{base} + {bit // 8}" if bit // 8 else base
                sh = nb * 8 - lead - w
                mask = (1 << w) - 1
                v = f"{load}({p})" + (f" >> {sh}" if sh else "")
                return f"(({v}) & {mask:#x}u)"
        return f"rg_bits_u({base}, {bit}, {w})"

    def _layout(self, lname: str, ind: int, skip_tag: bool = False) -> list[str]:
        """Parse one layout: fixed chunks checked at once, variable fields one by one."""
        pad = "    " * ind
        fields = self.d.layouts[lname]
        h, cur, inp = self.v("h"), self.v("cur"), self.v("in")
        out = [f"{pad}/* layout {lname} ({self.spec_file}:{self.d.layout_lines[lname]}) */"]
        env = self.env()
        chunk: list[tuple[HField, int]] = []
        bits = 0

        def flush() -> None:
            nonlocal chunk, bits
            if not chunk:
                return
            n = (bits + 7) // 8
            out.append(
                f"{pad}if (!rg_has({inp}.len, {cur}, {n})) {self._fail('RG_REASON_TRUNCATED')}"
            )
            out.append(f"{pad}{{")
            out.append(f"{pad}    const uint8_t *p_ = {inp}.ptr + {cur};")
            for f, b in chunk:
                if f.kind == "num":
                    ct = ctype_of_width(f.width or 64)
                    out.append(f"{pad}    {h}.{f.name} = ({ct}){self._load(f, 'p_', b)};")
                else:
                    out.append(f"{pad}    {h}.{f.name} = rg_bytes_make(p_ + {b // 8}, {f.size});")
            out.append(f"{pad}}}")
            out.append(f"{pad}{cur} += {n};")
            for f, _ in chunk:
                if f.kind == "num" and f.const is not None:
                    out.append(
                        f"{pad}if ({h}.{f.name} != {f.const}u) {self._fail('RG_REASON_MALFORMED')}"
                    )
            chunk, bits = [], 0

        for f in fields:
            if f.kind == "num" or f.size is not None:
                chunk.append((f, bits))
                bits += (f.width or 64) if f.kind == "num" else (f.size or 0) * 8
                continue
            flush()
            assert f.length is not None
            n = to_c(f.length, env).text
            if f.length_unit == "bits":
                n = f"({n} >> 3)"
            out.append(f"{pad}{{")
            out.append(f"{pad}    uint64_t n_ = {n};")
            out.append(f"{pad}    if (n_ > {inp}.len - {cur}) {self._fail('RG_REASON_TRUNCATED')}")
            out.append(f"{pad}    {h}.{f.name} = rg_bytes_make({inp}.ptr + {cur}, (size_t)n_);")
            out.append(f"{pad}    {cur} += (uint32_t)n_;")
            out.append(f"{pad}}}")
        flush()
        out.append(f"{pad}{h}.has__{lname} = 1;")
        return out

    def _any_until(self, au: AnyUntil, ind: int, lo: int = 0) -> list[str]:
        pad = "    " * ind
        inp, cur = self.v("in"), self.v("cur")
        firsts = [self.d.layouts[n][0] for n in au.layouts]
        # no iteration count where `until` ends the loop by then anyway (lean_walk.ends_first)
        step = min(lean_walk.fixed_bytes(self.d.layouts[n]) for n in au.layouts)
        counted = not lean_walk.ends_first(au.until, self.d.fields, lo, step, au.max)
        tw = firsts[0].width or 8
        order = firsts[0].order
        self._tmp += 1
        k = self._tmp
        it, stop = f"it{k}_", f"stop{k}_"
        if tw == 8:
            load = f"rg_load_u8({inp}.ptr + {cur})"
        else:
            load = f"rg_load_{'le' if order == 'little' else 'be'}16({inp}.ptr + {cur})"
        out = [f"{pad}{{ /* any_until ({self.spec_file}:{au.line}) */"]
        if counted:
            out.append(f"{pad}    unsigned {it} = 0;")
        else:
            out.append(
                f"{pad}    /* no count: {au.max} iterations pass any value of the until bound */"
            )
        out.append(f"{pad}    int {stop} = 0;")
        out.append(f"{pad}    for (;;) {{")
        out.append(f"{pad}        if (!rg_has({inp}.len, {cur}, {tw // 8})) break;")
        out.append(f"{pad}        switch ({load}) {{")
        default = None
        for lname, f in zip(au.layouts, firsts, strict=True):
            if f.const is None:
                default = lname
                continue
            out.append(f"{pad}        case {f.const}u:")
            out += self._layout(lname, ind + 3)
            out.append(f"{pad}            break;")
        out.append(f"{pad}        default:")
        if default is not None:
            out += self._layout(default, ind + 3)
        else:
            out.append(f"{pad}            {stop} = 1; /* unknown tag, no default */")
        out.append(f"{pad}            break;")
        out.append(f"{pad}        }}")
        if counted:
            out.append(f"{pad}        if ({stop} || ++{it} >= {au.max}u) break;")
        else:
            out.append(f"{pad}        if ({stop}) break;")
        until = cond_to_c(au.until, self.env()) if au.until is not None else None
        if until is not None:
            out.append(f"{pad}        if ({until}) break;")
        out.append(f"{pad}    }}")
        out.append(f"{pad}}}")
        lean = self._lean_any_until(au, ind, k, until, counted)
        if lean is not None:
            walk = LeanWalk("\n".join(out), "\n".join(lean[0]), self.v("h"), lean[1])
            if walk not in self.walks:
                self.walks.append(walk)
        return out

    def _lean_any_until(
        self, au: AnyUntil, ind: int, k: int, until: str | None, counted: bool = True
    ) -> tuple[list[str], frozenset[str]] | None:
        """The loop consuming what the full walk consumes, with no store (lean_walk.py)."""
        shapes = {n: lean_walk.shape(self.d.layouts[n]) for n in au.layouts}
        firsts = [self.d.layouts[n][0] for n in au.layouts]
        tlvs = {s for s in shapes.values() if s is not None and s.tlv}
        if (
            any(s is None for s in shapes.values())
            or len(tlvs) > 1
            or any(f.kind != "num" or f.width != 8 for f in firsts)
        ):
            return None
        h, inp, cur = self.v("h"), self.v("in"), self.v("cur")
        names = frozenset(
            [f.name for n in au.layouts for f in self.d.layouts[n]]
            + [f"has__{n}" for n in au.layouts]
        )
        if until is not None and any(
            m in names for m in re.findall(rf"\b{re.escape(h)}\.(\w+)", until)
        ):
            return None  # the until condition reads a field of the loop
        stop = 255  # no default layout: an unknown tag ends the loop unconsumed
        table = [stop] * 256
        for n, f in zip(au.layouts, firsts, strict=True):
            s = shapes[n]
            assert s is not None
            if f.const is None:
                table = [0 if s.tlv else s.fixed] * 256
        for n, f in zip(au.layouts, firsts, strict=True):
            s = shapes[n]
            assert s is not None
            if f.const is not None:
                table[f.const] = 0 if s.tlv else s.fixed
        pad = "    " * ind
        t = f"lens{k}_"
        it = f"it{k}_"
        rows = [", ".join(str(x) for x in table[i : i + 32]) for i in range(0, 256, 32)]
        out = [f"{pad}{{ /* any_until ({self.spec_file}:{au.line}): lengths only, no field read */"]
        out.append(
            f"{pad}    /* bytes each tag's layout consumes; 0: its length byte says; {stop}: stop */"
        )
        out.append(f"{pad}    static const uint8_t {t}[256] = {{")
        out += [f"{pad}        {r}," for r in rows]
        out.append(f"{pad}    }};")
        if counted:
            out.append(f"{pad}    unsigned {it} = 0;")
        else:
            out.append(
                f"{pad}    /* no count: {au.max} iterations pass any value of the until bound */"
            )
        # `cursor >= E`: nothing in the loop changes E (it stores nothing): computed once
        m = re.fullmatch(rf"rg_op_ge\(\(\(uint64_t\){cur}\), (.*)\)", until or "")
        end = None
        if m and _balanced(m.group(1)) and not re.search(rf"\b{cur}\b", m.group(1)):
            end = f"end{k}_"
            out.append(f"{pad}    const uint64_t {end} = {m.group(1)};")
            until = f"(uint64_t){cur} >= {end}"
        trunc = self._fail("RG_REASON_TRUNCATED")
        tlv = next(iter(tlvs), None)
        count = (it, au.max) if counted else None
        if end is not None:
            # the whole block [cur, end) captured: every option starts on a captured byte and a
            # fixed-size one ending before end ends inside the data, so only the option that
            # reaches end needs its truncation test (cur stays below 2^32: packets are smaller)
            out.append(f"{pad}    if (RG_LIKELY((uint64_t){cur} < {end} && {end} <= {inp}.len)) {{")
            out += self._lean_loop(pad + "    ", t, stop, table, tlv, trunc, count, None, end)
            out.append(f"{pad}    }} else {{")
            out += self._lean_loop(pad + "    ", t, stop, table, tlv, trunc, count, until)
            out.append(f"{pad}    }}")
        else:
            out += self._lean_loop(pad, t, stop, table, tlv, trunc, count, until)
        out.append(f"{pad}}}")
        return out, names

    def _lean_loop(
        self,
        pad: str,
        t: str,
        stop: int,
        table: list[int],
        tlv: lean_walk.Shape | None,
        trunc: str,
        count: tuple[str, int] | None,
        until: str | None,
        fast_end: str | None = None,
    ) -> list[str]:
        """The lean loop; with fast_end, the one for a block known captured up to fast_end."""
        inp, cur = self.v("in"), self.v("cur")
        fast = fast_end is not None
        out = [f"{pad}    for (;;) {{"]
        if not fast:
            out.append(f"{pad}        if (!rg_has({inp}.len, {cur}, 1)) break;")
        out.append(f"{pad}        unsigned f_ = {t}[rg_load_u8({inp}.ptr + {cur})];")
        if stop in table:
            out.append(f"{pad}        if (f_ == {stop}u) break;")

        # under fast, cur < end <= len at the top of each iteration: one compare suffices
        def has(n: int) -> str:
            return f"{inp}.len - {cur} >= {n}" if fast else f"rg_has({inp}.len, {cur}, {n})"

        if tlv is not None:
            out.append(f"{pad}        if (f_ == 0u) {{")
            out.append(f"{pad}            if (!({has(tlv.fixed)})) {trunc}")
            out.append(
                f"{pad}            uint64_t n_ = ((uint64_t)rg_load_u8({inp}.ptr + {cur} + "
                f"{tlv.len_at})) - UINT64_C({tlv.minus});"
            )
            out.append(f"{pad}            {cur} += {tlv.fixed};")
            out.append(f"{pad}            if (n_ > {inp}.len - {cur}) {trunc}")
            out.append(f"{pad}            {cur} += (uint32_t)n_;")
            out.append(f"{pad}        }} else {{")
            if not fast:
                out.append(f"{pad}            if (!rg_has({inp}.len, {cur}, f_)) {trunc}")
            out.append(f"{pad}            {cur} += f_;")
            out.append(f"{pad}        }}")
        else:
            if not fast:
                out.append(f"{pad}        if (!rg_has({inp}.len, {cur}, f_)) {trunc}")
            out.append(f"{pad}        {cur} += f_;")
        if fast:
            # the test skipped above, for the option reaching end (the tlv branch checked its
            # own: f_ is 0 there); the cursor stays where the full walk's error leaves it
            out.append(f"{pad}        if ((uint64_t){cur} >= {fast_end}) {{")
            out.append(f"{pad}            if ({cur} > {inp}.len) {{")
            out.append(f"{pad}                {cur} -= f_;")
            out.append(f"{pad}                {trunc}")
            out.append(f"{pad}            }}")
            out.append(f"{pad}            break;")
            out.append(f"{pad}        }}")
        if count is not None:
            out.append(f"{pad}        if (++{count[0]} >= {count[1]}u) break;")
        if until is not None and not fast:
            out.append(f"{pad}        if ({until}) break;")
        out.append(f"{pad}    }}")
        return out


class LayerEnv:
    """cexpr.CEnv for one layer."""

    def __init__(self, lc: LayerC, create: bool = False) -> None:
        self.lc = lc
        self.create = create

    def _owner(self, name: Name) -> LayerC:
        """The layer a name belongs to: sema bound a parameter's names to their layer."""
        r = name.ref
        return self.lc.layers[r.owner] if r is not None and r.owner else self.lc

    @staticmethod
    def _var_ref(base: str, v: Var | HField) -> CRef:
        t = v.type
        if isinstance(t, BytesT) and isinstance(v, Var) and v.size is not None:
            return CRef(f"rg_bytes_make({base}{v.name}, {v.size})", t)
        return CRef(f"{base}{v.name}", t)

    def ref(self, name: Name) -> CRef:
        """The C of a name, by the binding sema gave it (Name.ref)."""
        lc = self.lc
        r = name.ref
        if r is None:
            raise ValueError(f"layer {lc.name}: name {name.dotted!r} was not resolved")
        k, x = r.kind, name.parts[-1]
        inp, cur = lc.v("in"), lc.v("cur")
        if k == "builtin":
            if x == "input":  # the whole input of this pass, header included
                return CRef(inp, BytesT(None))
            if x == "payload":
                return CRef(f"rg_bytes_make({inp}.ptr + {cur}, {inp}.len - {cur})", BytesT(None))
            if x == "payload_len":
                return CRef(f"({inp}.len - {cur})", NumT(32))
            if x == "cursor":
                return CRef(cur, NumT(32))
            if x == "sdu":
                return CRef(lc.v("sdu"), BytesT(None))
            if x == "sdu_len":
                return CRef(f"{lc.v('sdu')}.len", NumT(32))
            if x == "gap_len":  # gap recovery: bytes this packet's assembles skipped
                return CRef(f"{lc.v('sres')}.gap_bytes", NumT(32))
            if x == "gap_seq":  # ... and where the first hole started
                rs = lc.v("sres")
                return CRef(f"({rs}.ngaps ? {rs}.gaps[0].start : 0u)", NumT(32))
            if x == "frame_unit":  # framing: this pass cut a unit
                return CRef(f"{lc.v('fres')}.unit", NumT(8))
            if x == "frame_error":  # ... and what the framer met (RG_FRAME_*)
                return CRef(f"{lc.v('fres')}.error", NumT(8))
            if x in _OVERLAP_FIELDS:  # the insert's overlaps with different bytes
                return CRef(f"{lc.v('sres')}.{_OVERLAP_FIELDS[x]}", NumT(32))
            if x == "to_active":
                return CRef(lc.dir_expr(), BOOL)
            if x == "to_passive":
                return CRef(f"(1 - {lc.dir_expr()})", BOOL)
            if x == "current_state":
                return CRef(f"{lc.v('inst')}->fi.state", r.type)
        if k == "state":
            return CRef(lit(lc.states.index(x)), r.type)
        if k == "atom":
            # the latches first, inline: until an atom held on some packet (a FIN for tcp's
            # v.temp.afin) the test is a load, not a call that asks the sequences
            inst = lc.v("inst")
            latched = " | ".join(f"{inst}->vl[{x}][{d}]" for d in range(lc.ndirs))
            return CRef(f"(({latched}) && {lc.t('vtest')}({inst}, {x}))", BOOL)
        if k == "option":  # the layer's value, else the protocol's default
            is_bool, val = lc.d.options[x]
            if is_bool:
                return CRef("1" if val else "0", BOOL)
            return CRef(lit(val), NumT(64))
        if k == "transition":
            tid = lc.d.transitions.index(x) + 1
            return CRef(f"({lc.v('psm')} == {tid})", BOOL)
        if k == "event":
            return CRef(f"{lc.v('ev')}[{lc.ev_index(x)}]", BOOL)
        o = self._owner(name)
        if k in ("field", "foreign_field"):
            return self._var_ref(f"{o.v('h')}.", o.d.fields[x])
        if k in ("temp", "foreign_temp"):
            return self._var_ref(f"{o.v('t')}.", o.d.temps[x])
        if k in ("perm", "foreign_perm"):
            return self._var_ref(f"{o.v('inst')}->", o.d.perms[x])
        raise ValueError(f"layer {lc.name}: cannot translate name {name.dotted!r} ({k})")

    def target(self, name: Name) -> CRef:
        r = name.ref
        o = self._owner(name)
        if r is not None and r.kind == "temp":
            base, v = f"{o.v('t')}.", o.d.temps[name.parts[-1]]
        elif r is not None and r.kind in ("perm", "foreign_perm"):
            base, v = f"{o.v('inst')}->", o.d.perms[name.parts[-1]]
        else:
            raise ValueError(f"layer {self.lc.name}: cannot assign to {name.dotted!r}")
        t: Type = v.type
        if isinstance(t, NumT):
            return CRef(f"{base}{v.name}", t, ctype_of_width(t.width))
        return CRef(f"{base}{v.name}", t)

    def has(self, layout: str) -> str:
        return f"{self.lc.v('h')}.has__{layout}"

    def assemble(self) -> str:
        lc = self.lc
        if not lc.has_seq:
            return "/* assemble(): no sequence in this layer */"
        inst, d = lc.v("inst"), lc.dir_expr()
        assert lc.d.seq is not None
        fn = "rg_seq_massemble" if lc.d.seq.unit == "message" else "rg_seq_assemble"
        return (
            f"{lc.v('sdu')} = {lc.v('has_inst')} ? {fn}(&{inst}->seq[{d}], "
            f"&{lc.t('seqcfg')}, &{lc.v('sres')}) : rg_bytes_empty();"
        )

    def seq_ready_upto(self, offset: str) -> str:
        lc = self.lc
        # every byte below offset (an absolute 32-bit sequence offset) has arrived
        return f"rg_seq_ready_upto(&{lc.v('inst')}->seq[{lc.dir_expr()}], (uint32_t)({offset}))"

    def set_sdu(self, value: CExpr) -> str:
        return f"{self.lc.v('sdu')} = {value.text};"
