"""Stage 1 of burst processing: `S__prefetch(ctx, entry, data, caplen)` (pass A), which the
drivers call on every packet of a burst, then `S__prefetch_recs(ctx)` (pass B), before
processing the burst's packets in order (stage 2: the per-packet function, unchanged).

Stage 1 walks the same blocks as the per-packet function, with the same locals and labels, but
runs only what writes the packet's own locals (header parsing, keys, temp and sdu assignments,
event flags): every instruction that would change the context (statistics,
instances, sequences, PSM states, handlers, observers, rules, transforms) is left out. Each
lookup of a table that holds instances hashes the key and prefetches the index slot the probe
starts at, and for a bidirectional table the slot of the swapped key too (creating an instance
inserts there, deleting one removes from there: `rg_flow_prefetch_hint`), then goes on as a
miss, so the tables of the layers above are prefetched too. With `rg_ctx_cfg.prefetch_records`
(`--prefetch-records`) it also keeps each hash in the context, and pass B prefetches the
records whose tag matches each kept slot (`rg_flow_prefetch_rec`: the index only, never a
record, is read; most of it runs inside pass A, a few lookups behind, the rest in
`S__prefetch_recs`); off by default, as it did not pay where measured (BENCHMARKS.md).
The walk is a speculation: a layer whose real path depends on its instance
(reassembly, a decapsulating transform) may take another branch here, which costs at most a
useless prefetch; it never changes what stage 2 computes, since stage 1 writes nothing but
its own locals and the prefetch hints."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import Branch

from .layer_c import c_comment
from .prune import Resets

if TYPE_CHECKING:
    from rubikgen.ir.nodes import Block, Instr, Program

    from .layer_c import LayerC


class Host(Protocol):
    """What stage 1 uses of the per-packet function's generator (cgen.CGen; a protocol so that
    this module does not import cgen, which imports it)."""

    S: str
    opt: int
    prog: Program
    layers: dict[str, LayerC]

    def locals(self) -> str: ...
    def lean(self, body: str) -> str: ...
    def term(self, b: Block) -> list[str]: ...
    def instr(self, ins: Instr) -> str: ...
    def _targets(self) -> set[str]: ...
    def _store_key(self, buf: str, parts: list[Any], lc: LayerC) -> list[str]: ...
    def _key_words(self, lc: LayerC) -> list[str]: ...


#: Effect classes an instruction may write for stage 1 to run it: the packet's own locals.
_LOCAL = ("HEADER:", "SDU:", "TEMP:", "KEY:", "FIRED:")
#: Instructions stage 1 runs when they write only locals (not LoopDecide: without it a layer
#: never loops in stage 1, whose walk so always ends).
_PURE = (I.Assign, I.SetSdu, I.Fire)


def _label(block: str) -> str:
    """The per-packet function's label of a block (cgen's B_x) renamed S1_x."""
    return "S1_" + re.sub(r"\W", "_", block)


def _local_only(ins: Instr) -> bool:
    return all(w.startswith(_LOCAL) for w in ins.writes)


class Stage1:
    def __init__(self, cg: Host) -> None:
        self.cg = cg
        self.resets = Resets()  # the enter's clears nothing in stage 1 reads (prune.py)

    def instr(self, ins: Instr, lc: LayerC) -> list[str]:
        cg, n = self.cg, lc.name
        if isinstance(ins, I.Enter):
            zero = lc.zero_conditional() if ins.zero == "conditional" else []
            if ins.zero != "conditional":
                zero = [f"h_{n} = {lc.t('hdr_init')};"]
            rz = self.resets.add
            return zero + [
                rz(f"t_{n}", f"t_{n} = {lc.t('tmp_init')};"),
                rz(f"ev_{n}", f"memset(ev_{n}, 0, sizeof ev_{n});"),
                f"cur_{n} = 0; err_{n} = 0; loop_{n} = 0;",
                f"has_inst_{n} = 0; dir_{n} = 0; inst_{n} = &ctx->scratch_{n};",
                f"sdu_{n} = rg_bytes_empty();",
            ]
        if isinstance(ins, I.ParseHeader):
            code = lc.header_code()
            out = [code] if code else []
            if lc._hc_jumps:
                out.append(f"HE_{n}:")
            out.append(
                f"if (err_{n} == 0) sdu_{n} = rg_bytes_make(in_{n}.ptr + cur_{n}, in_{n}.len - cur_{n});"
            )
            return out
        if isinstance(ins, I.BuildKey):
            # the words only: the hint hashes them (no store-forwarding stall)
            return cg._key_words(lc)  # and the reverse's: its slot too
        if isinstance(ins, I.Lookup):
            # a table without instances (IP fragments, mostly) is not worth a hash;
            # ctx->pf_hs: the hashes kept for pass B (NULL: no pass B)
            return [
                f"if (rg_flow_live(ctx->tbl_{n}) != 0) "
                f"rg_flow_prefetch_hint_w(ctx->pf_hs, ctx->tbl_{n}, kw_{n}, "
                f"{f'kwr_{n}' if lc.key_rev else 'NULL'}, {lc.key_len});"
            ]
        if isinstance(ins, _PURE) and _local_only(ins):
            return cg.instr(ins).splitlines()
        return []  # changes the context: not in stage 1

    def term(self, b: Block) -> list[str]:
        t = b.term
        if isinstance(t, Branch) and t.cond.kind == "found":
            # stage 1 looks nothing up: the miss path (its label stays referenced)
            return [f"if (0) goto {_label(t.then)};", f"goto {_label(t.else_)};"]
        lines = self.cg.term(b)
        if isinstance(t, Branch) and any("_vtest(" in x or "inst_" in x for x in lines):
            # a test of instance state (virtual atoms read the sequence, which a transient
            # instance may have freed): stage 1 has no instance, so it takes the else branch
            return [f"if (0) goto {_label(t.then)};", f"goto {_label(t.else_)};"]
        # the per-packet function's labels, renamed: L_x -> S1_x (and its exit)
        return [_rename(x) for x in lines]

    def body(self) -> str:
        cg = self.cg
        prog = cg.prog
        out: list[str] = ["    switch (entry) {"]
        for e in sorted({prog.entries[k] for k in prog.entries}):
            lc = cg.layers[e]
            out += [
                f"    case {lc.index}: /* entry layer {e} */",
                f"        in_{e} = rg_bytes_make(data, caplen);",
                f"        ret_{e} = 0;",
                f"        rep_{e} = 0;",
                f"        goto {_label(prog.layers[e].entry)};",
            ]
        out += ["    default:", "        return 1;", "    }"]
        targets = cg._targets()
        for name, b in prog.blocks.items():
            src = f" {c_comment(str(b.src))}" if b.src else ""
            if name in targets:
                out.append(f"{_label(name)}: /* {name}{src} */")
            else:
                out.append(f"    /* {name}{src} */")
            out.append("    {")
            for ins in b.instrs:
                for line in self.instr(ins, cg.layers[ins.layer]):
                    out.append(f"        {line}" if line else "")
            out.append("    }")
            out += ["    " + x for x in self.term(b)]
        out += ["    goto S1_done;", "", "S1_done:", "    return 1;"]
        body = "\n".join(out)
        return cg.lean(body) if cg.opt >= 1 else body

    def render(self) -> str:
        S = self.cg.S
        tables = [
            f"rg_flow_cold(ctx->tbl_{lc.name})" for lc in self.cg.layers.values() if lc.has_instance
        ]
        return "\n".join(
            [
                "/* Burst stage 1 (rubikgen/backend/burst_c.py): parse to the flow-table keys and",
                " * prefetch their index slots; writes nothing but its locals. */",
                f"static int {S}__prefetch(void *vctx, unsigned entry, const uint8_t *data, "
                "uint32_t caplen)",
                "{",
                f"    struct {S}_ctx *ctx = (struct {S}_ctx *)vctx;",
                "    /* tables that fit in the cache: not worth parsing twice */",
                f"    if (!ctx->prefetch_always && !({' || '.join(tables) or '0'})) {{",
                "        return 0;",
                "    }",
                "    int rc RG_MAYBE_UNUSED = RG_PKT_OK;",
                "    const uint64_t ts_ns RG_MAYBE_UNUSED = ctx->clock.now;",
                self.cg.locals(),
                self.resets.prune(self.body()) if self.cg.opt >= 1 else self.body(),
                "}",
                "",
                "/* Burst stage 1, pass B (rg_ctx_cfg.prefetch_records): the records the slots",
                " * of pass A lead to. */",
                f"static void {S}__prefetch_recs(void *vctx)",
                "{",
                f"    struct {S}_ctx *ctx = (struct {S}_ctx *)vctx;",
                "    if (ctx->pf_hs) rg_flow_prefetch_hints(ctx->pf_hs);",
                "}",
            ]
        )


def _rename(line: str) -> str:
    line = line.replace("goto R_done;", "goto S1_done;")
    return re.sub(r"goto B_(\w+);", r"goto S1_\1;", line)


def render_stage1(cg: Host) -> str:
    """The C text of the stack's burst stage 1 (see the module docstring)."""
    return Stage1(cg).render()
