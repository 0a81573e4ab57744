"""Checksums and field setters in the generated C (docs/backend.md, checksums and setters).

From each layer's description (ir/layout.py: the fields at a fixed place, the checksum fields,
the pseudo-header fields it lends) this renders:

- the per-layer spans (rg_csum.h): where each layer's header is in the current packet, one
  struct store when the header parsed. Only setters and `--checksums` read them: `rubikgen
  build` compiles with `-DS_SPANS=0` when the handler file names no setter (build.py
  `spans_define`), and then only `--checksums` writes the spans it verifies with, behind the
  test of the flag it does anyway; a rules file with rewrites keeps them always;
- the checksum table and the per-layer verification that `--checksums` turns on;
- `void S_set_<layer>_<field>(void *ctx, uint64_t value)` for every number at a fixed place
  (bit fields too), `void S_set_<layer>_<field>(void *ctx, const uint8_t *value)` for every
  fixed-size byte field (addresses): they write the current frame in network byte order and
  fix up every checksum of the packet that covers the bytes (rg_csum_write);
- `int S_<layer>_strip_option(void *ctx, unsigned kind)` for TCP layers: the option's bytes
  become NOPs, checksums fixed up.

The C renderers (backend/c/, cgen.py) and the templates call in here with one-line hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from rubikgen.ir.layout import HField

from .layer_c import LayerC, c_string

__all__ = ["Setters"]


@dataclass
class _Setter:
    name: str
    proto: str  # its prototype
    body: list[str]


class Setters:
    """The C of checksums and setters for one stack."""

    def __init__(self, S: str, layers: list[LayerC], always: bool = False) -> None:
        self.S = S
        self.always = always  # spans whatever the build says (rules rewrite fields)
        self.layers = layers
        self.by_name = {lc.name: lc for lc in layers}
        self.setters = [s for lc in layers for s in self._layer_setters(lc)]

    # -- the context --------------------------------------------------------------------------
    def ctx_fields(self) -> str:
        n = max(1, len(self.layers))
        return (
            f"    rg_span span[{n}]; /* where each layer is in the current packet (setters) */\n"
            "    uint8_t *frame; /* the current frame: writable (the driver's seam) */\n"
            "    uint32_t caplen;\n"
            "    int checksums; /* rg_ctx_cfg.checksums: verify on input */"
        )

    def ctx_init(self) -> str:
        return "    ctx->checksums = cfg ? cfg->checksums : 0;"

    def packet_start(self) -> str:
        # the frame is the driver's writable copy: setters write into it
        return "    ctx->frame = (uint8_t *)(uintptr_t)data;\n    ctx->caplen = caplen;"

    def spans_macro(self) -> str:
        """The switch of the spans: on unless the build says no setter is called."""
        m = f"{self.S}_SPANS"
        if self.always:
            return f"#undef {m}\n#define {m} 1 /* rules rewrite fields */"
        return (
            f"#ifndef {m}\n#define {m} 1 /* build.py: 0 when no handler calls a setter */\n#endif"
        )

    def _lends(self, lc: LayerC) -> bool:
        return any(cs.pseudo_layer == lc.name for x in self.layers for cs in x.d.checksums)

    def parsed(self, lc: LayerC) -> list[str]:
        """After layer lc's header parsed (err_L == 0): its span, its checksums verified."""
        n, i, S = lc.name, lc.index, self.S
        store = (
            f"ctx->span[{i}] = (rg_span){{(uint8_t *)(uintptr_t)in_{n}.ptr, cur_{n}, "
            f"(uint32_t)in_{n}.len, ctx->pkt_no, 0}};"
        )
        out = [f"if (err_{n} == 0) {{", f"#if {S}_SPANS", f"    {store}"]
        for ph in sorted({cs.pseudo_layer for cs in lc.d.checksums if cs.pseudo_layer}):
            # a setter rewrote the pseudo-header's addresses before this layer was parsed
            pi = self.by_name[ph].index
            out.append(
                f"    if (RG_UNLIKELY(ctx->span[{pi}].ph_delta != 0)) {S}__csum_pend(ctx, {i}u);"
            )
        out.append("#endif")
        if lc.d.checksums or self._lends(lc):
            # --checksums reads the spans of the layer and of the one lending its pseudo-header
            out += [
                "    if (RG_UNLIKELY(ctx->checksums)) {",
                f"#if !{S}_SPANS",
                f"        {store}",
                "#endif",
            ]
            if lc.d.checksums:
                out.append(f"        {S}__csum_check(ctx, {i}u);")
            out.append("    }")
        out.append("}")
        return out

    # -- checksums ----------------------------------------------------------------------------
    def _desc_rows(self) -> list[str]:
        rows = []
        for lc in self.layers:
            for cs in lc.d.checksums:
                ph = self.by_name[cs.pseudo_layer] if cs.pseudo_layer else None
                pd = ph.d.pseudo if ph is not None else None
                algo = "RG_CSUM_CRC32C" if cs.algorithm == "crc32c" else "RG_CSUM_INTERNET"
                cov = "RG_CSUM_LAYER" if cs.covers == "layer" else "RG_CSUM_HEADER"
                if ph is not None and pd is not None:
                    lo = pd.length if pd.length is not None else -1
                    phx = f"{ph.index}, {pd.src}, {pd.dst}, {pd.size}, {lo}, {pd.length_from}"
                else:
                    phx = "-1, 0, 0, 0, -1, 0"
                where = c_string(f"{lc.spec_file}:{cs.line}")
                rows.append(
                    f"    {{{lc.index}, {cs.off}, {algo}, {cov}, {int(cs.zero_none)}, "
                    f"{cs.protocol}, {phx}, {where}}}, /* {lc.name}.{cs.field} */"
                )
        return rows

    def support(self) -> str:
        S = self.S
        rows = self._desc_rows()
        out = [
            self.spans_macro(),
            "",
            "/* Checksums the specs declare (protocol `checksums:`), by layer: rg_csum.h. */",
            f"static const rg_csum_desc {S}__csums[] = {{",
            *(rows or ["    {0, 0, 0, 0, 0, 0, -1, 0, 0, 0, -1, 0, NULL},"]),
            "};",
            f"#define {S}__NCSUMS {len(rows)}u",
            "",
            f"static RG_MAYBE_UNUSED void {S}__csum_pkt(struct {S}_ctx *ctx, rg_csum_pkt *c)",
            "{",
            f"    c->desc = {S}__csums;",
            f"    c->ndesc = {S}__NCSUMS;",
            "    c->spans = ctx->span;",
            "    c->pkt = ctx->pkt_no;",
            "    c->frame = ctx->frame;",
            "    c->caplen = ctx->caplen;",
            "}",
            "",
            "/* --checksums: verify the layer's checksums, count the bad ones */",
            f"static RG_MAYBE_UNUSED void {S}__csum_check(struct {S}_ctx *ctx, unsigned layer)",
            "{",
            "    rg_csum_pkt c;",
            f"    {S}__csum_pkt(ctx, &c);",
            f"    for (unsigned i = 0; i < {S}__NCSUMS; i++)",
            f"        if ({S}__csums[i].layer == layer && rg_csum_verify(&c, &{S}__csums[i]) == 0)",
            "            ctx->stats->layer[layer].checksum_bad++;",
            "}",
            "",
            "/* pseudo-header addresses a setter changed before this layer parsed */",
            f"static RG_MAYBE_UNUSED void {S}__csum_pend(struct {S}_ctx *ctx, unsigned layer)",
            "{",
            "    rg_csum_pkt c;",
            f"    {S}__csum_pkt(ctx, &c);",
            "    rg_csum_pending(&c, layer);",
            "}",
            "",
            "/* bits [bit, bit + w) of b, most significant first, become v's low w bits */",
            "static RG_MAYBE_UNUSED void rg__put_bits(uint8_t *b, unsigned bit, unsigned w, "
            "uint64_t v)",
            "{",
            "    for (unsigned k = 0; k < w; k++) {",
            "        const unsigned at = bit + k, sh = 7u - at % 8u;",
            "        const unsigned one = (unsigned)(v >> (w - 1u - k)) & 1u;",
            "        b[at / 8u] = (uint8_t)((b[at / 8u] & ~(1u << sh)) | (one << sh));",
            "    }",
            "}",
        ]
        # without spans a setter could only do nothing: not defined, so that a call the
        # build's scan of the handler file missed fails to link instead
        out += ["", f"#if {S}_SPANS"]
        for s in self.setters:
            out.append("")
            out.append(s.proto)
            out.append("{")
            out += s.body
            out.append("}")
        out.append(f"#endif /* {S}_SPANS */")
        return "\n".join(out)

    # -- setters ------------------------------------------------------------------------------
    def prototypes(self) -> str:
        if not self.setters:
            return ""
        out = [
            "/* Field setters (rubikgen/backend/setters.py): write the current packet's frame in",
            " * network byte order and fix up every checksum covering the field, the pseudo-header",
            " * and enclosing tunnels included.  Call them from handlers of the packet; they do",
            " * nothing when the layer is not in the current frame (not parsed, reassembled). */",
        ]
        out += [f"{s.proto};" for s in self.setters]
        return "\n".join(out)

    def _layer_setters(self, lc: LayerC) -> list[_Setter]:
        out = []
        for fname, bit in lc.d.fixed_bits.items():
            f = lc.d.fields[fname]
            if f.kind == "num" and f.const is not None:
                continue  # a tag: rewriting it would change what the packet is
            if f.kind != "num" and f.size is None:
                continue  # a slice of variable size: only its start is fixed
            out.append(self._setter(lc, f, bit))
        if lc.d.protocol == "tcp" and "hdr_len" in lc.d.fixed_bits:
            out.append(self._strip(lc))
        return out

    def _head(self, lc: LayerC, end: int) -> list[str]:
        S = self.S
        return [
            f"    struct {S}_ctx *ctx = (struct {S}_ctx *)vctx;",
            "    rg_csum_pkt c;",
            f"    {S}__csum_pkt(ctx, &c);",
            f"    uint8_t *h = rg_csum_header(&c, {lc.index}u, {end}u);",
        ]

    def _setter(self, lc: LayerC, f: HField, bit: int) -> _Setter:
        S, where = self.S, f"{lc.spec_file}:{f.line}"
        name = f"{S}_set_{lc.name}_{f.name}"
        if f.kind != "num":
            n = f.size or 0
            off = bit // 8
            body = [f"    /* {where}: {n} bytes at header offset {off} */"]
            body += self._head(lc, off + n)
            body.append("    if (h != NULL) rg_csum_write(&c, h + " + f"{off}, value, {n}u);")
            return _Setter(name, f"void {name}(void *vctx, const uint8_t *value)", body)
        w = f.width or 64
        first, last = bit // 8, (bit + w - 1) // 8
        nb = last - first + 1
        lead = bit % 8
        body = [f"    /* {where}: {w} bits at header bit {bit} */"]
        body += self._head(lc, last + 1)
        body.append("    if (h == NULL) return;")
        body.append(f"    uint8_t b[{nb}];")
        if lead == 0 and w % 8 == 0 and f.order == "little":
            body.append(
                f"    for (unsigned i = 0; i < {nb}u; i++) b[i] = (uint8_t)(value >> (8u * i));"
            )
        elif lead == 0 and w % 8 == 0:
            body.append(f"    rg__put_be(b, value, {nb}u);")
        else:
            body.append(f"    memcpy(b, h + {first}, {nb}u);")
            body.append(f"    rg__put_bits(b, {lead}u, {w}u, value);")
        body.append(f"    rg_csum_write(&c, h + {first}, b, {nb}u);")
        return _Setter(name, f"void {name}(void *vctx, uint64_t value)", body)

    def _strip(self, lc: LayerC) -> _Setter:
        name = f"{self.S}_{lc.name}_strip_option"
        body = ["    /* TCP options of this kind become NOPs (kind 1): the length is unchanged */"]
        body += [
            f"    struct {self.S}_ctx *ctx = (struct {self.S}_ctx *)vctx;",
            "    rg_csum_pkt c;",
            f"    {self.S}__csum_pkt(ctx, &c);",
            f"    return rg_tcp_strip_option(&c, {lc.index}u, (uint8_t)kind);",
        ]
        return _Setter(name, f"int {name}(void *vctx, unsigned kind)", body)
