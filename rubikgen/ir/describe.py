"""LayerDesc (ir/layout.py) of one layer, from sema's results and the layer's semantic model
(each expression asked by the path the spec writes it at)."""

from __future__ import annotations

from typing import Any

from rubikgen.front.source import Path
from rubikgen.models.protocol import (
    AnyUntilStep,
    ElifStep,
    ElseStep,
    FieldSpec,
    IfStep,
    Linger,
    parse_length,
)
from rubikgen.sema.builtins import BUILTIN_EVENTS
from rubikgen.sema.info import FieldInfo, VarInfo
from rubikgen.sema.model import LayerModel
from rubikgen.sema.stack_info import LayerInfo
from rubikgen.sema.transforms import TRANSFORMS

from .layout import (
    AnyUntil,
    CsumDesc,
    Elif,
    Else,
    FrameDesc,
    HField,
    If,
    KeyItem,
    LayerDesc,
    Parse,
    PseudoDesc,
    SeqDesc,
    Step,
    Var,
)

__all__ = ["describe_layer"]


def describe_layer(li: LayerInfo, x: LayerModel, spec_file: str, transforms: set[str]) -> LayerDesc:
    proto = li.protocol
    m = proto.model
    line = proto.smap.pos

    def hfield(f: FieldInfo) -> HField:
        key = "bits" if f.length_unit == "bits" else "bytes"
        n = x.expr(f.path + (key,)) if f.length_expr is not None else None
        return HField(f.name, f.layout, f.kind, line(f.path).line, f.width, f.size, n,
                      f.length_unit, f.order, f.const)  # fmt: skip

    def var(v: VarInfo, space: str) -> Var:
        init = x.expr(v.path + ("init",)) if v.init is not None else None
        # the variable bound as its initialiser assigns it, so the back-end resolves nothing
        target = x.name((space, v.name)) if init is not None else None
        return Var(v.name, v.kind, line(v.path).line, v.width, v.size, init, target)

    fields = {n: hfield(f) for n, f in proto.fields.items()}
    d = LayerDesc(
        li.name,
        proto.name,
        spec_file,
        line(("header",)).line,
        proto.has_instance,
        proto.bidirectional,
        fields=fields,
        layouts={n: [fields[f.name] for f in fs] for n, fs in proto.layouts.items()},
        layout_lines={n: line(("layouts", n)).line for n in proto.layouts},
        header=_steps(m.header, ("header",), x, line(("header",)).line),
        temps={n: var(v, "temp") for n, v in proto.temps.items()},
        perms={n: var(v, "perm") for n, v in proto.perms.items()},
        states=list(proto.states),
        transitions=list(proto.transitions),
        events=list(m.events) + list(BUILTIN_EVENTS),
        transform_states={t: TRANSFORMS[t].state_type for t in sorted(transforms)},
    )
    psm = m.psm
    if psm is not None:
        d.has_psm = True
        if psm.start is not None:
            s = psm.start[0] if isinstance(psm.start, list) else psm.start
            d.start_state = d.states.index(s)
        d.accept = [d.states.index(s) for s in psm.accept]
        for t in psm.setup:
            i = d.transitions.index(t)
            if i < 64:
                d.setup_mask |= 1 << i
    if x.timeout_s is not None:
        d.timeout_ns = int(x.timeout_s * 1e9)
    lg = m.linger
    if x.linger_s is not None:
        d.linger_ns = int(x.linger_s * 1e9)
        if isinstance(lg, Linger) and lg.reopen is not None:
            d.linger_reopen = x.expr(("linger", "reopen"))
    for vn, fd in m.perm.items():
        if isinstance(fd, FieldSpec) and fd.record:
            rec = fd.record
            d.records[vn] = (
                (vn, [], "")
                if rec is True
                else (rec.name or vn, list(rec.names), rec.letters or "")
            )
    for n, o in m.options.items():
        val = li.options.get(n, o.default)
        d.options[n] = (isinstance(o.default, bool), int(val))
    sq = m.sequence
    if sq is not None:
        d.seq = SeqDesc(
            x.expr(("sequence", "meta")),
            x.expr(("sequence", "data")),
            x.expr(("sequence", "data_len")) if sq.data_len is not None else None,
            x.expr(("sequence", "early")) if sq.early is not None else None,
            (x.expr(("sequence", "window", 0)), x.expr(("sequence", "window", 1)))
            if sq.window
            else None,
            sq.unit,
            sq.zero_based,
            sq.policy,
            sq.buffer_data,
            sq.max_bytes,
            sq.max_blocks,
            sq.drain,
            line(("sequence", "drain")).line,
            _retain(sq.retain, d.options) and sq.buffer_data and sq.unit == "byte",
            x.expr(("sequence", "ack")) if sq.ack is not None else None,
        )
    fr = m.framing
    if fr is not None:
        fl = line(("framing",)).line
        lp = parse_length(fr.length) if fr.length is not None else None
        if lp is not None:
            d.frame = FrameDesc("length", fr.max, fl, lp.add, lp.mul, lp.width, lp.little, lp.at)
        elif fr.delimiter is not None:
            d.frame = FrameDesc("delimiter", fr.max, fl, delimiter=fr.delimiter.encode())
        else:
            d.frame = FrameDesc("size", fr.max, fl, size=fr.size or 0)
    if proto.has_instance:
        _key(d, m.selector, ("selector",), x)
    if m.lookup is not None:
        # the same items as a selector's, kept apart: the layer has no table of its own
        found = LayerDesc(d.name, d.protocol, d.spec_file, d.header_line, False, False)
        _key(found, m.lookup, ("lookup",), x)
        d.find_table = li.bindings[m.lookup.table]
        d.find_a, d.find_p, d.find_common = found.key_a, found.key_p, found.key_common
    _checksums(d, li, x.fixed_bits, line)
    return d


