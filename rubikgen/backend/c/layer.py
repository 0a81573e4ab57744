"""C renderers of a layer's pass: entering it, parsing its header, counting its error
(Enter, ParseHeader, Error)."""

from __future__ import annotations

from rubikgen.ir import instrs as I

from ..context import CContext
from ..layer_c import LayerC
from .registry import C


def header_zero(ins: I.Enter, lc: LayerC) -> list[str]:
    """The enter's clear of the header struct (every target that parses needs it)."""
    if ins.zero == "conditional":
        return lc.zero_conditional()
    return [f"h_{lc.name} = {lc.t('hdr_init')};"]


def parse_lines(lc: LayerC) -> list[str]:
    """The header program and the sdu after it (the parse itself, without the hooks)."""
    n = lc.name
    code = lc.header_code()
    lines = [code] if code else []
    if lc._hc_jumps:
        lines.append(f"HE_{n}:")
    lines.append(
        f"if (err_{n} == 0) sdu_{n} = rg_bytes_make(in_{n}.ptr + cur_{n}, in_{n}.len - cur_{n});"
    )
    return lines


@C.register(I.Enter)
def enter(ins: I.Enter, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    lines = header_zero(ins, lc)
    rz = cx.walk.resets.add
    lines += [
        rz(f"t_{n}", f"t_{n} = {lc.t('tmp_init')};"),
        rz(f"ev_{n}", f"memset(ev_{n}, 0, sizeof ev_{n});"),
        rz(f"sres_{n}", f"rg_zero(&sres_{n}, sizeof sres_{n});"),
        f"psm_{n} = 0; cur_{n} = 0; err_{n} = 0; loop_{n} = 0;",
        f"has_inst_{n} = 0; dir_{n} = 0; inst_{n} = &ctx->scratch_{n};",
        *([f"flow_{n} = NULL;"] if lc.d.find_table is not None else []),
        f"sdu_{n} = rg_bytes_empty();",
        f"rg_stats_layer_packet(&ctx->stats->layer[{lc.index}], in_{n}.len);",
    ]
    return "\n".join(lines)


@C.register(I.ParseHeader)
def parse_header(ins: I.ParseHeader, lc: LayerC, cx: CContext) -> str:
    lines = parse_lines(lc) + cx.setters.parsed(lc)
    return "\n".join(lines)


@C.register(I.Error)
def error(ins: I.Error, lc: LayerC, cx: CContext) -> str:
    return (
        f"rg_stats_error(&ctx->stats->layer[{lc.index}], err_{lc.name} - 1u);\nrc = RG_PKT_ERROR;"
    )
