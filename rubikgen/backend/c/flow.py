"""C renderers of the instance opcodes: keys, lookups, creation, observers, destruction and
the layer's exit (BuildKey, Lookup, FindFlow, Create, NoInstance, Observe, Destroy, Finish)."""

from __future__ import annotations

from typing import Any

from rubikgen.expr.ast import Assign
from rubikgen.ir import instrs as I

from ..cexpr import cond_to_c, stmt_to_c, to_c
from ..context import CContext, looped
from ..keywords import build_words
from ..layer_c import LayerC, c_comment
from .registry import C


def store_key(cx: CContext, buf: str, parts: list[Any], lc: LayerC) -> list[str]:
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


def key_words(cx: CContext, lc: LayerC, rev: bool = True) -> list[str]:
    """The key as words (what the word lookups hash and compare: keywords.py)."""
    n = lc.name
    keys = [(f"kw_{n}", lc.key_fwd)]
    if rev and lc.bidir:
        keys.append((f"kwr_{n}", lc.key_rev))
    return build_words(n, lc.env(), keys, lc.key_len)


@C.register(I.BuildKey)
def build_key(ins: I.BuildKey, lc: LayerC, cx: CContext) -> str:
    # the byte keys: creates, instance records, observers and rules read them (the
    # lookup right after takes the key as words, see lookup below)
    out = store_key(cx, f"kf_{lc.name}", lc.key_fwd, lc)
    if lc.bidir:
        out += store_key(cx, f"kr_{lc.name}", lc.key_rev, lc)
    return "\n".join(out)


@C.register(I.Lookup)
def lookup(ins: I.Lookup, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    if n not in cx.walk.verdict_exits:
        cx.walk.verdict_exits.append(n)
    inst = f"inst_{n} = (struct {lc.t('inst')} *)"
    if cx.walk.key_built == n and n not in cx.memo_lookups:
        # right after the key's narrow stores: hashing those bytes 8 at a time would
        # stall (no store forwarding of several stores into one load), so the key's
        # words are assembled in registers from the same fields (nothing ran between),
        # only when the table has instances (an IPv4 layer's holds fragments only).
        # Not for a memo table: its hit hashes nothing, and the words cost about 10
        # instructions there for no measured gain (BENCHMARKS.md)
        words = [f"if (rg_flow_live(ctx->tbl_{n}) != 0) {{"]
        words += ["    " + x for x in key_words(cx, lc, rev=False)]
        look = [
            f"{inst}NULL;",
            *words,
            f"    {inst}rg_flow_lookup_wt(ctx->tbl_{n}, kw_{n}, {lc.key_len}, &dir_{n}, "
            "ctx->clock.now);",
            "}",
        ]
    elif n in cx.memo_lookups:  # a tunnel's outer table: the last hit's record first
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
            *linger_lookup(cx, lc),
            f"has_inst_{n} = inst_{n} != NULL;",
            # one flag test: a flow verdict (drop / bypass) given to this instance before
            *verdict_test(lc),
        ]
    )


def verdict_test(lc: LayerC) -> list[str]:
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


@C.register(I.FindFlow)
def find_flow(ins: I.FindFlow, lc: LayerC, cx: CContext) -> str:
    # the key is laid out as the table's forward key; one probe finds the instance from
    # either side (dir_: 0 when this key's first half is the creator's). No touch: the
    # packet is not one of the instance's own, so its idle timer and LRU place stay
    n, t = lc.name, cx.layers[ins.table]
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
            *["    " + x for x in store_key(cx, "fk_", lc.find_fwd, lc)],
            f"    const struct {t.t('inst')} *fi_ = NULL;",
            f"    if (rg_flow_live(ctx->tbl_{t.name}) != 0)",
            f"        fi_ = (const struct {t.t('inst')} *)rg_flow_find_hn(ctx->tbl_{t.name}, fk_, "
            f"{t.key_len}, rg_hash_bytes(fk_, {t.key_len}, ctx->tbl_{t.name}->seed), &dir_{n});",
            f"    flow_{n} = fi_ ? &fi_->fi : NULL;",
            "}",
        ]
    )


def linger_lookup(cx: CContext, lc: LayerC) -> list[str]:
    """A miss looks in the layer's closed table (spec `linger:`): a packet of a closed
    instance is late (Z_<layer>) unless `reopen` holds, which ends the linger and lets the
    packet create a new instance. Only misses pay: one test of an empty table."""
    n = lc.name
    if not lc.d.linger_ns:
        return []
    if n not in cx.walk.linger_exits:
        cx.walk.linger_exits.append(n)
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


