"""The locals every function walking the program's blocks declares (the per-packet function
and the burst stage share them: same names, same labels)."""

from __future__ import annotations

from collections.abc import Callable

from rubikgen.expr.ast import Name, walk
from rubikgen.ir.nodes import Block

from .context import CContext, looped
from .keywords import windows
from .layer_c import c_comment


def entry_switch(cx: CContext, label: Callable[[str], str], fail: str) -> list[str]:
    """The function's dispatch on the entry layer (`fail` returned for an unknown one)."""
    out = ["    switch (entry) {"]
    for e in sorted({cx.prog.entries[k] for k in cx.prog.entries}):
        lc = cx.layers[e]
        out += [
            f"    case {lc.index}: /* entry layer {e} */",
            f"        in_{e} = rg_bytes_make(data, caplen);",
            f"        ret_{e} = 0;",
            f"        rep_{e} = 0;",
            f"        goto {label(cx.prog.layers[e].entry)};",
        ]
    return out + ["    default:", f"        return {fail};", "    }"]


def block_head(name: str, b: Block, targets: set[str], label: Callable[[str], str]) -> list[str]:
    """A block's label (a comment when nothing jumps there) with its spec position, and its
    opening brace."""
    src = f" {c_comment(str(b.src))}" if b.src else ""
    head = f"{label(name)}: /* {name}{src} */" if name in targets else f"    /* {name}{src} */"
    return [head, "    {"]


def loop_key_headers(cx: CContext) -> set[str]:
    """Layers whose header a self-looping layer's key reads (GRE's outer addresses): the
    next pass builds its key again after the layers above returned."""
    out: set[str] = set()
    for lc in cx.layers.values():
        if cx.max_repeat.get(lc.name, 0):
            for p in lc.key_fwd + lc.key_rev:
                for x in walk(p.expr):
                    if isinstance(x, Name) and x.ref is not None and x.ref.owner:
                        out.add(x.ref.owner)
    return out


def frame_locals(cx: CContext) -> str:
    """The locals of a function walking the blocks (the per-packet one, the burst stage)."""
    out = []
    loop_keys = loop_key_headers(cx)
    for lc in cx.layers.values():
        n = lc.name
        out.append(f"    /* layer {n} */")
        # a self-looping layer's loop condition (and its key, on the next pass) reads
        # headers in the block the layers above return to; gcc cannot follow the returns (a
        # switch) and would warn that they may be unset, so those few headers start
        # initialised (one small struct copy)
        # (the rules read copies of the fields they use, rf_L_F, taken by RuleRead)
        init = f" = {lc.t('hdr_init')}" if cx.max_repeat.get(lc.name, 0) or n in loop_keys else ""
        out.append(f"    struct {lc.t('hdr')} h_{n} RG_MAYBE_UNUSED{init};")
        tinit = f" = {lc.t('tmp_init')}" if cx.max_repeat.get(lc.name, 0) else ""
        out.append(f"    struct {lc.t('tmp')} t_{n} RG_MAYBE_UNUSED{tinit};")
        out.append(f"    struct {lc.t('inst')} *inst_{n} RG_MAYBE_UNUSED = &ctx->scratch_{n};")
        out.append(f"    int has_inst_{n} RG_MAYBE_UNUSED = 0, dir_{n} RG_MAYBE_UNUSED = 0;")
        if lc.d.find_table is not None:  # lookup: the instance of another layer found
            out.append(f"    const rg_flow_info *flow_{n} RG_MAYBE_UNUSED = NULL;")
        out.append(f"    unsigned err_{n} RG_MAYBE_UNUSED = 0;")
        out.append(
            f"    rg_bytes in_{n} RG_MAYBE_UNUSED = rg_bytes_empty(), sdu_{n} RG_MAYBE_UNUSED = rg_bytes_empty();"
        )
        out.append(f"    uint32_t cur_{n} RG_MAYBE_UNUSED = 0, vend_{n} RG_MAYBE_UNUSED = 0;")
        out.append(f"    uint8_t ev_{n}[{len(lc.events)}] RG_MAYBE_UNUSED;")
        out.append(f"    unsigned psm_{n} RG_MAYBE_UNUSED = 0, ret_{n} RG_MAYBE_UNUSED = 0;")
        out.append(f"    unsigned rep_{n} RG_MAYBE_UNUSED = 0, loop_{n} RG_MAYBE_UNUSED = 0;")
        out.append(f"    rg_bytes lin_{n} RG_MAYBE_UNUSED = rg_bytes_empty();")
        out.append(f"    rg_seq_res sres_{n} RG_MAYBE_UNUSED;")
        if lc.d.frame is not None:  # framing: the step's result; the input follows a hole
            out.append(f"    rg_framer_res fres_{n} RG_MAYBE_UNUSED = {{0, 0, 0, 0, 0}};")
            out.append(f"    unsigned gin_{n} RG_MAYBE_UNUSED = 0;")
        out.append(f"    unsigned lazy_{n} RG_MAYBE_UNUSED = 0;")
        if looped(cx, lc):  # the instance this frame was last shown to observers for
            out.append(f"    uint64_t seen_{n} RG_MAYBE_UNUSED = 0;")
        if n in cx.quiet:  # lazy_ 2: not shown yet; the length its on_packet gets
            out.append(f"    uint32_t qlen_{n} RG_MAYBE_UNUSED = 0;")
        if lc.has_instance:
            out.append(f"    uint8_t kf_{n}[{lc.key_len}] RG_MAYBE_UNUSED;")
            nw = len(windows(lc.key_len))  # the key as words: the lookups' (keywords.py)
            out.append(f"    uint64_t kw_{n}[{nw}] RG_MAYBE_UNUSED;")
            if lc.bidir:
                out.append(f"    uint8_t kr_{n}[{lc.key_len}] RG_MAYBE_UNUSED;")
                out.append(f"    uint64_t kwr_{n}[{nw}] RG_MAYBE_UNUSED;")
    if cx.rules:
        out.append(cx.rules.locals())
    return "\n".join(out)
