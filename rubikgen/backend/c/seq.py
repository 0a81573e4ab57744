"""C renderers of reassembly: inserting into a sequence, assembling its contiguous data,
latching virtual atoms (InsertSeq, Assemble, VUpdate)."""

from __future__ import annotations

from rubikgen.ir import instrs as I

from ..cexpr import cond_to_c, to_c
from ..context import CContext
from ..layer_c import LayerC, c_comment
from .registry import C


@C.register(I.Assemble)
def assemble(ins: I.Assemble, lc: LayerC, cx: CContext) -> str:
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
            f"        {cx.S}__gaps(ctx, {lc.index}, &inst_{n}->fi, {d}, &sres_{n}, g0_, n0_);\n"
            "    }\n"
            # the packet trace (rg/rg_trace.h: nothing without -DRG_TRACE)
            f"    RG_TRACE_ASM({lc.index}, sdu_{n}.len, sres_{n}.ngaps - g0_);\n}}"
        )
        s += f"\nctx->stats->layer[{lc.index}].seq.bytes_delivered += sdu_{n}.len;"
    return s


@C.register(I.InsertSeq)
def insert_seq(ins: I.InsertSeq, lc: LayerC, cx: CContext) -> str:
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
        f"        {cx.S}__seq_loss(ctx, {lc.index}, &inst_{n}->fi, inst_{n}->seq, {lc.ndirs}, "
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
    # the packet trace (rg/rg_trace.h: nothing without -DRG_TRACE): where the data fell
    lines.append(
        f"RG_TRACE_SEQ({lc.index}, {d}, fl_, (uint32_t)m_, take_, rg_seq_next(&inst_{n}->seq[{d}]));"
    )
    body = "\n".join("    " + x for x in lines)
    sq_d = f"&inst_{n}->seq[{d}]"
    return (
        f"if (RG_LIKELY(!(inst_{n}->fi.no_bytes >> ({d}) & 1u))) {{\n{body}\n}} else {{\n"
        f"    if (!rg_seq_empty({sq_d})) rg_seq_set_base({sq_d}, rg_seq_next({sq_d}));\n"
        f"    vend_{n} = rg_seq_next({sq_d});\n}}"
    )


@C.register(I.VUpdate)
def vupdate(ins: I.VUpdate, lc: LayerC, cx: CContext) -> str:
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


@C.register(I.Frame)
def frame(ins: I.Frame, lc: LayerC, cx: CContext) -> str:
    """Framing: the next unit of the input is the sdu, the bytes after it the payload (the
    self-loop hands them to the next pass). Only a unit straddling deliveries is copied (into
    the instance's framer); the hole flag counts on the first pass of a delivery only."""
    n = lc.name
    d = lc.dir_expr()
    return (
        f"if (has_inst_{n}) {{\n"
        f"    sdu_{n} = rg_framer_step(&inst_{n}->fr[{d}], &{lc.t('frcfg')}, "
        f"rg_bytes_make(in_{n}.ptr + cur_{n}, in_{n}.len - cur_{n}), gin_{n} && rep_{n} == 0u, "
        f"&fres_{n});\n"
        # the framer takes at most what it was given; checked anyway, as every cursor advance
        f"    if (RG_UNLIKELY(!rg_has(in_{n}.len, cur_{n}, fres_{n}.used))) "
        f"fres_{n}.used = (uint32_t)(in_{n}.len - cur_{n});\n"
        f"    cur_{n} += fres_{n}.used;\n"
        "} else { /* no instance: nothing is cut, nothing is left for another pass */\n"
        f"    rg_zero(&fres_{n}, sizeof fres_{n});\n"
        f"    sdu_{n} = rg_bytes_empty();\n"
        f"    cur_{n} = (uint32_t)in_{n}.len;\n"
        "}"
    )
