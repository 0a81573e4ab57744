"""C renderer of runtime transforms (Transform), and the context fields they need."""

from __future__ import annotations

from rubikgen.ir import instrs as I

from ..cexpr import to_c
from ..context import CContext
from ..layer_c import LayerC, c_string
from .registry import C


@C.register(I.Transform)
def transform(ins: I.Transform, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    spec = cx.sd.transforms[ins.name]
    env = lc.env()
    vals = {an: to_c(v, env).text for an, v in ins.args.items()}
    lines = ["{"]
    cargs = []
    for an, kind, _doc in spec.params:
        if kind == "bytes":
            lines.append(f"    rg_bytes xa_{an} = {vals[an]};")
            cargs += [f"xa_{an}.ptr", f"xa_{an}.len"]
        else:
            lines.append(f"    uint64_t xa_{an} = {vals[an]};")
            cargs.append(f"xa_{an}")
    if spec.name == "quic_initial":
        call = (
            f"{spec.call}(ctx->xfc_{spec.name}, &inst_{n}->xf_{spec.name}, xa_packet.ptr, "
            "xa_packet.len, xa_pn_offset > xa_packet.len ? SIZE_MAX : (size_t)xa_pn_offset, "
            "xa_cid.ptr, xa_cid.len, (uint32_t)xa_version, xa_server != 0, "
            f"ctx->xout_{n}, {spec.out_max}, &xl_, NULL)"
        )
    else:  # pragma: no cover - one transform so far
        raise ValueError(f"no C call for transform {spec.name}")
    user = cx.sd.user_reasons
    lines += [
        "    size_t xl_ = 0;",
        f"    int xr_ = {call};",
        f"    sdu_{n} = xr_ == 0 ? rg_bytes_make(ctx->xout_{n}, xl_) : rg_bytes_empty();",
        "    switch (xr_) { /* failures: counted, the packet goes on with an empty sdu */",
        "    case 0: break;",
    ]
    for code, reason in spec.failures:
        r = reason if reason.startswith("RG_REASON_") else f"RG_REASON_USER + {user.index(reason)}"
        lines.append(
            f"    case {code}: rg_stats_error(&ctx->stats->layer[{lc.index}], {r}); break;"
        )
    lines += [
        f"    default: rg_stats_error(&ctx->stats->layer[{lc.index}], RG_REASON_OTHER); break;",
        "    }",
        "}",
    ]
    return "\n".join(lines)


def transform_support(cx: CContext) -> dict[str, str]:
    """C for the context: per-worker transform contexts, per-layer output buffers, the
    names of the transforms' failure reasons."""
    fields, new, free = [], [], []
    xf = cx.sd.transforms
    includes = sorted({xf[t].header for t in cx.transforms})
    for t in cx.transforms:
        spec = xf[t]
        fields.append(f"    {spec.ctx_type} *xfc_{t};")
        new.append(f"    ctx->xfc_{t} = {spec.ctx_new};")
        new.append(f"    if (ctx->xfc_{t} == NULL) goto fail;")
        free.append(f"    {spec.ctx_free}(ctx->xfc_{t});")
    for lc in cx.layers.values():
        if not lc.transforms:
            continue
        size = max(xf[t].out_max for t in lc.transforms)
        fields.append(f"    uint8_t *xout_{lc.name}; /* transform output ({size} bytes) */")
        new.append(f"    ctx->xout_{lc.name} = (uint8_t *)malloc({size});")
        new.append(f"    if (ctx->xout_{lc.name} == NULL) goto fail;")
        free.append(f"    free(ctx->xout_{lc.name});")
    if cx.transforms:
        for k, r in enumerate(cx.sd.user_reasons):
            new.append(
                f"    rg_stats_set_reason_name(ctx->stats, RG_REASON_USER + {k}, {c_string(r)});"
            )
    if cx.rules:
        fields.append(cx.rules.ctx_fields())
        new.append(cx.rules.ctx_new())
        free.append(cx.rules.ctx_free())
    return {
        "includes": "".join(f'#include "{h}"\n' for h in includes),
        "fields": "\n".join(fields),
        "new": "\n".join(new),
        "free": "\n".join(free),
    }