def perm_init(lc: LayerC, pad: str) -> list[str]:
    """The create's `perm.x = init` statements (the target a bound name the IR carries)."""
    env = lc.env(create=True)
    out = []
    for v in lc.d.perms.values():
        if v.init is None or v.target is None:
            continue
        st = Assign(v.target, v.init)
        out.append(f"{pad}{stmt_to_c(st, env)} /* init, {lc.spec_file}:{v.line} */")
    return out


def create_call(lc: LayerC) -> str:
    n = lc.name
    rev = f"kr_{n}" if lc.bidir else "NULL"
    return f"rg_flow_create_nt(ctx->tbl_{n}, kf_{n}, {rev}, {lc.key_len}, ctx->clock.now)"


@C.register(I.Create)
def create(ins: I.Create, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    rev = f"kr_{n}" if lc.bidir else "NULL"
    opened = [
        f"    ev_{n}[{lc.ev_index('created')}] = 1;" if ins.flag_created else "",
        f"    if (ctx->obs && ctx->obs->on_open) ctx->obs->on_open(ctx->obs->self, &inst_{n}->fi, ctx->pkt_ts);",
    ]
    if ins.lazy:
        # fast-destroy: built in the scratch record; `finish` commits it to the table
        # unless the packet destroys it first
        if n in cx.quiet:
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
                *([] if n in cx.quiet else [f"    lazy_{n} = 1;"]),
                f"    has_inst_{n} = 1;",
                f"    dir_{n} = 0;",
                f"    inst_{n}->fi.uid = ++ctx->uid;",
                f"    inst_{n}->fi.layer = {lc.index};",
                f"    inst_{n}->fi.state = {lc.start_state};",
                f"    inst_{n}->fi.key_a = kf_{n};",
                f"    inst_{n}->fi.key_p = {rev if lc.bidir else f'kf_{n}'};",
                *perm_init(lc, "    "),
                *opened,
                "}",
            ]
        )
    lines = [
        f"inst_{n} = (struct {lc.t('inst')} *){create_call(lc)};",
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
        *perm_init(lc, "    "),
        *opened,
        "}",
    ]
    return "\n".join(lines)


@C.register(I.NoInstance)
def no_instance(ins: I.NoInstance, lc: LayerC, cx: CContext) -> str:
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


@C.register(I.Observe)
def observe(ins: I.Observe, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    # No test of the memcap drop-flow mark here: S__seq_loss sets RG_FLOW_MEMCAP_DROPPED
    # together with the flow verdict's RG_FI_DROP (rg_verdict_give), so an instance marked
    # dropped never gets past its lookup's one flag test (RG_FI_VERDICTS: V_<layer>, counted
    # as dropped_by_verdict), and a record created by this packet carries no mark yet.
    packet = (
        f"if (has_inst_{n} && ctx->obs && ctx->obs->on_packet)\n"
        f"    ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len, ctx->pkt_ts);"
    )
    if cx.walk.created == n and cx.walk.created_lazy and n in cx.quiet:
        # lazy_ 2: not shown (yet): the commit shows it if it outlives the packet
        lazy = (
            f"if (lazy_{n} == 1u && ctx->obs && ctx->obs->on_packet)\n"
            f"    ctx->obs->on_packet(ctx->obs->self, &inst_{n}->fi, dir_{n}, (uint32_t)in_{n}.len, ctx->pkt_ts);"
        )
        # shown now or by the commit: the passes after this one do not show it again
        return lazy + (f"\nseen_{n} = inst_{n}->fi.uid;" if looped(cx, lc) else "")
    if looped(cx, lc):
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


@C.register(I.Destroy)
def destroy(ins: I.Destroy, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    lines = []
    if cx.max_repeat.get(lc.name, 0):
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
        if n in cx.quiet:
            # a one-packet instance never shown: its close would only tell the observer
            # (no lifecycle handlers, drain or close rules) and free its sequences; it is in
            # the scratch record, zeroed before its next use, so a sequence that holds no
            # buffer (a datagram passed through) is not reinitialised
            frees = [
                f"    rg_seq_discard(&inst_{n}->seq[{d}]);" for d in range(lc.ndirs) if lc.has_seq
            ]
            frees += [
                f"    rg_framer_free(&inst_{n}->fr[{d}]);"
                for d in range(lc.ndirs)
                if lc.d.frame is not None
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


@C.register(I.Finish)
def finish(ins: I.Finish, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    lines = []
    if ins.commit:
        quiet = n in cx.quiet
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
            f"    void *p_ = {create_call(lc)};",
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
