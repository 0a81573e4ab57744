"""The C back-end: renders a lowered, optimised Program (blocks, ir/layout.py descriptions,
sema's typed expressions) into the stack's C files. It reads the IR and nothing above it
(import-linter contract in setup.cfg)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import jinja2

from rubikgen import __version__
from rubikgen.expr.ast import Name, unparse, walk
from rubikgen.expr.types import NumT
from rubikgen.ir import instrs as I
from rubikgen.ir.layout import Arg
from rubikgen.ir.nodes import (
    LINK_KINDS,
    Block,
    Branch,
    Call,
    Cond,
    Done,
    Instr,
    Jump,
    Program,
    Return,
)
from rubikgen.rules.ir import RuleSet
from rubikgen.toolchain import resources
from rubikgen.toolchain.handlercheck import HandlerSig, spec_type

from . import lean_walk
from .burst_c import render_stage1
from .cexpr import cond_to_c, stmt_to_c, to_c
from .keywords import build_words, windows
from .layer_c import LayerC, c_comment, c_string, ctype_of_width
from .outer_flows import outer_flow_layers
from .prune import Resets
from .rules_c import depths
from .rules_so import Reloadable, rules_backend
from .setters import Setters

TEMPLATES = resources.templates_dir()  # the checkout's templates/ or the installed copy
_TYPED = {"u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t"}


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


@dataclass
class HandlerC:
    name: str
    layer: str  # first layer that calls it
    args: list[tuple[str, str, str]] = field(default_factory=list)  # (name, ctype, kind)
    src: str = ""
    ends: str = ""  # a lifecycle handler: the close reasons it runs for

    @property
    def struct(self) -> str:
        return f"struct {self.name}_args"

    @property
    def prototype(self) -> str:
        return f"void {self.name}(const {self.struct} *args, rg_hctx *h)"


# ---------------------------------------------------------------------------------------------


def _label(block: str) -> str:
    return "B_" + re.sub(r"\W", "_", block)


class CGen:
    def __init__(
        self,
        prog: Program,
        hash_: str,
        opt_level: int,
        rules: RuleSet | Reloadable | None = None,
    ) -> None:
        self.prog = prog
        assert prog.desc is not None
        self.sd = prog.desc
        self.hash = hash_
        self.opt = opt_level
        self.S = prog.stack
        self.layers: dict[str, LayerC] = {}
        for name, lir in prog.layers.items():
            assert lir.desc is not None
            self.layers[name] = LayerC(lir.desc, lir.index, self.layers, x=prog.exprs[name])
        xfs: dict[str, list[str]] = {}
        for b in prog.blocks.values():
            for ins in b.instrs:
                if isinstance(ins, I.Transform):
                    xfs.setdefault(ins.layer, []).append(ins.name)
        self.transforms = sorted({t for ts in xfs.values() for t in ts})
        for name, lc in self.layers.items():
            lc.atoms = len(prog.layers[name].atoms)
            hs = [h for h, hd in self.sd.handlers.items() if hd.layer == name]
            hs += [u for u, ul in self.sd.udes.items() if ul == name]  # their fired flags
            lc.prepare(hs, xfs.get(name))
        self.handlers = self._handlers()
        # tunnels' outer tables: a last-hit memo before the hash (outer_flows.py)
        self.memo_lookups = outer_flow_layers(prog) if opt_level >= 1 else frozenset()
        # a rules file compiled in (rules_c.py): hooks below, each a line when rules is None
        self.rules = rules_backend(rules, self.S, self.layers, depths(prog))  # or reloadable
        # checksums, field setters: spans always when rules rewrite fields or verify a
        # checksum (`checksum_bad` reads the header's span), or when a set loaded at run time
        # may (reloadable builds)
        spans = isinstance(rules, Reloadable) or (
            rules is not None and any(r.action == "rewrite" for r in rules.rules)
        )
        spans = spans or (self.rules is not None and self.rules.reads_checksums())
        self.setters = Setters(self.S, list(self.layers.values()), always=spans)
        for name, lc in self.layers.items():
            lc.rule_slot = self.rules is not None and self.rules.has_slot(name)
        # one return id per call site of each layer (callers are (call block, ret block))
        self.ret_ids = {
            name: {call: i + 1 for i, (call, _) in enumerate(lir.callers)}
            for name, lir in prog.layers.items()
        }
        self._created: str | None = None
        self._created_lazy = False
        self._key_built: str | None = None  # the previous instruction built this layer's key
        # fast-destroy layers whose one-packet instances observers may not be shown
        # (rg_obs.quiet_transient): nothing but on_close and freeing the sequences at their close
        self.quiet = self._quiet_layers(prog)
        self.resets = Resets()  # per-layer clears, dropped where nothing reads them (prune.py)
        # layers whose lookup looks in a closed table: each gets a late-packet exit (Z_<layer>)
        self.linger_exits: list[str] = []
        # layers whose lookup was rendered: each gets a verdict exit (V_<layer>)
        self.verdict_exits: list[str] = []

    def _quiet_layers(self, prog: Any) -> list[str]:
        lazy = {
            ins.layer
            for b in prog.blocks.values()
            for ins in b.instrs
            if isinstance(ins, I.Create) and ins.lazy
        }
        return [
            n
            for n, lc in self.layers.items()
            if n in lazy
            and lc.index < 64  # a bit of the mask
            and not self.drain_support(lc)
            and not prog.layers[n].lifecycle
            and not (self.rules.on_close(n) if self.rules else "")
        ]

    # -- handlers ---------------------------------------------------------------------------
    def _arg_types(self, lc: LayerC, args: list[Arg]) -> list[tuple[str, str, str]]:
        out = []
        for a in args:
            an = a.name
            if a.declared is not None:
                kind = "bytes" if a.declared == "bytes" else "num"
                ct = "rg_bytes" if a.declared == "bytes" else _TYPED[a.declared]
            else:
                ce = to_c(a.expr, lc.env())
                if isinstance(ce.type, NumT):
                    kind, ct = "num", ctype_of_width(ce.type.width)
                else:
                    kind, ct = "bytes", "rg_bytes"
            out.append((an, ct, kind))
        return out

    def _handlers(self) -> dict[str, HandlerC]:
        hs: dict[str, HandlerC] = {}
        for hn, h in self.sd.handlers.items():
            lc = self.layers[h.layer]
            hs[hn] = HandlerC(hn, h.layer, self._arg_types(lc, h.args), h.src)
        for lir in self.prog.layers.values():
            for hn, reasons in lir.lifecycle:
                hs[hn].ends = ", ".join(reasons)
        for b in self.prog.blocks.values():
            for ins in b.instrs:
                if not isinstance(ins, I.Callback):
                    continue
                lc = self.layers[ins.layer]
                types = self._arg_types(lc, ins.args)
                old = hs.get(ins.name)
                if old is None:
                    hs[ins.name] = HandlerC(ins.name, ins.layer, types, str(ins.src))
                else:  # the widest type of every layer that calls it
                    merged = []
                    for (n1, t1, k1), (_n2, t2, _k2) in zip(old.args, types, strict=False):
                        merged.append((n1, t1 if t1 >= t2 or k1 == "bytes" else t2, k1))
                    old.args = merged
        return hs

    # -- rendering --------------------------------------------------------------------------
    def render(self) -> Generated:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            keep_trailing_newline=True,
            undefined=jinja2.StrictUndefined,
            autoescape=False,
        )
        ctx = {
            "S": self.S,
            "hash": self.hash,
            "version": __version__,
            "stack_file": self.sd.file,
            "handlers": list(self.handlers.values()),
            "layers": list(self.layers.values()),
            "process_body": self.process_body(),
            "locals": self.locals(),
            "descriptors": self.descriptors(),
            "layer_support": self.layer_support(),
            "drains": {lc.name: self.drain_support(lc) for lc in self.layers.values()},
            "entry_table": self.entry_table(),
            "lifecycle": {
                lc.name: self.lifecycle(lc) + (self.rules.on_close(lc.name) if self.rules else "")
                for lc in self.layers.values()
            },
            "close_reasons": self.sd.close_reasons,
            "limits": memcap_limits(self.sd),
            "xf": self.transform_support(),
            "setters": self.setters,
            "stage1": render_stage1(self),  # burst stage 1 (burst_c.py)
            "quiet": self.quiet,
        }
        files = {
            f"{self.S}_gen.h": env.get_template("stack_gen.h.j2").render(ctx),
            f"{self.S}_gen.c": env.get_template("stack_gen.c.j2").render(ctx),
            f"{self.S}_main.c": env.get_template("stack_main.c.j2").render(ctx),
        }
        stub = env.get_template("stack_handlers.c.j2").render(ctx)
        one = env.get_template("handler_stub.c.j2")
        return Generated(
            self.S,
            self.hash,
            files,
            f"{self.S}_handlers.c",
            stub,
            {h.name: h.prototype for h in self.handlers.values()},
            pkg_config=sorted({self.sd.transforms[t].pkg_config for t in self.transforms}),
            handler_stubs={h.name: one.render(ctx, h=h) for h in self.handlers.values()},
            handler_sigs=self.handler_sigs(),
            unseen_sequences=self.unseen_sequences(),
        )

    # -- transforms -------------------------------------------------------------------------
    def transform_support(self) -> dict[str, str]:
        """C for the context: per-worker transform contexts, per-layer output buffers, the
        names of the transforms' failure reasons."""
        fields, new, free = [], [], []
        xf = self.sd.transforms
        includes = sorted({xf[t].header for t in self.transforms})
        for t in self.transforms:
            spec = xf[t]
            fields.append(f"    {spec.ctx_type} *xfc_{t};")
            new.append(f"    ctx->xfc_{t} = {spec.ctx_new};")
            new.append(f"    if (ctx->xfc_{t} == NULL) goto fail;")
            free.append(f"    {spec.ctx_free}(ctx->xfc_{t});")
        for lc in self.layers.values():
            if not lc.transforms:
                continue
            size = max(xf[t].out_max for t in lc.transforms)
            fields.append(f"    uint8_t *xout_{lc.name}; /* transform output ({size} bytes) */")
            new.append(f"    ctx->xout_{lc.name} = (uint8_t *)malloc({size});")
            new.append(f"    if (ctx->xout_{lc.name} == NULL) goto fail;")
            free.append(f"    free(ctx->xout_{lc.name});")
        if self.transforms:
            for k, r in enumerate(self.sd.user_reasons):
                new.append(
                    f"    rg_stats_set_reason_name(ctx->stats, RG_REASON_USER + {k}, {c_string(r)});"
                )
        if self.rules:
            fields.append(self.rules.ctx_fields())
            new.append(self.rules.ctx_new())
            free.append(self.rules.ctx_free())
        return {
            "includes": "".join(f'#include "{h}"\n' for h in includes),
            "fields": "\n".join(fields),
            "new": "\n".join(new),
            "free": "\n".join(free),
        }

    def unseen_sequences(self) -> list[tuple[str, str]]:
        """Layers with a sequence, no child layer and no handler with a bytes `data` argument
        (what the streams NF records, handlers/nf/rg_nf.h)."""
        parents = self.sd.parents
        takers = {
            h.layer
            for h in self.handlers.values()
            if any(n == "data" and kind == "bytes" for n, _, kind in h.args)
        }
        out = []
        for name, lc in self.layers.items():
            if lc.has_seq and name not in parents and name not in takers:
                out.append((name, self.sd.layer_where[name]))
        return out

    def handler_sigs(self) -> dict[str, HandlerSig]:
        """The handlers in spec terms, with where the stack declares them (file:line:col)."""
        out: dict[str, HandlerSig] = {}
        for h in self.handlers.values():
            hd = self.sd.handlers.get(h.name)
            where = hd.where if hd is not None else ""
            args = tuple((a[0], spec_type(a[1])) for a in h.args)
            out[h.name] = HandlerSig(h.name, h.layer, args, where)
        return out

    # -- per-layer support code -------------------------------------------------------------
    def layer_support(self) -> str:
        out: list[str] = []
        for lc in self.layers.values():
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
        if self.rules:
            out.append(self.rules.support())
        return "\n\n".join(out)

    # -- gap recovery: what a layer's sequences deliver when an instance ends ---------------
    def drain_support(self, lc: LayerC) -> str:
        """`L_x_drain(ctx, in, reason)` for a layer whose sequence has `drain: true`, called by
        `L_x_close`: every direction skips its holes and hands what is buffered to the layer's
        handlers that take `sdu` (their other arguments 0; no packet, no `when`; the call's
        `end` is RG_END(reason), so handlers and NFs can tell it from a packet's). Empty
        otherwise."""
        if not lc.has_seq or lc.d.seq is None or not lc.d.seq.drain:
            return ""
        idx, n = lc.index, lc.name
        calls: list[str] = []
        for hn, h in self.sd.handlers.items():
            if h.layer != n:
                continue
            texts = [a.text for a in h.args]
            if "sdu" not in texts or any(e in self.sd.udes for e in h.events):
                continue  # a user-defined event filters packets' bytes: no drain
            hc = self.handlers[hn]
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
            hidx = list(self.handlers).index(hn)
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
            f"static void {lc.t('drain')}(struct {self.S}_ctx *ctx, struct {lc.t('inst')} *in, int reason)",
            "{",
            "    (void)reason; /* unused when no handler takes the sdu */",
            f"    for (unsigned d = 0; d < {lc.ndirs}; d++) {{",
            "        if (!rg_seq_flush(&in->seq[d])) continue;",
            "        rg_seq_res r_;",
            "        memset(&r_, 0, sizeof r_);",
            "        const uint32_t n0_ = rg_seq_next(&in->seq[d]);",
            f"        rg_bytes sdu = rg_seq_assemble(&in->seq[d], &{lc.t('seqcfg')}, &r_);",
            f"        {self.S}__gaps(ctx, {idx}, &in->fi, d, &r_, 0, n0_);",
            f"        ctx->stats->layer[{idx}].seq.bytes_delivered += sdu.len;",
            "        if (!sdu.len) continue;",
            *calls,
            "    }",
            "}",
        ]
        return "\n".join(lines)

    def _loop_key_headers(self) -> set[str]:
        """Layers whose header a self-looping layer's key reads (GRE's outer addresses): the
        next pass builds its key again after the layers above returned."""
        out: set[str] = set()
        for lc in self.layers.values():
            if self._max_repeat(lc):
                for p in lc.key_fwd + lc.key_rev:
                    for x in walk(p.expr):
                        if isinstance(x, Name) and x.ref is not None and x.ref.owner:
                            out.add(x.ref.owner)
        return out

    def locals(self) -> str:
        out = []
        loop_keys = self._loop_key_headers()
        for lc in self.layers.values():
            n = lc.name
            out.append(f"    /* layer {n} */")
            # a self-looping layer's loop condition (and its key, on the next pass) reads
            # headers in the block the layers above return to; gcc cannot follow the returns (a
            # switch) and would warn that they may be unset, so those few headers start
            # initialised (one small struct copy)
            rule_read = self.rules is not None and self.rules.header_init(n)
            init = (
                f" = {lc.t('hdr_init')}"
                if self._max_repeat(lc) or rule_read or n in loop_keys
                else ""
            )
            out.append(f"    struct {lc.t('hdr')} h_{n} RG_MAYBE_UNUSED{init};")
            tinit = f" = {lc.t('tmp_init')}" if self._max_repeat(lc) else ""
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
            out.append(f"    unsigned lazy_{n} RG_MAYBE_UNUSED = 0;")
            if self._looped(lc):  # the instance this frame was last shown to observers for
                out.append(f"    uint64_t seen_{n} RG_MAYBE_UNUSED = 0;")
            if n in self.quiet:  # lazy_ 2: not shown yet; the length its on_packet gets
                out.append(f"    uint32_t qlen_{n} RG_MAYBE_UNUSED = 0;")
            if lc.has_instance:
                out.append(f"    uint8_t kf_{n}[{lc.key_len}] RG_MAYBE_UNUSED;")
                nw = len(windows(lc.key_len))  # the key as words: the lookups' (keywords.py)
                out.append(f"    uint64_t kw_{n}[{nw}] RG_MAYBE_UNUSED;")
                if lc.bidir:
                    out.append(f"    uint8_t kr_{n}[{lc.key_len}] RG_MAYBE_UNUSED;")
                    out.append(f"    uint64_t kwr_{n}[{nw}] RG_MAYBE_UNUSED;")
        if self.rules:
            out.append(self.rules.locals())
        return "\n".join(out)

    # -- descriptors ------------------------------------------------------------------------
    def descriptors(self) -> str:
        S = self.S
        out: list[str] = []
        for lc in self.layers.values():
            n = lc.name
            parts = ",\n    ".join(
                f"{{{c_string(p.name)}, {'RG_VAL_NUM' if p.kind == 'num' else 'RG_VAL_BYTES'}, "
                f"{p.side}, {p.off}, {p.size}}}"
                for p in lc.key_fwd
            )
            out.append(
                f"static const rg_keypart {S}_keyparts_{n}[] = {{\n    {parts or '{0}'}\n}};"
            )
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
                    f"static const rg_recfield {S}_rec_{n}[] = {{\n    "
                    + ",\n    ".join(recs)
                    + "\n};"
                )
        rows = []
        for lc in self.layers.values():
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
        for h in self.handlers.values():
            names = ", ".join(c_string(a[0]) for a in h.args) or "NULL"
            kinds = (
                ", ".join("RG_VAL_BYTES" if a[2] == "bytes" else "RG_VAL_NUM" for a in h.args)
                or "0"
            )
            out.append(f"static const char *const {S}_argn_{h.name}[] = {{{names}}};")
            out.append(f"static const uint8_t {S}_argk_{h.name}[] = {{{kinds}}};")
            hrows.append(
                f"    {{{c_string(h.name)}, {self.layers[h.layer].index}, {len(h.args)}, "
                f"{S}_argn_{h.name}, {S}_argk_{h.name}, "
                f"{c_string(' '.join(hd.events) if (hd := self.sd.handlers.get(h.name)) else '')}}},"
            )
        if not hrows:
            hrows.append("    {NULL, 0, 0, NULL, NULL, NULL},")
        out.append(
            f"static const rg_handler_desc {S}_handlers[] = {{\n" + "\n".join(hrows) + "\n};"
        )
        return "\n".join(out)

    def entry_table(self) -> list[int]:
        return [
            self.layers[self.prog.entries[k]].index if k in self.prog.entries else -1
            for k in LINK_KINDS
        ]

    # -- the per-packet function ------------------------------------------------------------
    def process_body(self) -> str:
        out: list[str] = []
        targets = self._targets()
        entries = sorted({self.prog.entries[k] for k in self.prog.entries})
        out.append("    switch (entry) {")
        for e in entries:
            lc = self.layers[e]
            out.append(f"    case {lc.index}: /* entry layer {e} */")
            out.append(f"        in_{e} = rg_bytes_make(data, caplen);")
            out.append(f"        ret_{e} = 0;")
            out.append(f"        rep_{e} = 0;")
            out.append(f"        goto {_label(self.prog.layers[e].entry)};")
        out.append("    default:")
        out.append("        return RG_PKT_ERROR;")
        out.append("    }")
        for name, b in self.prog.blocks.items():
            out.append("")
            src = f" {c_comment(str(b.src))}" if b.src else ""
            if name in targets:
                out.append(f"{_label(name)}: /* {name}{src} */")
            else:
                out.append(f"    /* {name}{src} */")
            out.append("    {")
            self._key_built = None  # a block may be entered by a jump
            for ins in b.instrs:
                if ins.src is not None and ins.src != b.src:
                    out.append(f"        /* {c_comment(str(ins.src))} */")
                text = self.instr(ins)
                self._key_built = ins.layer if isinstance(ins, I.BuildKey) else None
                self._created = ins.layer if isinstance(ins, I.Create) else None
                self._created_lazy = isinstance(ins, I.Create) and ins.lazy
                for line in text.splitlines():
                    out.append(f"        {line}" if line else "")
            out.append("    }")
            out += ["    " + x for x in self.term(b)]
        out += self._verdict_exits()
        out.append("")
        out.append("R_done:")
        if self.rules:
            out.append(self.rules.hook())
        out.append("    return rc;")
        body = "\n".join(out)
        return self.lean(self.resets.prune(body)) if self.opt >= 1 else body

    def lean(self, body: str) -> str:
        """body with the TLV loops nothing reads walked by lengths only (lean_walk.py)."""
        return lean_walk.apply(body, [w for lc in self.layers.values() for w in lc.walks])

    def _targets(self) -> set[str]:
        t: set[str] = set()
        for lir in self.prog.layers.values():
            t.add(lir.entry)
        for b in self.prog.blocks.values():
            t.update(b.successors())
        return t

    def term(self, b: Block) -> list[str]:
        t = b.term
        if isinstance(t, Jump):
            return [f"goto {_label(t.target)};"]
        if isinstance(t, Branch):
            c = self.cond(t.cond, self.layers[t.layer])
            return [f"if ({c}) goto {_label(t.then)};", f"goto {_label(t.else_)};"]
        if isinstance(t, Call):
            child = self.layers[t.child]
            k = self.ret_ids[t.child][b.name]
            return [
                f"in_{t.child} = sdu_{t.layer};",
                f"ret_{t.child} = {k};",
                f"rep_{t.child} = 0;",
                f"goto {_label(self.prog.layers[child.name].entry)};",
            ]
        if isinstance(t, Return):
            return self._return(t.layer)
        if isinstance(t, Done):
            return ["goto R_done;"]
        raise ValueError(f"block {b.name} is not terminated")

    def _return(self, layer: str) -> list[str]:
        """The layer returns to the layer that called it (its emulated return address)."""
        lir = self.prog.layers[layer]
        if self.opt >= 1 and len(lir.callers) == 1 and layer not in self.prog.entries.values():
            # one call site and no entry: the return address is a constant (gtp's udp, ip2
            # and tcp; tcp_ip's tcp), no dispatch on ret_
            return [f"goto {_label(lir.callers[0][1])}; /* the one caller */"]
        out = [f"switch (ret_{layer}) {{"]
        for i, (_call, ret) in enumerate(lir.callers):
            out.append(f"case {i + 1}: goto {_label(ret)};")
        out.append("default: goto R_done;")
        out.append("}")
        return out

    def _verdict_exits(self) -> list[str]:
        """Per layer with a lookup: where a packet of an instance that a verdict dropped or
        bypassed (RG_FI_DROP / RG_FI_BYPASS) goes from its lookup. The layer returns at once:
        none of its handlers, reassembly or PSM and no layer above it run; the layers below
        finish as for any packet (a fragment instance below is still released)."""
        out: list[str] = []
        exits = [
            (n, "V", "an instance marked by a flow verdict", "__flow_verdict(ctx, {i}, &inst_{n}->fi)")
            for n in self.verdict_exits
        ] + [
            (n, "Z", "a late packet of a closed instance (spec linger:)",
             "__late(ctx, {i}, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len)")
            for n in self.linger_exits
        ]  # fmt: skip
        for n, label, why, call in exits:
            call = call.format(i=self.layers[n].index, n=n)
            out += ["", f"{label}_{n}: /* layer {n}: {why} */", f"    {self.S}{call};"]
            if label == "Z":
                out += ["    " + x for x in self._late_handlers(n)]
            out += ["    " + x for x in self._return(n)]
        return out

    def _late_handlers(self, n: str) -> list[str]:
        """A late packet whose instance no verdict marked runs the layer's packet handlers
        that need nothing but its headers and the lingering record (LayerIR.late), so that it
        is rewritten and judged as the live instance's packets were."""
        late = self.prog.layers[n].late
        if not late:
            return []
        lc = self.layers[n]
        out = [
            f"if ((inst_{n}->fi.flags & RG_FI_VERDICTS) == 0) {{ /* its packet handlers */",
            f"    has_inst_{n} = 1;",
        ]
        for hn in late:
            h = self.sd.handlers[hn]
            call = self._call(self.handlers[hn], h.args, lc).splitlines()
            out.append(f"    {{ /* {h.src} handler {hn} */")
            if h.when is not None:
                out.append(f"        if ({cond_to_c(h.when, lc.env())}) {{")
                out += ["            " + x for x in call]
                out.append("        }")
            else:
                out += ["        " + x for x in call]
            out.append("    }")
        return [*out, "}"]

    def cond(self, c: Cond, lc: LayerC) -> str:
        n = lc.name
        if c.kind == "parse_ok":
            return f"err_{n} == 0"
        if c.kind == "found":
            return f"inst_{n} != NULL"
        if c.kind == "has_inst":
            return f"has_inst_{n}"
        if c.kind == "accept":
            acc = " || ".join(f"inst_{n}->fi.state == {s}" for s in lc.d.accept)
            return f"has_inst_{n} && ({acc})"
        if c.kind == "loop":
            mr = self._max_repeat(lc)
            return f"loop_{n} && rep_{n} < {mr}u"
        assert c.expr is not None
        return cond_to_c(c.expr, lc.env())

    def _looped(self, lc: LayerC) -> bool:
        """A layer with instances that may parse several times in one frame (a self-loop),
        whose observers see the frame once per instance (i_observe)."""
        return bool(self._max_repeat(lc)) and lc.has_instance

    def _max_repeat(self, lc: LayerC) -> int:
        for b in self.prog.blocks.values():
            for ins in b.instrs:
                if isinstance(ins, I.LoopDecide) and ins.layer == lc.name:
                    return int(ins.max_repeat)
        return 0

    # -- instructions -----------------------------------------------------------------------
    def instr(self, ins: Instr) -> str:
        lc = self.layers[ins.layer]
        fn = getattr(self, f"i_{ins.op}")
        return fn(ins, lc)

    def i_enter(self, ins: I.Enter, lc: LayerC) -> str:
        n = lc.name
        lines = []
        if ins.zero == "conditional":
            lines += lc.zero_conditional()
        else:
            lines.append(f"h_{n} = {lc.t('hdr_init')};")
        rz = self.resets.add
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
        return "\n".join(lines) + (self.rules.on_enter(n) if self.rules else "")

    def i_parse_header(self, ins: I.ParseHeader, lc: LayerC) -> str:
        n = lc.name
        code = lc.header_code()
        lines = [code] if code else []
        if lc._hc_jumps:
            lines.append(f"HE_{n}:")
        lines.append(
            f"if (err_{n} == 0) sdu_{n} = rg_bytes_make(in_{n}.ptr + cur_{n}, in_{n}.len - cur_{n});"
        )
        lines += self.setters.parsed(lc)
        return "\n".join(lines) + (self.rules.on_parsed(n) if self.rules else "")

    def i_error(self, ins: I.Error, lc: LayerC) -> str:
        return (
            f"rg_stats_error(&ctx->stats->layer[{lc.index}], err_{lc.name} - 1u);\n"
            "rc = RG_PKT_ERROR;"
        )

    def _store_key(self, buf: str, parts: list[Any], lc: LayerC) -> list[str]:
        out = []
        env = lc.env()
        for p in parts:
            ce = to_c(p.expr, env)
            if p.kind == "num":
                out.append(
                    f"rg__put_be({buf} + {p.off}, {ce.text}, {p.size}); /* {c_comment(p.name)} */"
                )
            else:
                out.append(
                    f"rg_bytes_store({buf} + {p.off}, {p.size}, {ce.text}); /* {c_comment(p.name)} */"
                )
        return out

    def _key_words(self, lc: LayerC, rev: bool = True) -> list[str]:
        """The key as words (what the word lookups hash and compare: keywords.py)."""
        n = lc.name
        keys = [(f"kw_{n}", lc.key_fwd)]
        if rev and lc.bidir:
            keys.append((f"kwr_{n}", lc.key_rev))
        return build_words(n, lc.env(), keys, lc.key_len)

    def i_build_key(self, ins: I.BuildKey, lc: LayerC) -> str:
        # the byte keys: creates, instance records, observers and rules read them (the
        # lookup right after takes the key as words, see i_lookup)
        out = self._store_key(f"kf_{lc.name}", lc.key_fwd, lc)
        if lc.bidir:
            out += self._store_key(f"kr_{lc.name}", lc.key_rev, lc)
        return "\n".join(out) + (self.rules.on_key(lc.name) if self.rules else "")

    def i_lookup(self, ins: I.Lookup, lc: LayerC) -> str:
        n = lc.name
        if n not in self.verdict_exits:
            self.verdict_exits.append(n)
        inst = f"inst_{n} = (struct {lc.t('inst')} *)"
        if self._key_built == n and n not in self.memo_lookups:
            # right after the key's narrow stores: hashing those bytes 8 at a time would
            # stall (no store forwarding of several stores into one load), so the key's
            # words are assembled in registers from the same fields (nothing ran between),
            # only when the table has instances (an IPv4 layer's holds fragments only).
            # Not for a memo table: its hit hashes nothing, and the words cost about 10
            # instructions there for no measured gain (BENCHMARKS.md)
            words = [f"if (rg_flow_live(ctx->tbl_{n}) != 0) {{"]
            words += ["    " + x for x in self._key_words(lc, rev=False)]
            look = [
                f"{inst}NULL;",
                *words,
                f"    {inst}rg_flow_lookup_wt(ctx->tbl_{n}, kw_{n}, {lc.key_len}, &dir_{n}, "
                "ctx->clock.now);",
                "}",
            ]
        elif n in self.memo_lookups:  # a tunnel's outer table: the last hit's record first
            look = [
                f"rg_flow_set_time(ctx->tbl_{n}, ctx->clock.now);",
                f"{inst}rg_flow_lookup_memo_n(ctx->tbl_{n}, kf_{n}, {lc.key_len}, &dir_{n});",
            ]
        else:
            # a constant key length: hash and compare unroll; an empty table (no fragment
            # pending, say) costs no hash, no probe and no time set (creates set it)
            look = [
                f"{inst}rg_flow_lookup_nt(ctx->tbl_{n}, kf_{n}, {lc.key_len}, &dir_{n}, "
                "ctx->clock.now);"
            ]
        return "\n".join(
            [
                *look,
                *self._linger_lookup(lc),
                f"has_inst_{n} = inst_{n} != NULL;",
                # one flag test: a flow verdict (drop / bypass) given to this instance before
                *self._verdict_test(lc),
            ]
        )

    def _verdict_test(self, lc: LayerC) -> list[str]:
        """The lookup's flag test of a flow verdict. In a layer whose closed instances linger
        and reopen, a marked instance (its PSM stopped at the mark, so its close is never seen)
        is replaced as a closed one is: a packet for which `reopen` holds (a new connection on
        the key, RFC 9293 TIME-WAIT) ends it and creates a new instance, judged afresh."""
        n = lc.name
        test = f"if (RG_UNLIKELY(has_inst_{n} && (inst_{n}->fi.flags & RG_FI_VERDICTS) != 0))"
        if not lc.d.linger_ns or lc.d.linger_reopen is None:
            return [f"{test} goto V_{n};"]
        reopen = cond_to_c(lc.d.linger_reopen, lc.env())
        return [
            f"{test} {{",
            f"    if (!({reopen})) goto V_{n};",
            "    /* a new connection on the key of a marked instance: it ends first */",
            f"    {lc.t('close')}(ctx, inst_{n}, RG_CLOSE_ACCEPT);",
            f"    rg_flow_delete(ctx->tbl_{n}, inst_{n});",
            f"    inst_{n} = NULL;",
            f"    has_inst_{n} = 0;",
            f"    dir_{n} = 0;",
            "}",
        ]

    def i_find_flow(self, ins: I.FindFlow, lc: LayerC) -> str:
        # the key is laid out as the table's forward key; one probe finds the instance from
        # either side (dir_: 0 when this key's first half is the creator's). No touch: the
        # packet is not one of the instance's own, so its idle timer and LRU place stay
        n, t = lc.name, self.layers[ins.table]
        sizes = [p.size for p in lc.find_fwd]
        if sizes != [p.size for p in t.key_fwd]:
            raise ValueError(
                f"{lc.spec_file}: layer {n}: the lookup's key items have sizes {sizes}, the "
                f"selector of layer {t.name} {[p.size for p in t.key_fwd]}"
            )
        return "\n".join(
            [
                f"{{ /* lookup in {t.name}, {lc.spec_file} */",
                f"    uint8_t fk_[{t.key_len}];",
                *["    " + x for x in self._store_key("fk_", lc.find_fwd, lc)],
                f"    const struct {t.t('inst')} *fi_ = NULL;",
                f"    if (rg_flow_live(ctx->tbl_{t.name}) != 0)",
                f"        fi_ = (const struct {t.t('inst')} *)rg_flow_find_hn(ctx->tbl_{t.name}, fk_, "
                f"{t.key_len}, rg_hash_bytes(fk_, {t.key_len}, ctx->tbl_{t.name}->seed), &dir_{n});",
                f"    flow_{n} = fi_ ? &fi_->fi : NULL;",
                "}",
            ]
        )

    def _linger_lookup(self, lc: LayerC) -> list[str]:
        """A miss looks in the layer's closed table (spec `linger:`): a packet of a closed
        instance is late (Z_<layer>) unless `reopen` holds, which ends the linger and lets the
        packet create a new instance. Only misses pay: one test of an empty table."""
        n = lc.name
        if not lc.d.linger_ns:
            return []
        if n not in self.linger_exits:
            self.linger_exits.append(n)
        reopen = "0"
        if lc.d.linger_reopen is not None:
            reopen = cond_to_c(lc.d.linger_reopen, lc.env())
        return [
            f"if (RG_UNLIKELY(inst_{n} == NULL && ctx->lz_{n} != NULL && rg_flow_live(ctx->lz_{n}) != 0)) {{",
            f"    inst_{n} = (struct {lc.t('inst')} *)rg_flow_lookup_nt(ctx->lz_{n}, kf_{n}, "
            f"{lc.key_len}, &dir_{n}, ctx->clock.now);",
            f"    if (inst_{n} != NULL) {{",
            f"        if (!({reopen})) goto Z_{n}; /* a late packet */",
            "        /* a new connection on the key: the closed one ends first */",
            f"        {lc.t('linger_end')}(ctx, ctx->lz_{n}, inst_{n}, RG_CLOSE_ACCEPT);",
            f"        rg_flow_delete(ctx->lz_{n}, inst_{n});",
            f"        inst_{n} = NULL;",
            f"        dir_{n} = 0;",
            "    }",
            "}",
        ]

    def _perm_init(self, lc: LayerC, pad: str) -> list[str]:
        from rubikgen.expr.ast import Assign

        env = lc.env(create=True)
        out = []
        for v in lc.d.perms.values():
            if v.init is None or v.target is None:
                continue
            st = Assign(v.target, v.init)
            out.append(f"{pad}{stmt_to_c(st, env)} /* init, {lc.spec_file}:{v.line} */")
        return out

    @staticmethod
    def _create_call(lc: LayerC) -> str:
        n = lc.name
        rev = f"kr_{n}" if lc.bidir else "NULL"
        return f"rg_flow_create_nt(ctx->tbl_{n}, kf_{n}, {rev}, {lc.key_len}, ctx->clock.now)"

    def i_create(self, ins: I.Create, lc: LayerC) -> str:
        n = lc.name
        rev = f"kr_{n}" if lc.bidir else "NULL"
        opened = [
            f"    ev_{n}[{lc.ev_index('created')}] = 1;" if ins.flag_created else "",
            f"    if (ctx->obs && ctx->obs->on_open) ctx->obs->on_open(ctx->obs->self, &inst_{n}->fi, ctx->pkt_ts);",
        ]
        if ins.lazy:
            # fast-destroy: built in the scratch record; `finish` commits it to the table
            # unless the packet destroys it first
            if n in self.quiet:
                # the observer may not want it (rg_obs.quiet_transient): shown at the commit if
                # it outlives the packet (lazy_ 2), else only counted
                opened = [
                    opened[0],
                    f"    if (ctx->quiet >> {lc.index} & 1u) {{",
                    f"        lazy_{n} = 2;",
                    f"        qlen_{n} = (uint32_t)in_{n}.len;",
                    "    } else {",
                    f"        lazy_{n} = 1;",
                    "    " + opened[1],
                    "    }",
                ]
            return "\n".join(
                [
                    "{ /* created lazily (fast-destroy) */",
                    f"    inst_{n} = &ctx->scratch_{n};",
                    f"    rg_zero(inst_{n}, sizeof *inst_{n});",
                    *([] if n in self.quiet else [f"    lazy_{n} = 1;"]),
                    f"    has_inst_{n} = 1;",
                    f"    dir_{n} = 0;",
                    f"    inst_{n}->fi.uid = ++ctx->uid;",
                    f"    inst_{n}->fi.layer = {lc.index};",
                    f"    inst_{n}->fi.state = {lc.start_state};",
                    f"    inst_{n}->fi.key_a = kf_{n};",
                    f"    inst_{n}->fi.key_p = {rev if lc.bidir else f'kf_{n}'};",
                    *self._perm_init(lc, "    "),
                    *opened,
                    "}",
                ]
            )
        lines = [
            f"inst_{n} = (struct {lc.t('inst')} *){self._create_call(lc)};",
            f"if (inst_{n} == NULL) {{ /* pool full and eviction impossible */",
            f"    rg_stats_error(&ctx->stats->layer[{lc.index}], RG_REASON_CAP);",
            "    rc = RG_PKT_ERROR;",
            f"    inst_{n} = &ctx->scratch_{n};",
            f"    rg_zero(inst_{n}, sizeof *inst_{n});",
            f"    inst_{n}->fi.state = {lc.start_state};",
            f"    has_inst_{n} = 0;",
            "} else {",
            f"    has_inst_{n} = 1;",
            f"    dir_{n} = 0;",
            f"    inst_{n}->fi.uid = ++ctx->uid;",
            f"    inst_{n}->fi.layer = {lc.index};",
            f"    inst_{n}->fi.state = {lc.start_state};",
            f"    inst_{n}->fi.key_a = (const uint8_t *)rg_flow_key(ctx->tbl_{n}, inst_{n}, 0);",
            f"    inst_{n}->fi.key_p = (const uint8_t *)rg_flow_key(ctx->tbl_{n}, inst_{n}, 1);",
            f"    if (inst_{n}->fi.key_p == NULL) inst_{n}->fi.key_p = inst_{n}->fi.key_a;",
            *self._perm_init(lc, "    "),
            *opened,
            "}",
        ]
        return "\n".join(lines)

    def i_no_instance(self, ins: I.NoInstance, lc: LayerC) -> str:
        n = lc.name
        if not lc.has_instance and not lc.d.perms:
            # nothing reads the scratch record of a layer without selector and perm
            # variables (enter already pointed inst at it): skip zeroing it every packet
            return "/* no instance: scratch record unused */"
        return "\n".join(
            [
                f"inst_{n} = &ctx->scratch_{n};",
                f"rg_zero(inst_{n}, sizeof *inst_{n});",
                f"inst_{n}->fi.state = {lc.start_state};",
                f"has_inst_{n} = 0;",
            ]
        )

    def i_observe(self, ins: I.Observe, lc: LayerC) -> str:
        n = lc.name
        # No test of the memcap drop-flow mark here: S__seq_loss sets RG_FLOW_MEMCAP_DROPPED
        # together with the flow verdict's RG_FI_DROP (rg_verdict_give), so an instance marked
        # dropped never gets past its lookup's one flag test (RG_FI_VERDICTS: V_<layer>, counted
        # as dropped_by_verdict), and a record created by this packet carries no mark yet.
        packet = (
            f"if (has_inst_{n} && ctx->obs && ctx->obs->on_packet)\n"
            f"    ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len, ctx->pkt_ts);"
        )
        if self._created == n and self._created_lazy and n in self.quiet:
            # lazy_ 2: not shown (yet): the commit shows it if it outlives the packet
            lazy = (
                f"if (lazy_{n} == 1u && ctx->obs && ctx->obs->on_packet)\n"
                f"    ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len, ctx->pkt_ts);"
            )
            # shown now or by the commit: the passes after this one do not show it again
            return lazy + (f"\nseen_{n} = inst_{n}->fi.uid;" if self._looped(lc) else "")
        if self._looped(lc):
            # a self-looping layer (SCTP's chunks, PPTP's messages, QUIC's coalesced packets)
            # shows a frame to the observers once per instance, on the instance's first pass:
            # its input is then all the passes parse, and the frame is one packet, not one per pass
            return (
                f"if (has_inst_{n} && inst_{n}->fi.uid != seen_{n} && ctx->obs && ctx->obs->on_packet) {{\n"
                f"    seen_{n} = inst_{n}->fi.uid;\n"
                f"    ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len, ctx->pkt_ts);\n"
                "}"
            )
        return packet

    def i_assign(self, ins: I.Assign, lc: LayerC) -> str:
        return stmt_to_c(ins.stmt, lc.env())

    def i_set_sdu(self, ins: I.SetSdu, lc: LayerC) -> str:
        return f"sdu_{lc.name} = {to_c(ins.value, lc.env()).text};"

    def i_assemble(self, ins: I.Assemble, lc: LayerC) -> str:
        n = lc.name
        s = lc.env().assemble()
        if lc.has_seq:
            # gap recovery: the holes this assemble skipped go to the observers
            d = lc.dir_expr()
            s = (
                f"{{\n    const uint32_t g0_ = sres_{n}.ngaps;\n"
                f"    const uint32_t n0_ = has_inst_{n} ? rg_seq_next(&inst_{n}->seq[{d}]) : 0;\n"
                f"    {s}\n"
                f"    if (RG_UNLIKELY(sres_{n}.ngaps != g0_) && has_inst_{n}) {{\n"
                f"        ev_{n}[{lc.ev_index('gap')}] = 1;\n"
                f"        {self.S}__gaps(ctx, {lc.index}, &inst_{n}->fi, {d}, &sres_{n}, g0_, n0_);\n"
                "    }\n}"
            )
            s += f"\nctx->stats->layer[{lc.index}].seq.bytes_delivered += sdu_{n}.len;"
        return s

    def i_insert_seq(self, ins: I.InsertSeq, lc: LayerC) -> str:
        n = lc.name
        sq = lc.d.seq
        assert sq is not None
        env = lc.env()
        data = to_c(sq.data, env).text
        meta = to_c(sq.meta, env).text
        lines = [f"rg_bytes d_ = {data};", f"uint64_t m_ = {meta};"]
        if sq.data_len is not None:
            lines.append(f"uint64_t tl_ = {to_c(sq.data_len, env).text};")
        else:
            lines.append("uint64_t tl_ = d_.len;")
        lines.append("uint32_t take_ = tl_ > UINT32_MAX ? UINT32_MAX : (uint32_t)tl_;")
        lines.append("uint32_t len_ = d_.len > UINT32_MAX ? UINT32_MAX : (uint32_t)d_.len;")
        win = "NULL"
        if sq.window:
            lft = to_c(sq.window[0], env).text
            rgt = to_c(sq.window[1], env).text
            if sq.ack is not None and sq.retain:
                ack = to_c(sq.ack, env).text
                lines.append(
                    f"rg_seq_win w_ = {{(uint32_t){lft}, (uint32_t){rgt}, (uint32_t)({ack}), 1}};"
                )
            else:
                lines.append(f"rg_seq_win w_ = {{(uint32_t){lft}, (uint32_t){rgt}, 0, 0}};")
            win = "&w_"
        d = lc.dir_expr()
        ev = lc.ev_index
        if sq.unit == "message":  # one unit per packet (or none), whatever its length
            early = "0"
            if sq.early is not None:
                early = f"(({cond_to_c(sq.early, env)}) ? RG_SEQ_EARLY : 0u)"
            lines += [
                f"uint32_t fl_ = rg_seq_minsert(&inst_{n}->seq[{d}], &{lc.t('seqcfg')}, "
                f"(uint32_t)m_, d_.ptr, len_, take_, {early}, {win}, &sres_{n});",
                f"vend_{n} = (uint32_t)m_ + (take_ != 0);",
            ]
        args = (
            f"&inst_{n}->seq[{d}], &{lc.t('seqcfg')}, (uint32_t)m_, d_.ptr, len_, take_, {win}, "
            f"{'RG_SEQ_BORROW' if ins.borrow else '0'}, &sres_{n}"
        )
        fresh = ins.fresh and sq.unit != "message"
        if sq.unit != "message":
            # fresh-seq: on the fresh path the insert is only called when the fast form refuses
            call = "fl_ = rg_seq_insert" if fresh else "uint32_t fl_ = rg_seq_insert"
            lines += [f"{call}({args});", f"vend_{n} = (uint32_t)m_ + take_;"]
        flag = {"rexmit": "REXMIT", "out_of_wnd": "OUT_OF_WINDOW", "overlap": "CONFLICT",
                "buffer_full": "BUFFER_FULL"}  # fmt: skip
        # dead-stores lists the flags something reads; without it (-O0/-O1) all are set
        for e in ins.events if ins.events is not None else list(flag):
            lines.append(f"ev_{n}[{ev(e)}] = (fl_ & RG_SEQ_EV_{flag[e]}) != 0;")
        lines += [
            f"rg_seq_stats *ss_ = &ctx->stats->layer[{lc.index}].seq;",
            "ss_->inserts++;",
            f"ss_->bytes_new += sres_{n}.new_bytes;",
            # in-order data raises none of these: one test instead of eight updates
            "if (RG_UNLIKELY(fl_ & (RG_SEQ_EV_REXMIT | RG_SEQ_EV_OVERLAP | "
            "RG_SEQ_EV_OUT_OF_WINDOW | RG_SEQ_EV_BUFFER_FULL | RG_SEQ_EV_CONFLICT | "
            "RG_SEQ_EV_MEMCAP))) {",
            # evasion and memcaps: the overlap event, the policy on the instance (issue 14)
            "    if (fl_ & (RG_SEQ_EV_CONFLICT | RG_SEQ_EV_MEMCAP))",
            f"        {self.S}__seq_loss(ctx, {lc.index}, &inst_{n}->fi, inst_{n}->seq, {lc.ndirs}, "
            f"{d}, &sres_{n}, has_inst_{n});",
            "    ss_->rexmit += (fl_ & RG_SEQ_EV_REXMIT) != 0;",
            "    ss_->overlap += (fl_ & RG_SEQ_EV_OVERLAP) != 0;",
            "    ss_->out_of_window += (fl_ & RG_SEQ_EV_OUT_OF_WINDOW) != 0;",
            "    ss_->buffer_full += (fl_ & RG_SEQ_EV_BUFFER_FULL) != 0;",
            "    ss_->conflict += (fl_ & RG_SEQ_EV_CONFLICT) != 0;",
            "}",
            f"if (RG_UNLIKELY(sres_{n}.dup_bytes | sres_{n}.oow_bytes | sres_{n}.cap_bytes)) {{",
            f"    ss_->bytes_dup += sres_{n}.dup_bytes;",
            f"    ss_->bytes_dropped += sres_{n}.oow_bytes + sres_{n}.cap_bytes;",
            "}",
        ]
        if fresh:
            # fresh-seq: the instance is this packet's and sres_ was cleared at enter: the fast
            # form raises no flag and adds only len_ to new_bytes, so of the statistics only
            # inserts and bytes_new move (the general insert and its statistics otherwise)
            k = lines.index(f"fl_ = rg_seq_insert({args});")
            vend = lines.pop(k + 1)
            general = lines[k:]
            lines = [
                *lines[:k],
                "uint32_t fl_ = 0;",
                f"if (RG_LIKELY(rg_seq_insert_fresh({args}))) {{",
                f"    ctx->stats->layer[{lc.index}].seq.inserts++;",
                f"    ctx->stats->layer[{lc.index}].seq.bytes_new += len_;",
                "} else {",
                *["    " + x for x in general if not x.startswith(f"ev_{n}[")],
                "}",
                vend,
                *[x for x in general if x.startswith(f"ev_{n}[")],
            ]
        # dynamic subscription (rg_nf_host.no_more_bytes): no NF wants this direction's bytes
        # any more, so nothing is buffered or copied (what was held goes); v. conditions see
        # every number as ready
        body = "\n".join("    " + x for x in lines)
        sq_d = f"&inst_{n}->seq[{d}]"
        return (
            f"if (RG_LIKELY(!(inst_{n}->fi.no_bytes >> ({d}) & 1u))) {{\n{body}\n}} else {{\n"
            f"    if (!rg_seq_empty({sq_d})) rg_seq_set_base({sq_d}, rg_seq_next({sq_d}));\n"
            f"    vend_{n} = rg_seq_next({sq_d});\n}}"
        )

    def i_vupdate(self, ins: I.VUpdate, lc: LayerC) -> str:
        n = lc.name
        k = ins.atom
        d = lc.dir_expr()
        c = cond_to_c(ins.expr, lc.env())
        return (
            f"/* latch {c_comment(ins.text)} */\n"
            f"if (!inst_{n}->vl[{k}][{d}] && ({c})) {{\n"
            f"    inst_{n}->vl[{k}][{d}] = 1;\n"
            f"    inst_{n}->vend[{k}][{d}] = vend_{n};\n"
            "}"
        )

    def i_set_state(self, ins: I.SetState, lc: LayerC) -> str:
        n = lc.name
        t = ins.transition
        # tmask is only read by the close's `complete` test, through the setup mask: the
        # other transitions' bits are never looked at
        keep = t <= 64 and (lc.setup_mask >> (t - 1)) & 1
        mask = f"inst_{n}->tmask |= UINT64_C(1) << {t - 1};\n" if keep else ""
        return (
            f"inst_{n}->fi.state = {ins.state}; /* -> {lc.states[ins.state]} */\n"
            f"psm_{n} = {t}; /* {ins.name} */\n" + mask
        ).rstrip()

    def i_fire(self, ins: I.Fire, lc: LayerC) -> str:
        return f"ev_{lc.name}[{lc.ev_index(ins.event)}] = 1;"

    def i_fail(self, ins: I.Fail, lc: LayerC) -> str:
        n = lc.name
        s = f"ev_{n}[{lc.ev_index('fail')}] = 1; /* on_fail: {ins.policy} */"
        if ins.policy == "reset":
            s += f"\ninst_{n}->fi.state = {ins.start};"
        return s

    def _call(self, h: HandlerC, args: list[Arg], lc: LayerC, end: str = "0") -> str:
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
        hidx = list(self.handlers).index(h.name)
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

    def lifecycle(self, lc: LayerC) -> str:
        """The lifecycle handlers of a layer, for its lifecycle entry (`L_x_close`): each runs
        when the instance ends for a reason its `with` covers and its `when` holds. The locals
        the per-packet code uses are bound to the ending instance (direction 0)."""
        hs = self.prog.layers[lc.name].lifecycle
        if not hs:
            return ""
        n = lc.name
        env = lc.env()
        out = [
            f"struct {lc.t('inst')} *inst_{n} = in;",
            f"const int has_inst_{n} = 1, dir_{n} = 0;",
        ]
        close_c = self.sd.close_c
        for hn, reasons in hs:
            h = self.sd.handlers[hn]
            where = f"{self.sd.file}:{h.line}"
            conds = [" || ".join(f"reason == {close_c[r]}" for r in reasons) or "0"]
            if h.when is not None:
                conds.append(cond_to_c(h.when, env))
            body = self._call(self.handlers[hn], h.args, lc, "RG_END(reason)")
            out.append(f"if (({') && ('.join(conds)})) {{ /* handler {hn}: {where} */")
            out += ["    " + ln for ln in body.splitlines()]
            out.append("}")
        return "\n".join("    " + ln for ln in out)

    def i_handler(self, ins: I.Handler, lc: LayerC) -> str:
        name = ins.name
        return self._call(self.handlers[name], self.sd.handlers[name].args, lc)

    def i_callback(self, ins: I.Callback, lc: LayerC) -> str:
        return self._call(self.handlers[ins.name], ins.args, lc)

    def i_loop_decide(self, ins: I.LoopDecide, lc: LayerC) -> str:
        c = ins.cond
        n = lc.name
        if c is None or c.expr is None:
            s = f"loop_{n} = 1;"
        else:
            s = f"loop_{n} = ({cond_to_c(c.expr, lc.env())}) ? 1u : 0u; /* {c_comment(unparse(c.expr))} */"
        inp = ins.input
        # the next pass's input: the sdu, or the edge's `input` (evaluated now: the instance
        # may be destroyed before the self-loop runs)
        src = to_c(inp, lc.env()).text if inp is not None else f"sdu_{n}"
        return s + f"\nlin_{n} = {src};"

    def i_reenter(self, ins: I.Reenter, lc: LayerC) -> str:
        n = lc.name
        return f"in_{n} = lin_{n};\nrep_{n}++;"

    def i_transform(self, ins: I.Transform, lc: LayerC) -> str:
        n = lc.name
        spec = self.sd.transforms[ins.name]
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
        user = self.sd.user_reasons
        lines += [
            "    size_t xl_ = 0;",
            f"    int xr_ = {call};",
            f"    sdu_{n} = xr_ == 0 ? rg_bytes_make(ctx->xout_{n}, xl_) : rg_bytes_empty();",
            "    switch (xr_) { /* failures: counted, the packet goes on with an empty sdu */",
            "    case 0: break;",
        ]
        for code, reason in spec.failures:
            r = (
                reason
                if reason.startswith("RG_REASON_")
                else f"RG_REASON_USER + {user.index(reason)}"
            )
            lines.append(
                f"    case {code}: rg_stats_error(&ctx->stats->layer[{lc.index}], {r}); break;"
            )
        lines += [
            f"    default: rg_stats_error(&ctx->stats->layer[{lc.index}], RG_REASON_OTHER); break;",
            "    }",
            "}",
        ]
        return "\n".join(lines)

    def i_destroy(self, ins: I.Destroy, lc: LayerC) -> str:
        n = lc.name
        lines = []
        if self._max_repeat(lc):
            # the sdu may point into the instance's sequence: keep it for the self-loop
            lines.append(
                f"if (loop_{n}) lin_{n} = rg__keep(&ctx->keep_{n}, lin_{n}, "
                f"&ctx->stats->layer[{lc.index}].seq);"
            )
        close = f"{lc.t('close')}(ctx, inst_{n}, RG_CLOSE_ACCEPT);"
        if ins.lazy:
            st = f"ctx->stats->layer[{lc.index}].inst"
            body = [
                f"if (lazy_{n}) {{ /* never entered the table (fast-destroy) */",
                f"    lazy_{n} = 0;",
                f"    {st}.created++;",
                f"    {st}.destroyed++;",
                "} else {",
                f"    rg_flow_delete(ctx->tbl_{n}, inst_{n});",
                "}",
            ]
            if n in self.quiet:
                # a one-packet instance never shown: its close would only tell the observer
                # (no lifecycle handlers, drain or close rules) and free its sequences; it is in
                # the scratch record, zeroed before its next use, so a sequence that holds no
                # buffer (a datagram passed through) is not reinitialised
                frees = [
                    f"    rg_seq_discard(&inst_{n}->seq[{d}]);"
                    for d in range(lc.ndirs)
                    if lc.has_seq
                ]
                lines += [
                    f"if (lazy_{n} == 2u) {{ /* one packet, not shown (rg_obs.quiet_transient) */",
                    f"    lazy_{n} = 0;",
                    *frees,
                    f"    {st}.created++;",
                    f"    {st}.destroyed++;",
                    f"    ctx->stats->layer[{lc.index}].transient++;",
                    "} else {",
                    "    " + close,
                    *["    " + x for x in body],
                    "}",
                ]
            else:
                lines += [close, *body]
        else:
            lines.append(close)
            lines.append(f"rg_flow_delete(ctx->tbl_{n}, inst_{n});")
        lines += [f"inst_{n} = &ctx->scratch_{n};", f"has_inst_{n} = 0;"]
        return "\n".join(lines)

    def i_finish(self, ins: I.Finish, lc: LayerC) -> str:
        n = lc.name
        lines = []
        if ins.commit:
            quiet = n in self.quiet
            # an instance not shown yet (lazy_ 2) is opened now, with its first packet
            show = [
                "if (show_ && ctx->obs) {",
                "    if (ctx->obs->on_open) "
                f"ctx->obs->on_open(ctx->obs->self, &inst_{n}->fi, ctx->pkt_ts);",
                "    if (ctx->obs->on_packet) "
                f"ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, 0, qlen_{n}, ctx->pkt_ts);",
                "}",
            ]
            shown = ["    " + x for x in show] if quiet else []
            lines += [
                f"if (lazy_{n}) {{ /* the instance outlives the packet: into the table */",
                f"    void *p_ = {self._create_call(lc)};",
                *([f"    const unsigned show_ = lazy_{n} == 2u;"] if quiet else []),
                f"    lazy_{n} = 0;",
                "    if (p_ == NULL) {",
                *["    " + x for x in shown],
                f"        rg_stats_error(&ctx->stats->layer[{lc.index}], RG_REASON_CAP);",
                "        rc = RG_PKT_ERROR;",
                f"        {lc.t('close')}(ctx, inst_{n}, RG_CLOSE_EVICTED);",
                f"        has_inst_{n} = 0;",
                "    } else {",
                f"        rg_copy(p_, inst_{n}, sizeof *inst_{n});",
                f"        inst_{n} = (struct {lc.t('inst')} *)p_;",
                f"        inst_{n}->fi.key_a = (const uint8_t *)rg_flow_key(ctx->tbl_{n}, p_, 0);",
                f"        inst_{n}->fi.key_p = (const uint8_t *)rg_flow_key(ctx->tbl_{n}, p_, 1);",
                f"        if (inst_{n}->fi.key_p == NULL) inst_{n}->fi.key_p = inst_{n}->fi.key_a;",
                *["    " + x for x in shown],
                "    }",
                "}",
            ]
        if ins.settle and lc.d.seq is not None and lc.has_seq and lc.d.seq.unit == "byte":
            lines.append(
                f"if (has_inst_{n}) rg_seq_settle(&inst_{n}->seq[{lc.dir_expr()}], &{lc.t('seqcfg')});"
            )
        return "\n".join(lines) or "/* nothing to finish */"


def memcap_limits(sd: Any) -> dict[str, str]:
    """The stack's memcap defaults for the template (the IR's resolved `limits:`)."""
    lim = sd.limits
    return {
        "reassembly": str(lim.reassembly),
        "flows": str(lim.flows),
        "policy_c": "RG_MEMCAP_" + lim.policy.upper().replace("-", "_"),
    }


__all__ = ["CGen", "Generated", "HandlerC"]