def _retain(v: bool | str, options: dict[str, tuple[bool, int]]) -> bool:
    """sequence.retain: a constant, or a boolean option's value for this layer (sema checked
    the name)."""
    if isinstance(v, bool):
        return v
    return bool(options.get(v.removeprefix("option."), (True, 0))[1])


def _checksums(d: LayerDesc, li: LayerInfo, fixed_bits: dict[str, int], line: Any) -> None:
    proto = li.protocol
    m = proto.model
    d.fixed_bits = dict(fixed_bits)
    for fname, cs in m.checksums.items():
        pl = li.bindings.get(cs.pseudo_header) if cs.pseudo_header else None
        d.checksums.append(
            CsumDesc(fname, d.fixed_bits[fname] // 8, cs.algorithm, cs.covers, pl,
                     cs.protocol or 0, cs.zero_means_none, line(("checksums", fname)).line)
        )  # fmt: skip
    ph = m.pseudo_header
    if ph is not None:
        fb = d.fixed_bits
        size = proto.fields[ph.src].size or 4
        ln = fb[ph.length] // 8 if ph.length is not None else None
        d.pseudo = PseudoDesc(fb[ph.src] // 8, fb[ph.dst] // 8, size, ln, ph.length_from)


def _key(d: LayerDesc, sel: Any, at: Path, x: LayerModel) -> None:
    """A selector's (or a lookup's) items, each the tree sema resolved at its path."""
    if isinstance(sel, list):
        a, p, common = sel, None, []
        pa: Path = at
    else:
        common = list(sel.common)
        if sel.sides is not None:
            a, p = sel.sides[0], sel.sides[1]
            pa = at + ("sides", 0)
        else:
            a, p = sel.key or [], None
            pa = at + ("key",)

    def items(texts: list[str], base: Path) -> list[KeyItem]:
        return [KeyItem(t, x.expr(base + (i,))) for i, t in enumerate(texts)]

    d.key_a = items(a, pa)
    d.key_p = items(p, at + ("sides", 1)) if p is not None else None
    d.key_common = items(common, at + ("common",))


def _steps(steps: list[Any], at: Path, x: LayerModel, header_line: int) -> list[Step]:
    """The header program at ``at`` (its if/elif/else items and any_until loops)."""
    out: list[Step] = []
    for i, s in enumerate(steps):
        sp = at + (i,)
        if isinstance(s, str):
            out.append(Parse(s))
        elif isinstance(s, IfStep):
            out.append(If(x.expr(sp + ("if",)), _steps(s.then, sp + ("then",), x, header_line)))
        elif isinstance(s, ElifStep):
            out.append(Elif(x.expr(sp + ("elif",)), _steps(s.then, sp + ("then",), x, header_line)))
        elif isinstance(s, ElseStep):
            out.append(Else(_steps(s.else_, sp + ("else",), x, header_line)))
        elif isinstance(s, AnyUntilStep):
            au = s.any_until
            until = x.expr(sp + ("any_until", "until")) if au.until is not None else None
            out.append(AnyUntil(list(au.layouts), au.max, until, header_line))
    return out
