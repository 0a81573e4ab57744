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
its own locals and the prefetch hints.

Stage 1 is a renderer registry of its own (`STAGE1`, backend/registry.py) next to the C one:
the header parse, the key's words and the pure local instructions are the C renderers' (the
same functions), the enter and the lookup its own, and every other opcode renders nothing."""

from __future__ import annotations

import re

from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import OPCODES, Block, Branch, Call, Done, Instr, Jump, Return

from .c.flow import key_words
from .c.layer import header_zero, parse_lines
from .c.registry import render_instr
from .c.terms import term
from .context import CContext
from .frame import block_head, entry_switch, frame_locals
from .layer_c import LayerC
from .registry import Registry

#: Effect classes an instruction may write for stage 1 to run it: the packet's own locals.
_LOCAL = ("HEADER:", "SDU:", "TEMP:", "KEY:", "FIRED:")
#: Instructions stage 1 runs when they write only locals (not LoopDecide: without it a layer
#: never loops in stage 1, whose walk so always ends).
_PURE = (I.Assign, I.SetSdu, I.Fire)

#: Stage 1's renderers: an instruction gives lines, a terminator its lines after the block.
STAGE1: Registry[CContext] = Registry("burst-stage1")


def _label(block: str) -> str:
    """The per-packet function's label of a block (cgen's B_x) renamed S1_x."""
    return "S1_" + re.sub(r"\W", "_", block)


def _local_only(ins: Instr) -> bool:
    return all(w.startswith(_LOCAL) for w in ins.writes)


@STAGE1.register(I.Enter)
def _enter(ins: I.Enter, lc: LayerC, cx: CContext) -> list[str]:
    n = lc.name
    rz = cx.walk.resets.add
    return header_zero(ins, lc) + [
        rz(f"t_{n}", f"t_{n} = {lc.t('tmp_init')};"),
        rz(f"ev_{n}", f"memset(ev_{n}, 0, sizeof ev_{n});"),
        f"cur_{n} = 0; err_{n} = 0; loop_{n} = 0;",
        f"has_inst_{n} = 0; dir_{n} = 0; inst_{n} = &ctx->scratch_{n};",
        f"sdu_{n} = rg_bytes_empty();",
    ]


@STAGE1.register(I.ParseHeader)
def _parse_header(ins: I.ParseHeader, lc: LayerC, cx: CContext) -> list[str]:
    return parse_lines(lc)  # without the setters' spans and the rules' hook


@STAGE1.register(I.BuildKey)
def _build_key(ins: I.BuildKey, lc: LayerC, cx: CContext) -> list[str]:
    # the words only: the hint hashes them (no store-forwarding stall)
    return key_words(cx, lc)  # and the reverse's: its slot too


@STAGE1.register(I.Lookup)
def _lookup(ins: I.Lookup, lc: LayerC, cx: CContext) -> list[str]:
    # a table without instances (IP fragments, mostly) is not worth a hash;
    # ctx->pf_hs: the hashes kept for pass B (NULL: no pass B)
    n = lc.name
    return [
        f"if (rg_flow_live(ctx->tbl_{n}) != 0) "
        f"rg_flow_prefetch_hint_w(ctx->pf_hs, ctx->tbl_{n}, kw_{n}, "
        f"{f'kwr_{n}' if lc.key_rev else 'NULL'}, {lc.key_len});"
    ]


@STAGE1.register(*_PURE)
def _pure(ins: Instr, lc: LayerC, cx: CContext) -> list[str]:
    # the C renderer's own text, when the instruction writes only the packet's locals
    return render_instr(ins, lc, cx).splitlines() if _local_only(ins) else []


def _skip(ins: Instr, lc: LayerC, cx: CContext) -> list[str]:
    return []  # changes the context: not in stage 1


STAGE1.register(*STAGE1.missing(OPCODES.values()))(_skip)


@STAGE1.register(Branch)
def _branch(t: Branch, b: Block, cx: CContext) -> list[str]:
    if t.cond.kind == "found":
        # stage 1 looks nothing up: the miss path (its label stays referenced)
        return [f"if (0) goto {_label(t.then)};", f"goto {_label(t.else_)};"]
    lines = term(cx, b)
    if any("_vtest(" in x or "inst_" in x for x in lines):
        # a test of instance state (virtual atoms read the sequence, which a transient
        # instance may have freed): stage 1 has no instance, so it takes the else branch
        return [f"if (0) goto {_label(t.then)};", f"goto {_label(t.else_)};"]
    return [_rename(x) for x in lines]


@STAGE1.register(Jump, Call, Return, Done)
def _renamed(t: object, b: Block, cx: CContext) -> list[str]:
    # the per-packet function's labels, renamed: L_x -> S1_x (and its exit)
    return [_rename(x) for x in term(cx, b)]


def _rename(line: str) -> str:
    line = line.replace("goto R_done;", "goto S1_done;")
    return re.sub(r"goto B_(\w+);", r"goto S1_\1;", line)


def _body(cx: CContext) -> str:
    out = entry_switch(cx, _label, "1")
    targets = cx.targets()
    for name, b in cx.prog.blocks.items():
        out += block_head(name, b, targets, _label)
        for ins in b.instrs:
            lines: list[str] = STAGE1.render(ins, cx.layers[ins.layer], cx)
            for line in lines:
                out.append(f"        {line}" if line else "")
        out.append("    }")
        tlines: list[str] = STAGE1.render(b.term, b, cx)
        out += ["    " + x for x in tlines]
    out += ["    goto S1_done;", "", "S1_done:", "    return 1;"]
    body = "\n".join(out)
    return cx.lean(body) if cx.opt >= 1 else body


def render_stage1(main: CContext) -> str:
    """The C text of the stack's burst stage 1 (see the module docstring)."""
    cx = main.for_walk()  # its own clears to prune, nothing of the per-packet walk
    S = cx.S
    tables = [f"rg_flow_cold(ctx->tbl_{lc.name})" for lc in cx.layers.values() if lc.has_instance]
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
            frame_locals(cx),
            cx.walk.resets.prune(_body(cx)) if cx.opt >= 1 else _body(cx),
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
