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

from dataclasses import dataclass, field, replace
from typing import Any

from rubikgen import specpath
from rubikgen.expr import parse_expr
from rubikgen.expr.ast import Name
from rubikgen.expr.types import BOOL, BytesT, NumT, Type
from rubikgen.models.common import expr_text
from rubikgen.models.protocol import AnyUntilStep, ElifStep, ElseStep, IfStep
from rubikgen.sema.builtins import BUILTIN_EVENTS, OVERLAP_VALUES
from rubikgen.sema.protocol import parse_duration
from rubikgen.sema.scope import STATE_T, field_type
from rubikgen.sema.stack import LayerInfo
from rubikgen.sema.symbols import FieldInfo, VarInfo
from rubikgen.sema.transforms import TRANSFORMS

from .cexpr import CExpr, CRef, cond_to_c, lit, to_c

BUILTIN_EVENT_NAMES = list(BUILTIN_EVENTS)


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

    li: LayerInfo
    index: int
    layers: dict[str, LayerC]  # all layers of the stack, by name (for parameter references)
    stack_dir: str
    events: list[str] = field(
        default_factory=list
    )  # fired-flag slots: own events, builtins, handlers
    key_fwd: list[KeyPart] = field(default_factory=list)
    key_rev: list[KeyPart] = field(default_factory=list)
    key_len: int = 0
    atoms: int = 0

    # -- names ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.li.name

    @property
    def proto(self) -> Any:
        return self.li.protocol

    @property
    def model(self) -> Any:
        return self.li.protocol.model

    def t(self, what: str) -> str:
        """Type / function name of this layer: L_<layer>_<what>."""
        return f"L_{self.name}_{what}"

    def v(self, what: str) -> str:
        """Local variable of this layer in the per-packet function."""
        return f"{what}_{self.name}"

    @property
    def spec_file(self) -> str:
        return specpath.display(self.proto.file, self.stack_dir)

    def line(self, path: tuple[Any, ...]) -> int:
        return self.proto.smap.pos(path).line

    @property
    def has_instance(self) -> bool:
        return self.proto.has_instance

    @property
    def bidir(self) -> bool:
        return self.proto.bidirectional

    @property
    def ndirs(self) -> int:
        return 2 if self.bidir else 1

    @property
    def has_seq(self) -> bool:
        return self.model.sequence is not None and self.has_instance

    @property
    def states(self) -> list[str]:
        return list(self.proto.states)

    @property
    def start_state(self) -> int:
        psm = self.model.psm
        if psm is None or psm.start is None:
            return 0
        s = psm.start[0] if isinstance(psm.start, list) else psm.start
        return self.states.index(s)

    @property
    def setup_mask(self) -> int:
        psm = self.model.psm
        mask = 0
        for t in psm.setup if psm is not None else []:
            i = self.proto.transitions.index(t)
            if i < 64:
                mask |= 1 << i
        return mask

    @property
    def timeout_ns(self) -> int:
        t = self.model.timeout
        if t is None:
            return 0
        sec = parse_duration(t)
        return int(sec * 1e9) if sec else 0

    def ev_index(self, name: str) -> int:
        return self.events.index(name)

    def dir_expr(self) -> str:
        return self.v("dir") if self.bidir else "0"

    # -- setup ------------------------------------------------------------------------------
    def prepare(self, handlers: list[str], transforms: list[str] | None = None) -> None:
        self.events = list(self.model.events) + BUILTIN_EVENT_NAMES + list(handlers)
        self.transforms = sorted(set(transforms or []))
        if self.has_instance:
            self._key()

    def _key(self) -> None:
        sel = self.model.selector
        if isinstance(sel, list):
            fwd, rev, common = sel, None, []
        else:
            common = list(sel.common)
            if sel.sides is not None:
                fwd, rev = sel.sides[0], sel.sides[1]
            else:
                fwd, rev = sel.key or [], None

        def parts(items: list[str], side: int) -> list[KeyPart]:
            out = []
            for it in items:
                e = parse_expr(it)
                ce = to_c(e, self.env())
                if isinstance(ce.type, NumT):
                    out.append(KeyPart(it, e, "num", (ce.type.width + 7) // 8, side))
                else:
                    assert isinstance(ce.type, BytesT) and ce.type.size is not None
                    out.append(KeyPart(it, e, "bytes", ce.type.size, side))
            return out

        # A bidirectional key is both half keys: (a, p, common) stored forward and
        # (p, a, common) swapped, so one probe with the packet's (src half, dst half) finds
        # the instance from either side.
        a = parts(fwd, 0)
        c = parts(common, 1)
        if rev is not None:
            p = parts(rev, 2)
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
    def header_fields(self) -> list[FieldInfo]:
        return list(self.proto.fields.values())

    def hdr_struct(self) -> str:
        lines = [f"/* {self.spec_file}: header of layer {self.name} ({self.proto.name}) */"]
        lines.append(f"struct {self.t('hdr')} {{")
        for f in self.header_fields():
            ln = self.line(f.path)
            if f.kind == "num":
                lines.append(f"    {ctype_of_width(f.width or 64)} {f.name}; /* line {ln} */")
            else:
                lines.append(f"    rg_bytes {f.name}; /* line {ln} */")
        for lay in self.proto.layouts:
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
    def _var_decl(v: VarInfo) -> str:
        if v.kind == "num":
            return f"{ctype_of_width(v.width or 64)} {v.name};"
        if v.size is not None:
            return f"uint8_t {v.name}[{v.size}];"
        return f"rg_bytes {v.name};"

    def tmp_struct(self) -> str:
        lines = [f"struct {self.t('tmp')} {{"]
        for v in self.proto.temps.values():
            lines.append(f"    {self._var_decl(v)} /* {self.spec_file}:{self.line(v.path)} */")
        lines.append("    uint8_t pad__;")
        lines.append("};")
        init = [f".{v.name} = {{rg_empty_byte, 0}}" for v in self.proto.temps.values()
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
        if self.atoms:
            lines.append(f"    uint32_t vend[{self.atoms}][{self.ndirs}]; /* virtual latches */")
            lines.append(f"    uint8_t vl[{self.atoms}][{self.ndirs}];")
        for v in self.proto.perms.values():
            lines.append(f"    {self._var_decl(v)} /* {self.spec_file}:{self.line(v.path)} */")
        for tn in getattr(self, "transforms", []):
            st = TRANSFORMS[tn].state_type
            lines.append(f"    {st} xf_{tn}; /* state of transform {tn} (a key cache) */")
        lines.append("};")
        return "\n".join(lines)

    def always_parsed(self) -> set[str]:
        """Layouts the header program parses on every packet that parses at all."""
        return {s for s in self.model.header if isinstance(s, str)}

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
        for lay in self.proto.layouts:
            if lay not in always:
                out.append(f"{h}.has__{lay} = 0;")
        return out

    # -- header parser ----------------------------------------------------------------------
    def header_code(self) -> str:
        """C statements parsing the header from in_L at cur_L; on failure they set err_L and
        jump to HE_L. Returns '' when the header program is empty."""
        self._hc_jumps = 0
        self._tmp = 0
        body = self._steps(self.model.header, 1)
        return "\n".join(body)

    def _fail(self, reason: str) -> str:
        self._hc_jumps += 1
        # err_L is the reason + 1: 0 means "parsed" (RG_REASON_TRUNCATED is 0)
        return f"{{ {self.v('err')} = 1u + {reason}; goto HE_{self.name}; }}"

    def _steps(self, steps: list[Any], ind: int) -> list[str]:
        out: list[str] = []
        pad = "    " * ind
        env = self.env()
        for s in steps:
            if isinstance(s, str):
                out += self._layout(s, ind)
            elif isinstance(s, IfStep):
                c = cond_to_c(parse_expr(expr_text(s.if_)), env)
                out.append(f"{pad}if ({c}) {{")
                out += self._steps(s.then, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, ElifStep):
                c = cond_to_c(parse_expr(expr_text(s.elif_)), env)
                out[-1] = f"{pad}}} else if ({c}) {{"
                out += self._steps(s.then, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, ElseStep):
                out[-1] = f"{pad}}} else {{"
                out += self._steps(s.else_, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, AnyUntilStep):
                out += self._any_until(s, ind)
        return out

    def _load(self, f: FieldInfo, base: str, bit: int) -> str:
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
        fields = self.proto.layouts[lname]
        h, cur, inp = self.v("h"), self.v("cur"), self.v("in")
        out = [f"{pad}/* layout {lname} ({self.spec_file}:{self.line(('layouts', lname))}) */"]
        env = self.env()
        chunk: list[tuple[FieldInfo, int]] = []
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
            assert f.length_expr is not None
            n = to_c(parse_expr(f.length_expr), env).text
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

    def _any_until(self, s: AnyUntilStep, ind: int) -> list[str]:
        au = s.any_until
        pad = "    " * ind
        inp, cur = self.v("in"), self.v("cur")
        firsts = [self.proto.layouts[n][0] for n in au.layouts]
        tw = firsts[0].width or 8
        order = firsts[0].order
        self._tmp += 1
        k = self._tmp
        it, stop = f"it{k}_", f"stop{k}_"
        if tw == 8:
            load = f"rg_load_u8({inp}.ptr + {cur})"
        else:
            load = f"rg_load_{'le' if order == 'little' else 'be'}16({inp}.ptr + {cur})"
        out = [f"{pad}{{ /* any_until ({self.spec_file}:{self.line(('header',))}) */"]
        out.append(f"{pad}    unsigned {it} = 0;")
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
        out.append(f"{pad}        if ({stop} || ++{it} >= {au.max}u) break;")
        if au.until is not None:
            c = cond_to_c(parse_expr(expr_text(au.until)), self.env())
            out.append(f"{pad}        if ({c}) break;")
        out.append(f"{pad}    }}")
        out.append(f"{pad}}}")
        return out


class LayerEnv:
    """cexpr.CEnv for one layer."""

    def __init__(self, lc: LayerC, create: bool = False) -> None:
        self.lc = lc
        self.create = create

    def _bound(self, param: str) -> LayerC:
        return self.lc.layers[self.lc.li.bindings[param]]

    @staticmethod
    def _var_ref(base: str, v: VarInfo | FieldInfo) -> CRef:
        t = field_type(v)
        if isinstance(t, BytesT) and isinstance(v, VarInfo) and v.size is not None:
            return CRef(f"rg_bytes_make({base}{v.name}, {v.size})", t)
        return CRef(f"{base}{v.name}", t)

    def ref(self, name: Name) -> CRef:
        lc = self.lc
        p = name.parts
        inp, cur = lc.v("in"), lc.v("cur")
        if len(p) == 1:
            x = p[0]
            if x == "input":  # the whole input of this pass, header included
                return CRef(inp, BytesT(None))
            if x == "payload":
                return CRef(f"rg_bytes_make({inp}.ptr + {cur}, {inp}.len - {cur})", BytesT(None))
            if x == "input":
                return CRef(inp, BytesT(None))
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
                r = lc.v("sres")
                return CRef(f"({r}.ngaps ? {r}.gaps[0].start : 0u)", NumT(32))
            if x in OVERLAP_VALUES:  # the insert's overlaps with different bytes
                field = {
                    "overlap_seq": "ovl_seq",
                    "overlap_len": "ovl_bytes",
                    "overlap_new": "ovl_new",
                }
                return CRef(f"{lc.v('sres')}.{field[x]}", NumT(32))
            if x == "to_active":
                return CRef(lc.dir_expr(), BOOL)
            if x == "to_passive":
                return CRef(f"(1 - {lc.dir_expr()})", BOOL)
            if x == "current_state":
                return CRef(f"{lc.v('inst')}->fi.state", STATE_T)
            if x in lc.states:
                return CRef(lit(lc.states.index(x)), STATE_T)
            if x in ("true", "false"):
                return CRef("1" if x == "true" else "0", BOOL)
        if len(p) == 2:
            ns, n = p
            if ns == "__v":
                return CRef(f"{lc.t('vtest')}({lc.v('inst')}, {n})", BOOL)
            if ns == "option":  # the layer's value, else the protocol's default
                d = lc.proto.model.options[n].default
                val = lc.li.options.get(n, d)
                if isinstance(d, bool):
                    return CRef("1" if val else "0", BOOL)
                return CRef(lit(int(val)), NumT(64))
            if ns == "header":
                return self._var_ref(f"{lc.v('h')}.", lc.proto.fields[n])
            if ns == "temp":
                return self._var_ref(f"{lc.v('t')}.", lc.proto.temps[n])
            if ns == "perm":
                return self._var_ref(f"{lc.v('inst')}->", lc.proto.perms[n])
            if ns == "psm":
                tid = lc.proto.transitions.index(n) + 1
                return CRef(f"({lc.v('psm')} == {tid})", BOOL)
            if ns == "event":
                return CRef(f"{lc.v('ev')}[{lc.ev_index(n)}]", BOOL)
        if len(p) == 3:
            other = self._bound(p[0])
            ns, n = p[1], p[2]
            if ns == "header":
                return self._var_ref(f"{other.v('h')}.", other.proto.fields[n])
            if ns == "temp":
                return self._var_ref(f"{other.v('t')}.", other.proto.temps[n])
            if ns == "perm":
                return self._var_ref(f"{other.v('inst')}->", other.proto.perms[n])
        raise ValueError(f"layer {lc.name}: cannot translate name {name.dotted!r}")

    def target(self, name: Name) -> CRef:
        lc = self.lc
        p = name.parts
        if len(p) == 2:
            base, owner = (f"{lc.v('t')}.", lc.proto.temps) if p[0] == "temp" else (
                f"{lc.v('inst')}->", lc.proto.perms)  # fmt: skip
            v = owner[p[1]]
        else:
            other = self._bound(p[0])
            base, v = f"{other.v('inst')}->", other.proto.perms[p[2]]
        t: Type = field_type(v)
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
        fn = "rg_seq_massemble" if lc.model.sequence.unit == "message" else "rg_seq_assemble"
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
