"""C renderers of handler calls: a stack handler, a protocol callback, and the lifecycle
handlers an instance's close runs (Handler, Callback)."""

from __future__ import annotations

from rubikgen.ir import instrs as I
from rubikgen.ir.layout import Arg

from ..cexpr import cond_to_c, to_c
from ..context import CContext, HandlerC
from ..layer_c import LayerC
from .registry import C


def handler_call(cx: CContext, h: HandlerC, args: list[Arg], lc: LayerC, end: str = "0") -> str:
    """A handler call; `end` is rg_hctx.end / rg_call.end (0 in a packet)."""
    n = lc.name
    env = lc.env()
    inits = []
    vals = []
    for (an, ct, kind), a in zip(h.args, args, strict=True):
        ce = to_c(a.expr, env)
        if kind == "bytes":
            inits.append(f".{an} = {ce.text}")
            vals.append(f"{{RG_VAL_BYTES, 0, a_.{an}}}")
        else:
            inits.append(f".{an} = ({ct}){ce.text}")
            vals.append(f"{{RG_VAL_NUM, a_.{an}, {{rg_empty_byte, 0}}}}")
    hidx = list(cx.handlers).index(h.name)
    flow = f"has_inst_{n} ? &inst_{n}->fi : NULL"
    user = f"has_inst_{n} ? &inst_{n}->fi.user[dir_{n}] : NULL"
    if lc.d.find_table is not None:  # the instance the lookup found (its user slots: NULL)
        flow, user = f"flow_{n}", "NULL"
    lines = [
        f"{h.struct} a_ = {{{', '.join(inits) or '0'}}};",
        f"rg_hctx hc_ = {{{flow}, {user}, "
        f"(uint8_t)dir_{n}, {lc.index}, ctx->clock.now, ctx, {end}, &ctx->verdict}};",
        f"{h.name}(&a_, &hc_);",
        "ctx->calls++;",
        "if (ctx->obs && ctx->obs->on_call) {",
        f"    const rg_val v_[{max(1, len(vals))}] = {{{', '.join(vals) or '{0, 0, {rg_empty_byte, 0}}'}}};",
        f"    rg_call c_ = {{{hidx}, {lc.index}, (uint8_t)dir_{n}, {flow}, "
        f"ctx->clock.now, ctx->pkt_no, v_, {end}, &ctx->verdict}};",
        "    ctx->obs->on_call(ctx->obs->self, &c_);",
        "}",
    ]
    return "\n".join(lines)


def lifecycle(cx: CContext, lc: LayerC) -> str:
    """The lifecycle handlers of a layer, for its lifecycle entry (`L_x_close`): each runs
    when the instance ends for a reason its `with` covers and its `when` holds. The locals
    the per-packet code uses are bound to the ending instance (direction 0)."""
    hs = cx.prog.layers[lc.name].lifecycle
    if not hs:
        return ""
    n = lc.name
    env = lc.env()
    out = [
        f"struct {lc.t('inst')} *inst_{n} = in;",
        f"const int has_inst_{n} = 1, dir_{n} = 0;",
    ]
    close_c = cx.sd.close_c
    for hn, reasons in hs:
        h = cx.sd.handlers[hn]
        where = f"{cx.sd.file}:{h.line}"
        conds = [" || ".join(f"reason == {close_c[r]}" for r in reasons) or "0"]
        if h.when is not None:
            conds.append(cond_to_c(h.when, env))
        body = handler_call(cx, cx.handlers[hn], h.args, lc, "RG_END(reason)")
        out.append(f"if (({') && ('.join(conds)})) {{ /* handler {hn}: {where} */")
        out += ["    " + ln for ln in body.splitlines()]
        out.append("}")
    return "\n".join("    " + ln for ln in out)


def late_handlers(cx: CContext, n: str) -> list[str]:
    """A late packet whose instance no verdict marked runs the layer's packet handlers
    that need nothing but its headers and the lingering record (LayerIR.late), so that it
    is rewritten and judged as the live instance's packets were (inside Z_<layer>)."""
    late = cx.prog.layers[n].late
    if not late:
        return []
    lc = cx.layers[n]
    out = [
        f"if ((inst_{n}->fi.flags & RG_FI_VERDICTS) == 0) {{ /* its packet handlers */",
        f"    has_inst_{n} = 1;",
    ]
    for hn in late:
        h = cx.sd.handlers[hn]
        call = handler_call(cx, cx.handlers[hn], h.args, lc).splitlines()
        out.append(f"    {{ /* {h.src} handler {hn} */")
        if h.when is not None:
            out.append(f"        if ({cond_to_c(h.when, lc.env())}) {{")
            out += ["            " + x for x in call]
            out.append("        }")
        else:
            out += ["        " + x for x in call]
        out.append("    }")
    return [*out, "}"]


@C.register(I.Handler)
def handler(ins: I.Handler, lc: LayerC, cx: CContext) -> str:
    name = ins.name
    return handler_call(cx, cx.handlers[name], cx.sd.handlers[name].args, lc)


@C.register(I.Callback)
def callback(ins: I.Callback, lc: LayerC, cx: CContext) -> str:
    return handler_call(cx, cx.handlers[ins.name], ins.args, lc)
