"""The C back-end's program level: a lowered, optimised Program (blocks, ir/layout.py
descriptions, sema's typed expressions as the IR carries them) into the stack's C files. The
per-packet function is the program's blocks in order, each instruction and terminator rendered
by the renderer the C registry holds for its class (backend/c/, one module per opcode family)
with the program's typed context (context.py); what is rendered once per stack (structs,
descriptors, gap recovery, the frame's locals, the burst stage) is here and in its own modules.
It reads the IR and nothing above it (import-linter contracts in setup.cfg)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jinja2

from rubikgen import __version__
from rubikgen.ir.nodes import LINK_KINDS, Program
from rubikgen.toolchain import resources
from rubikgen.toolchain.handlercheck import HandlerSig, spec_type

from . import trace_c
from .burst_c import render_stage1
from .c import C
from .c.calls import late_handlers, lifecycle
from .c.registry import render_instr
from .c.terms import return_to_caller, term
from .c.transform import transform_support
from .context import CContext, HandlerC, build, label
from .frame import block_head, entry_switch, frame_locals
from .layer_c import LayerC, c_comment, c_string

TEMPLATES = resources.templates_dir()  # the checkout's templates/ or the installed copy


@dataclass
class Generated:
    stack: str
    spec_hash: str
    files: dict[str, str]
    handlers_file: str
    handlers_stub: str
    prototypes: dict[str, str]
    dumps: dict[str, str] = field(default_factory=dict)  # --dump-after: pass -> IR text
    pkg_config: list[str] = field(default_factory=list)  # C libraries the stack links
    # per handler: its stub (what S_handlers.c holds for it) and its declaration in spec terms
    handler_stubs: dict[str, str] = field(default_factory=dict)
    handler_sigs: dict[str, HandlerSig] = field(default_factory=dict)
    # layers whose sequence delivers data nothing takes (no child layer, no handler with a
    # `data` argument): the streams NF records nothing of them. (layer, file:line:col)
    unseen_sequences: list[tuple[str, str]] = field(default_factory=list)


def generate_c(prog: Program, hash_: str, opt_level: int) -> Generated:
    """The C files of a lowered, optimised program (with its rules, when ir/lower_rules.py put
    a rules file's into it: compiled in, or the host side of a reloadable one)."""
    return render(build(prog, hash_, opt_level))


def render(cx: CContext) -> Generated:
    """The stack's C files from its context (templates in templates/)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    ctx = {
        "S": cx.S,
        "hash": cx.hash,
        "version": __version__,
        "stack_file": cx.sd.file,
        "handlers": list(cx.handlers.values()),
        "layers": list(cx.layers.values()),
        "process_body": process_body(cx),
        "locals": frame_locals(cx),
        "descriptors": descriptors(cx),
        "layer_support": layer_support(cx),
        "drains": {lc.name: drain_support(cx, lc) for lc in cx.layers.values()},
        "entry_table": entry_table(cx),
        "lifecycle": {
            lc.name: lifecycle(cx, lc) + (cx.rules.on_close(lc.name) if cx.rules else "")
            for lc in cx.layers.values()
        },
        "close_reasons": cx.sd.close_reasons,
        "limits": memcap_limits(cx.sd),
        "xf": transform_support(cx),
        "setters": cx.setters,
        "stage1": render_stage1(cx),  # burst stage 1 (burst_c.py)
        "quiet": cx.quiet,
    }
    files = {
        f"{cx.S}_gen.h": env.get_template("stack_gen.h.j2").render(ctx),
        f"{cx.S}_gen.c": env.get_template("stack_gen.c.j2").render(ctx),
        f"{cx.S}_main.c": env.get_template("stack_main.c.j2").render(ctx),
    }
    stub = env.get_template("stack_handlers.c.j2").render(ctx)
    one = env.get_template("handler_stub.c.j2")
    return Generated(
        cx.S,
        cx.hash,
        files,
        f"{cx.S}_handlers.c",
        stub,
        {h.name: h.prototype for h in cx.handlers.values()},
        pkg_config=sorted({cx.sd.transforms[t].pkg_config for t in cx.transforms}),
        handler_stubs={h.name: one.render(ctx, h=h) for h in cx.handlers.values()},
        handler_sigs=handler_sigs(cx),
        unseen_sequences=unseen_sequences(cx),
    )


def unseen_sequences(cx: CContext) -> list[tuple[str, str]]:
    """Layers with a sequence, no child layer and no handler with a bytes `data` argument
    (what the streams NF records, handlers/nf/rg_nf.h)."""
    parents = cx.sd.parents
    takers = {
        h.layer
        for h in cx.handlers.values()
        if any(n == "data" and kind == "bytes" for n, _, kind in h.args)
    }
    out = []
    for name, lc in cx.layers.items():
        if lc.has_seq and name not in parents and name not in takers:
            out.append((name, cx.sd.layer_where[name]))
    return out


def handler_sigs(cx: CContext) -> dict[str, HandlerSig]:
    """The handlers in spec terms, with where the stack declares them (file:line:col)."""
    out: dict[str, HandlerSig] = {}
    for h in cx.handlers.values():
        hd = cx.sd.handlers.get(h.name)
        where = hd.where if hd is not None else ""
        args = tuple((a[0], spec_type(a[1])) for a in h.args)
        out[h.name] = HandlerSig(h.name, h.layer, args, where)
    return out


# -- per-layer support code -------------------------------------------------------------


def frame_cfg(lc: LayerC) -> str:
    """The layer's rg_framer_cfg (rg/rg_framer.h), from its protocol's `framing:`."""
    fr = lc.d.frame
    assert fr is not None
    kind = {"length": "RG_FRAME_LENGTH", "delimiter": "RG_FRAME_DELIM", "size": "RG_FRAME_FIXED"}
    delim = ", ".join(f"0x{b:02x}" for b in fr.delimiter) or "0"
    return (
        f"/* {lc.spec_file}:{fr.line} framing */\n"
        f"static const rg_framer_cfg {lc.t('frcfg')} = {{{kind[fr.kind]}, {fr.at}u, "
        f"{fr.width // 8}u, {1 if fr.little else 0}u, {fr.add}u, {fr.mul}u, {fr.size}u, "
        f"{fr.max}u, {len(fr.delimiter)}u, {{{delim}}}}};"
    )


def layer_support(cx: CContext) -> str:
    out: list[str] = []
    for lc in cx.layers.values():
        out.append(lc.hdr_struct())
        out.append(lc.tmp_struct())
        out.append(lc.inst_struct())
        if lc.has_seq:
            sq = lc.d.seq
            assert sq is not None
            out.append(
                f"static const rg_seq_cfg {lc.t('seqcfg')} = {{{sq.max_bytes}u, {sq.max_blocks}u, "
                f"RG_SEQ_{sq.policy.upper()}, "
                f"{1 if sq.buffer_data else 0}, {1 if sq.zero_based else 0}, "
                f"{'RG_SEQ_UNIT_MSG' if sq.unit == 'message' else 'RG_SEQ_UNIT_BYTE'}, "
                f"{lc.index}, {1 if sq.drain else 0}, {1 if sq.retain else 0}}};"
            )
        if lc.d.frame is not None:
            out.append(frame_cfg(lc))
        if lc.atoms:
            terms = []
            for d in range(lc.ndirs):
                s = f"&in->seq[{d}]" if lc.has_seq else "NULL"
                terms.append(f"(in->vl[k][{d}] && rg_seq_ready_upto({s}, in->vend[k][{d}]))")
            out.append(
                f"/* virtual atoms: seen on a packet and no hole up to its end (spec section 7) */\n"
                f"static inline uint64_t {lc.t('vtest')}(const struct {lc.t('inst')} *in, unsigned k)\n"
                f"{{\n    return (uint64_t)({' || '.join(terms)});\n}}"
            )
    if cx.rules:
        out.append(cx.rules.support())
    return "\n\n".join(out)


# -- gap recovery: what a layer's sequences deliver when an instance ends ---------------


def drain_support(cx: CContext, lc: LayerC) -> str:
    """`L_x_drain(ctx, in, reason)` for a layer whose sequence has `drain: true`, called by
    `L_x_close`: every direction skips its holes and hands what is buffered to the layer's
    handlers that take `sdu` (their other arguments 0; no packet, no `when`; the call's
    `end` is RG_END(reason), so handlers and NFs can tell it from a packet's). Empty
    otherwise."""
    if not lc.has_seq or lc.d.seq is None or not lc.d.seq.drain:
        return ""
    idx, n = lc.index, lc.name
    calls: list[str] = []
    for hn, h in cx.sd.handlers.items():
        if h.layer != n:
            continue
        texts = [a.text for a in h.args]
        if "sdu" not in texts or any(e in cx.sd.udes for e in h.events):
            continue  # a user-defined event filters packets' bytes: no drain
        hc = cx.handlers[hn]
        inits, vals = [], []
        for (an, _ct, kind), text in zip(hc.args, texts, strict=True):
            if kind == "bytes":
                if text == "sdu":
                    inits.append(f".{an} = sdu")
                else:
                    inits.append(f".{an} = {{rg_empty_byte, 0}}")
                vals.append(f"{{RG_VAL_BYTES, 0, a_.{an}}}")
            else:
                vals.append(f"{{RG_VAL_NUM, a_.{an}, {{rg_empty_byte, 0}}}}")
        hidx = list(cx.handlers).index(hn)
        calls += [
            f"        {{ /* {hc.src} handler {hn} */",
            f"            {hc.struct} a_ = {{{', '.join(inits)}}};",
            f"            rg_hctx hc_ = {{&in->fi, &in->fi.user[d], (uint8_t)d, {idx}, ctx->clock.now, ctx, RG_END(reason), &ctx->verdict}};",
            f"            {hn}(&a_, &hc_);",
            "            ctx->calls++;",
            "            if (ctx->obs && ctx->obs->on_call) {",
            f"                const rg_val v_[{len(vals)}] = {{{', '.join(vals)}}};",
            f"                rg_call c_ = {{{hidx}, {idx}, (uint8_t)d, &in->fi, ctx->clock.now, ctx->pkt_no, v_, RG_END(reason), &ctx->verdict}};",
            "                ctx->obs->on_call(ctx->obs->self, &c_);",
            "            }",
            "        }",
        ]
    line = lc.d.seq.drain_line
    lines = [
        f"/* layer {n}: gap recovery when an instance ends ({lc.spec_file}:{line} drain) */",
        f"static void {lc.t('drain')}(struct {cx.S}_ctx *ctx, struct {lc.t('inst')} *in, int reason)",
        "{",
        "    (void)reason; /* unused when no handler takes the sdu */",
        f"    for (unsigned d = 0; d < {lc.ndirs}; d++) {{",
        "        if (!rg_seq_flush(&in->seq[d])) continue;",
        "        rg_seq_res r_;",
        "        memset(&r_, 0, sizeof r_);",
        "        const uint32_t n0_ = rg_seq_next(&in->seq[d]);",
        f"        rg_bytes sdu = rg_seq_assemble(&in->seq[d], &{lc.t('seqcfg')}, &r_);",
        f"        {cx.S}__gaps(ctx, {idx}, &in->fi, d, &r_, 0, n0_);",
        f"        ctx->stats->layer[{idx}].seq.bytes_delivered += sdu.len;",
        "        if (!sdu.len) continue;",
        *calls,
        "    }",
        "}",
    ]
    return "\n".join(lines)


def descriptors(cx: CContext) -> str:
    S = cx.S
    out: list[str] = []
    for lc in cx.layers.values():
        n = lc.name
        parts = ",\n    ".join(
            f"{{{c_string(p.name)}, {'RG_VAL_NUM' if p.kind == 'num' else 'RG_VAL_BYTES'}, "
            f"{p.side}, {p.off}, {p.size}}}"
            for p in lc.key_fwd
        )
        out.append(f"static const rg_keypart {S}_keyparts_{n}[] = {{\n    {parts or '{0}'}\n}};")
        states = ", ".join(c_string(s) for s in lc.states) or "NULL"
        out.append(f"static const char *const {S}_states_{n}[] = {{{states}}};")
        recs = []
        for var, (key, vnames, letters) in lc.d.records.items():
            nn = "NULL"
            if vnames:
                nn = f"{S}_recn_{n}_{var}"
                out.append(
                    f"static const char *const {nn}[] = {{{', '.join(map(c_string, vnames))}}};"
                )
            lt = c_string(letters) if letters else "NULL"
            recs.append(f"{{{c_string(key)}, {len(vnames)}, {nn}, {lt}}}")
        if recs:
            out.append(
                f"static const rg_recfield {S}_rec_{n}[] = {{\n    " + ",\n    ".join(recs) + "\n};"
            )
    rows = []
    for lc in cx.layers.values():
        rows.append(
            f"    {{{c_string(lc.name)}, {c_string(lc.d.protocol)}, {c_string(lc.spec_file)}, "
            f"{int(lc.has_instance)}, {int(lc.bidir)}, {int(lc.d.has_psm)}, "
            f"{int(lc.has_seq)}, {lc.key_len if lc.has_instance else 0}, "
            f"{len(lc.key_fwd)}, {S}_keyparts_{lc.name}, {len(lc.states)}, "
            f"{S}_states_{lc.name}, UINT64_C({lc.timeout_ns}), "
            f"UINT64_C({lc.d.linger_ns}), {len(lc.d.records)}, "
            f"{f'{S}_rec_{lc.name}' if lc.d.records else 'NULL'}}},"
        )
    out.append(f"static const rg_layer_desc {S}_layers[] = {{\n" + "\n".join(rows) + "\n};")
    hrows = []
    for h in cx.handlers.values():
        names = ", ".join(c_string(a[0]) for a in h.args) or "NULL"
        kinds = (
            ", ".join("RG_VAL_BYTES" if a[2] == "bytes" else "RG_VAL_NUM" for a in h.args) or "0"
        )
        out.append(f"static const char *const {S}_argn_{h.name}[] = {{{names}}};")
        out.append(f"static const uint8_t {S}_argk_{h.name}[] = {{{kinds}}};")
        hrows.append(
            f"    {{{c_string(h.name)}, {cx.layers[h.layer].index}, {len(h.args)}, "
            f"{S}_argn_{h.name}, {S}_argk_{h.name}, "
            f"{c_string(' '.join(hd.events) if (hd := cx.sd.handlers.get(h.name)) else '')}}},"
        )
    if not hrows:
        hrows.append("    {NULL, 0, 0, NULL, NULL, NULL},")
    out.append(f"static const rg_handler_desc {S}_handlers[] = {{\n" + "\n".join(hrows) + "\n};")
    return "\n".join(out)


def entry_table(cx: CContext) -> list[int]:
    return [cx.layers[cx.prog.entries[k]].index if k in cx.prog.entries else -1 for k in LINK_KINDS]


# -- the per-packet function ------------------------------------------------------------


def process_body(cx: CContext) -> str:
    targets = cx.targets()
    out = [trace_c.begin(), *entry_switch(cx, label, "RG_PKT_ERROR")]
    for name, b in cx.prog.blocks.items():
        out.append("")
        out += block_head(name, b, targets, label)
        out += ["        " + x for x in trace_c.block_start(b, cx)]
        cx.walk.key_built = None  # a block may be entered by a jump
        for ins in b.instrs:
            if ins.src is not None and ins.src != b.src:
                out.append(f"        /* {c_comment(str(ins.src))} */")
            lc = cx.layers[ins.layer]
            text = render_instr(ins, lc, cx)
            cx.walk.after(ins)
            out += ["        " + x for x in trace_c.before(ins, lc, b, cx)]
            for line in text.splitlines():
                out.append(f"        {line}" if line else "")
            out += ["        " + x for x in trace_c.after(ins, lc, cx)]
        out.append("    }")
        out += ["    " + x for x in term(cx, b)]
    out += verdict_exits(cx)
    out.append("")
    out.append("R_done:")
    for ins in cx.prog.exit:  # of no layer: the rules, after every layer
        out.append(render_instr(ins, None, cx))
    out.append(trace_c.end())  # after the rules: their verdict is the packet's
    out.append("    return rc;")
    body = "\n".join(out)
    return cx.lean(cx.walk.resets.prune(body)) if cx.opt >= 1 else body


def verdict_exits(cx: CContext) -> list[str]:
    """Per layer with a lookup: where a packet of an instance that a verdict dropped or
    bypassed (RG_FI_DROP / RG_FI_BYPASS) goes from its lookup. The layer returns at once:
    none of its handlers, reassembly or PSM and no layer above it run; the layers below
    finish as for any packet (a fragment instance below is still released)."""
    out: list[str] = []
    exits = [
        (n, "V", "an instance marked by a flow verdict", "__flow_verdict(ctx, {i}, &inst_{n}->fi)")
        for n in cx.walk.verdict_exits
    ] + [
        (n, "Z", "a late packet of a closed instance (spec linger:)",
         "__late(ctx, {i}, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len)")
        for n in cx.walk.linger_exits
    ]  # fmt: skip
    for n, exit_, why, call in exits:
        call = call.format(i=cx.layers[n].index, n=n)
        out += ["", f"{exit_}_{n}: /* layer {n}: {why} */", f"    {cx.S}{call};"]
        out.append(trace_c.note(cx.layers[n], why))
        if exit_ == "Z":
            out += ["    " + x for x in late_handlers(cx, n)]
        out += ["    " + x for x in return_to_caller(cx, n)]
    return out


def memcap_limits(sd: Any) -> dict[str, str]:
    """The stack's memcap defaults for the template (the IR's resolved `limits:`)."""
    lim = sd.limits
    return {
        "reassembly": str(lim.reassembly),
        "flows": str(lim.flows),
        "policy_c": "RG_MEMCAP_" + lim.policy.upper().replace("-", "_"),
    }


__all__ = ["C", "CContext", "Generated", "HandlerC", "build", "generate_c", "render"]
