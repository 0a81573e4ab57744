"""Issue 13 (fewer instructions per packet): the generated C of the changes, before/after.

Each test checks that a change applies where its pattern is and not where it must not; that
the output stays the same is the differential suite's job (-O0 against -O2 on real captures)."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.pipeline import Compilation

REPO = REPO_ROOT
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


@cache
def gen_c(path: str = TCP_IP, opt_level: int = 2) -> str:
    return Compilation(path, opt_level=opt_level).generated.files[f"{Path(path).stem}_gen.c"]


@cache
def layer_ix(name: str, path: str = TCP_IP) -> int:
    """The layer's index in the generated C (spans, stats, observer masks): the stack's order."""
    return list(Compilation(path).program.layers).index(name)


@cache
def any_until_at() -> str:
    """`any_until (../protocols/tcp.yaml:N)`: the spec position tcp's option walks point to."""
    at = set(re.findall(r"any_until \(\.\./protocols/tcp\.yaml:\d+\)", gen_c(TCP_IP, 0)))
    assert len(at) == 1, at  # one loop in tcp.yaml
    return at.pop()


def process_start(c: str) -> int:
    """Where the per-packet function begins (its name is wrapped in RG_TRACE_FN: rg_trace.h)."""
    return c.index("_process)(")


def process_body(c: str) -> str:
    """The per-packet function (the lifecycle entries and helpers before it excluded)."""
    start = process_start(c)
    end = c.find("/* Burst stage 1", start)  # its own function, after it
    return c[start:] if end < 0 else c[start:end]


def test_virtual_atoms_test_their_latches_inline_before_the_call() -> None:
    body = process_body(gen_c())
    calls = re.findall(r"[^\n]{0,80}L_tcp_vtest\(inst_tcp, (\d)\)", body)
    assert calls, "tcp's FIN conditions use virtual atoms"
    for k in calls:
        assert f"((inst_tcp->vl[{k}][0] | inst_tcp->vl[{k}][1]) && L_tcp_vtest(inst_tcp, {k}))" in (
            body
        )
    # every call in the packet path is behind its latches
    assert len(re.findall(r"L_tcp_vtest\(inst_tcp", body)) == len(
        re.findall(r"\| inst_tcp->vl\[\d\]\[1\]\) && L_tcp_vtest\(inst_tcp", body)
    )
    # ip's one-direction atom (v.header.more_frag) likewise
    assert "((inst_ip->vl[0][0]) && L_ip_vtest(inst_ip, 0))" in body


GTP = str(REPO / "specs" / "stacks" / "gtp.yaml")


def test_resets_nobody_reads_are_dropped_from_enter() -> None:
    c2, c0 = process_body(gen_c(GTP)), process_body(gen_c(GTP, 0))
    # layers without a sequence: nothing fills or reads their results
    for layer in ("eth", "udp", "gtp"):
        assert f"rg_zero(&sres_{layer}, sizeof sres_{layer});" in c0
        assert f"rg_zero(&sres_{layer}," not in c2
    # the reassembling layers read theirs (the insert accumulates into it)
    for layer in ("ip1", "ip2", "tcp"):
        assert f"rg_zero(&sres_{layer}, sizeof sres_{layer});" in c2
    # tcp's event flags are only stored (const-prop decided every test on them)
    assert "memset(ev_tcp, 0, sizeof ev_tcp);" in c0
    assert "memset(ev_tcp," not in c2
    # loopback's temp is read (family): its clear stays
    assert "t_loopback = L_loopback_tmp_init;" in c2


def test_reset_pruning_tells_reads_from_stores() -> None:
    from rubikgen.backend.prune import Resets

    r = Resets()
    reset = r.add("ev_x", "memset(ev_x, 0, sizeof ev_x);")
    stores = f"{reset}\nev_x[1] = 1;\nif (a) ev_x[2] = 1;\n{{ ev_x[0] = 1; }}"
    assert r.unread(stores, "ev_x")
    assert r.prune(stores).count("memset") == 0
    for read in ("if (ev_x[1]) f();", "ev_x[1] |= 1;", "g(&ev_x);", "y = ev_x[0] == 1;"):
        body = f"{stores}\n{read}"
        assert not r.unread(body, "ev_x"), read
        assert r.prune(body) == body
    # another variable whose name ends the same is no mention
    assert r.unread(f"{reset}\nif (prev_x[1]) f();\nif (s.ev_x) f();", "ev_x")


def test_records_are_zeroed_in_vector_sized_pieces() -> None:
    c = gen_c()
    # the lazily created IPv4 datagram (fast-destroy) and a layer's scratch record
    assert "rg_zero(inst_ip, sizeof *inst_ip);" in c
    assert "rg_zero(&sres_tcp, sizeof sres_tcp);" in c
    assert not re.search(r"memset\((inst_|&sres_)", c)


def test_spans_are_recorded_only_when_setters_may_read_them(tmp_path: Path) -> None:
    from rubikgen.toolchain.build import spans_define

    c = "\n".join(ln.strip() for ln in gen_c().splitlines())  # (directives are indented)
    # the store sits behind the switch; --checksums writes the spans it verifies with
    t = layer_ix("tcp")
    store_tcp = f"ctx->span[{t}] = (rg_span){{(uint8_t *)(uintptr_t)in_tcp.ptr"
    tcp_hook = c[c.index("if (err_tcp == 0) {\n#if tcp_ip_SPANS") :]
    tcp_hook = tcp_hook[: tcp_hook.index("\n}\n}\n")]
    assert tcp_hook.count(store_tcp) == 2
    assert "#if !tcp_ip_SPANS" in tcp_hook and f"tcp_ip__csum_check(ctx, {t}u);" in tcp_hook
    # eth has no checksum and lends no pseudo-header: no span without setters
    eth_hook = c[c.index("if (err_eth == 0) {\n#if tcp_ip_SPANS") :]
    assert "checksums" not in eth_hook[: eth_hook.index("#endif") + 30]
    # ipv6 has no checksum but lends tcp6's pseudo-header: --checksums records it
    v6 = c[c.index("if (err_ipv6 == 0) {\n#if tcp_ip_SPANS") :]
    assert "if (RG_UNLIKELY(ctx->checksums)) {\n#if !tcp_ip_SPANS" in v6[:600]
    assert "#ifndef tcp_ip_SPANS\n#define tcp_ip_SPANS 1" in c  # on unless the build says

    # the build: off for a handler file that names no setter, on for one that does
    stub = tmp_path / "h.c"
    stub.write_text("void tcp_data(void *a, void *h) { (void)a; (void)h; }\n")
    assert spans_define("tcp_ip", stub) == ["-Dtcp_ip_SPANS=0"]
    for call in ("tcp_ip_set_ip_ttl(h->ctx, 1);", "tcp_ip_tcp_strip_option(h->ctx, 2);"):
        stub.write_text(f"void f(rg_hctx *h) {{ {call} }}\n")
        assert spans_define("tcp_ip", stub) == []
    # another stack's setters are no reason
    stub.write_text("void f(rg_hctx *h) { gtp_set_ip1_ttl(h->ctx, 1); }\n")
    assert spans_define("tcp_ip", stub) == ["-Dtcp_ip_SPANS=0"]


def test_rules_that_rewrite_keep_the_spans(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        'rules:\n  - {name: a, match: "tcp.dport == 1", action: {rewrite: {ip.ttl: 9}}}\n'
    )
    c = Compilation(TCP_IP, rules=rules).generated.files["tcp_ip_gen.c"]
    assert "#undef tcp_ip_SPANS\n#define tcp_ip_SPANS 1" in c
    rules.write_text('rules:\n  - {name: a, match: "tcp.dport == 1", action: drop}\n')
    c = Compilation(TCP_IP, rules=rules).generated.files["tcp_ip_gen.c"]
    assert "#ifndef tcp_ip_SPANS\n#define tcp_ip_SPANS 1" in c


def test_one_flag_test_per_packet_with_an_instance() -> None:
    """The flow-verdict bits are the one mark tested per packet: a memcap drop-flow sets
    RG_FI_DROP with its own mark (S__seq_loss gives RG_DROP_FLOW), so no block tests the
    memcap mark; every lookup tests the verdict bits once."""
    c = gen_c()
    body = process_body(c)
    assert "RG_FLOW_MEMCAP_DROPPED" not in body and "fi.memcap" not in body
    for layer in ("ip", "ipv6", "tcp", "udp", "tcp6", "udp6"):
        test = (
            f"if (RG_UNLIKELY(has_inst_{layer} && (inst_{layer}->fi.flags & RG_FI_VERDICTS) != 0))"
        )
        assert body.count(test) == 1, layer
        # TCP's closed connections linger with a reopen: a new connection on the key of a
        # marked one is tested for (issue 27) before its packet takes the verdict
        then = " {\n" if layer in ("tcp", "tcp6") else f" goto V_{layer};"
        assert body.count(test + then) == 1, layer
        assert f" goto V_{layer};" in body, layer
    loss = c[c.index("__seq_loss(struct") :]
    loss = loss[: loss.index("\n}\n")]
    assert "f->memcap = pol == RG_MEMCAP_DROP_FLOW ? RG_FLOW_MEMCAP_DROPPED" in loss
    assert (
        "if (pol == RG_MEMCAP_DROP_FLOW) rg_verdict_give(&ctx->verdict, f, RG_DROP_FLOW);" in loss
    )
    # and rg_verdict_give marks the flow: the bit the lookup tests
    api = (REPO / "runtime-c" / "include" / "rg" / "rg_api.h").read_text()
    assert "->flags |= v == RG_DROP_FLOW ? RG_FI_DROP : RG_FI_BYPASS;" in api


def test_a_setter_call_the_scan_misses_fails_to_link(tmp_path: Path) -> None:
    """Without spans a setter could only do nothing: it is not defined, so a call hidden from
    the build's scan of the handler file (here in a file it includes) is a link error."""
    from rubikgen.toolchain.build import BuildError, build

    stub = Compilation(TCP_IP).generated.handlers_stub
    (tmp_path / "more.c").write_text(
        "static void ttl(rg_hctx *h) { tcp_ip_set_ip_ttl(h->ctx, 1); }\n"
    )
    hfile = tmp_path / "h.c"
    hfile.write_text(
        stub.replace(
            '#include "tcp_ip_gen.h"\n', f'#include "tcp_ip_gen.h"\n#include "{tmp_path}/more.c"\n'
        ).replace("    (void)h;\n}", "    ttl(h);\n}", 1)
    )
    try:
        build(TCP_IP, tmp_path / "out", handlers=hfile, quiet=True)
    except BuildError as e:
        assert "tcp_ip_set_ip_ttl" in str(e)
    else:
        raise AssertionError("linked a setter without spans")


def test_tcp_options_are_walked_by_lengths_when_no_field_is_read(tmp_path: Path) -> None:
    from rubikgen.backend.lean_walk import shape

    c2, c0 = gen_c(), gen_c(TCP_IP, 0)
    lean = f"{any_until_at()}: lengths only, no field read"
    # -O2: tcp and tcp6, in the packet function and in burst stage 1; -O0 keeps the switch
    assert c2.count(lean) == 4 and "case 34u:" not in c2
    assert lean not in c0 and "case 34u:" in c0
    table = re.search(r"static const uint8_t lens1_\[256\] = \{([^}]*)\}", c2)
    assert table
    lens = [int(x) for x in table.group(1).replace(",", " ").split()]
    # EOL, NOP, MSS, WS, SACK-permitted, SACK (length byte), timestamps, TFO (length byte)
    assert lens[:9] == [1, 1, 4, 3, 2, 0, 0, 0, 10] and lens[34] == 0 and len(lens) == 256
    assert "h_tcp.ts_val" not in process_body(c2)
    # the until bound (cursor >= hdr_len * 4) computed once: the lean loop changes nothing in it
    assert "const uint64_t end1_ = (((uint64_t)h_tcp.hdr_len) * UINT64_C(4));" in c2
    assert "if ((uint64_t)cur_tcp >= end1_) break;" in c2

    # a rule reading an option field keeps the whole walk for that layer
    rules = tmp_path / "r.yaml"
    rules.write_text('rules:\n  - {name: a, match: "tcp.mss == 1460", action: drop}\n')
    c = Compilation(TCP_IP, rules=rules).generated.files["tcp_ip_gen.c"]
    body = process_body(c)
    assert "h_tcp.mss = " in body and "case 34u:" in body
    assert lean in body  # tcp6 reads none

    # layouts the lean walk cannot consume exactly: a constant besides the tag, a length of
    # another form
    d = Compilation(TCP_IP).program.layers["tcp"].desc
    assert shape(d.layouts["opt_ts"]) is not None and shape(d.layouts["tcp_hdr"]) is not None
    ts = d.layouts["opt_ts"]
    from dataclasses import replace

    assert shape([ts[0], replace(ts[1], const=10), *ts[2:]]) is None
    assert shape(d.layouts["opt_rest"]) is None  # header.hdr_len * 4 - cursor


def test_one_packet_instances_skip_the_observers_when_their_mask_says() -> None:
    """rg_obs.quiet_transient: ip's lazily created datagram is shown only if the observer's
    bit for ip is clear (lazy_ip 1) or it outlives the packet (the commit shows it); an
    in-packet destroy of an unshown one frees its sequence and counts it, without L_ip_close."""
    c = gen_c()
    body = process_body(c)
    assert (
        "uint64_t quiet;" in c and "ctx->quiet = cfg && cfg->obs ? cfg->obs->quiet_transient" in c
    )
    create = body[body.index("{ /* created lazily (fast-destroy) */\n            inst_ip") :]
    create = create[: create.index("goto ")]
    ip = layer_ix("ip")
    assert f"if (ctx->quiet >> {ip} & 1u) {{\n                lazy_ip = 2;" in create
    assert "if (lazy_ip == 1u && ctx->obs && ctx->obs->on_packet)" in create
    destroy = body[body.index("if (lazy_ip == 2u) { /* one packet, not shown") :]
    quiet = destroy[: destroy.index("} else {")]
    assert "L_ip_close" not in quiet and "on_close" not in quiet
    assert "rg_seq_discard(&inst_ip->seq[0]);" in quiet
    assert f"ctx->stats->layer[{ip}].transient++;" in quiet
    assert "L_ip_close(ctx, inst_ip, RG_CLOSE_ACCEPT);" in destroy[len(quiet) :][:200]
    # every commit of ip shows an instance not shown yet, after it is in the table
    commits = body.count("if (lazy_ip) { /* the instance outlives the packet: into the table */")
    assert commits >= 2
    assert body.count("const unsigned show_ = lazy_ip == 2u;") == commits
    # (observers get the packet's own timestamp, not the clock)
    shows = "ctx->obs->on_packet(ctx->obs->self, &inst_ip->fi, 0, qlen_ip, ctx->pkt_ts);"
    assert body.count(shows) == 2 * commits  # in the table, or before an eviction's close
    # tcp is fast-destroy too, but its close drains its sequences: always shown
    assert "lazy_tcp == 2u" not in body and f"ctx->quiet >> {layer_ix('tcp')}" not in body
    assert "lazy_tcp = 1;" in body
    # burst stage 1 creates nothing
    stage1 = c[c.find("/* Burst stage 1") :]
    assert "lazy_ip = " not in stage1 and "ctx->quiet" not in stage1
    assert "transient" not in stage1 and "on_open" not in stage1


def test_stacks_without_fast_destroy_have_no_quiet_path() -> None:
    for c in (
        gen_c(TCP_IP, 0),
        Compilation(TCP_IP, disable=["fast-destroy"]).generated.files["tcp_ip_gen.c"],
    ):
        assert "created lazily" not in c
        assert "quiet" not in c and "qlen_" not in c and "transient" not in c


def test_option_loops_count_no_iterations_where_the_until_bound_ends_them() -> None:
    from rubikgen.backend.lean_walk import ends_first
    from rubikgen.expr.parser import parse_expr

    # tcp: 20 header bytes, then options until cursor >= hdr_len * 4 (at most 60), max 40,
    # every option at least 1 byte: 40 iterations reach 60, the count never ends the loop
    note = "/* no count: 40 iterations pass any value of the until bound */"
    for c in (gen_c(), gen_c(TCP_IP, 0)):  # the lean walk (-O2) and the full walk (-O0)
        starts = [m.end() for m in re.finditer(re.escape(any_until_at()), c)]
        assert len(starts) == 4  # tcp and tcp6, in the packet function and in burst stage 1
        for i in starts:
            loop = c[
                i : c.index(" >= end1_) break;" if c is gen_c() else "UINT64_C(4)))) break;", i)
            ]
            assert note in loop and "it1_" not in loop and "40u" not in loop
    # ipv6's extension headers end on a next-header value, not a cursor bound: counted
    assert "if (stop1_ || ++it1_ >= 8u) break;" in gen_c(TCP_IP, 0)

    d = Compilation(TCP_IP).program.layers["tcp"].desc
    fields = d.fields

    def ends(until: str, lo: int = 20, step: int = 1, n: int = 40) -> bool:
        return ends_first(parse_expr(until), fields, lo, step, n)

    assert ends("cursor >= header.hdr_len * 4")
    assert not ends("cursor >= header.hdr_len * 4", n=39)  # 20 + 39 < 60
    assert not ends("cursor >= header.hdr_len * 4", lo=19)
    assert ends("cursor >= header.hdr_len * 4", lo=0, step=3)
    assert not ends("cursor > header.hdr_len * 4") and ends("cursor > header.hdr_len * 4", n=41)
    assert ends("cursor >= 60 || header.syn == 1") and not ends("cursor >= 61 && cursor > 2")
    assert not ends("cursor >= header.seq")  # 32 bits: no small bound
    assert not ends("cursor >= header.hdr_len * 4 - 1")  # a subtraction may wrap: not bounded
    assert not ends("cursor >= header.hdr_len * 4", step=0)
    assert not ends("header.hdr_len * 4 <= cursor")  # only the form the walks are written in


def test_lookups_set_the_table_time_only_when_it_has_instances() -> None:
    """An instance table's time is set inside the lookup, after its empty-table test (the IPv4
    fragment table is empty on nearly every packet), and by the create."""
    for path in (TCP_IP, GTP):
        c = gen_c(path)
        body = process_body(c)
        assert "rg_flow_lookup_n(ctx->tbl_" not in c
        # only a tunnel's outer tables (the last-hit memo's lookup) set the time before it
        timed = set(re.findall(r"rg_flow_set_time\(ctx->tbl_(\w+),", c))
        memo = set(re.findall(r"rg_flow_lookup_memo_n\(ctx->tbl_(\w+),", c))
        assert timed == memo, (timed, memo)
        # the others take the key as words (keywords.py)
        lookups = re.findall(r"rg_flow_lookup_wt\(ctx->tbl_(\w+), kw_\1, \d+, &dir_\1, ctx->clock\.now\)", body)  # fmt: skip
        creates = re.findall(r"rg_flow_create_nt\(ctx->tbl_(\w+), kf_\1, [\w]+, \d+, ctx->clock\.now\)", c)  # fmt: skip
        assert lookups and set(creates) <= set(lookups) | memo, (lookups, creates)
        assert "ip" in lookups or "ip2" in lookups
    flow_h = (REPO / "runtime-c" / "include" / "rg" / "rg_flow.h").read_text()
    for fn in ("rg_flow_lookup_nt", "rg_flow_lookup_wt"):
        nt = flow_h[flow_h.index(f"RG_INLINE void *{fn}(") :]
        nt = nt[: nt.index("\n}\n")]
        assert nt.index("if (t->nlive == 0) return NULL;") < nt.index(
            "rg_flow_set_time(t, now_ns);"
        )


def test_tunnels_outer_tables_look_up_through_the_memo() -> None:
    # gtp: UDP (and the outer IP) carry the tunnel; the inner IP, TCP and UDP are innermost
    # (the inner IP lies between the outer and the inner UDP, but is itself an inner copy)
    c2, c0 = process_body(gen_c(GTP)), process_body(gen_c(GTP, 0))
    memo = set(re.findall(r"rg_flow_lookup_memo_n\(ctx->tbl_(\w+), kf_\1, \d+, &dir_\1\)", c2))
    assert memo == {"udp", "udp6", "ip1", "ip1v6"}
    plain = set(re.findall(r"rg_flow_lookup_wt\(ctx->tbl_(\w+), kw_\1,", c2))
    assert plain == {"ip2", "ip2v6", "tcp", "tcp6", "inner_udp", "inner_udp6"}
    assert "rg_flow_lookup_memo_n" not in c0  # -O0: the differential tests' reference
    # no tunnel: tcp_ip's tables (an ICMP error's quoted IP header only finds a TCP/UDP flow),
    # and TCP under TLS (one TLS instance per connection)
    assert "rg_flow_lookup_memo_n" not in gen_c()
    tls = str(REPO / "specs" / "stacks" / "tcp_tls.yaml")
    assert "rg_flow_lookup_memo_n" not in gen_c(tls)
    assert "rg_flow_lookup_wt(ctx->tbl_tcp," in gen_c(tls)


def test_record_zeroing_is_stores_even_in_cold_code(tmp_path: Path) -> None:
    """rg_zero and rg_copy: gcc expanded its 64-byte memsets into `rep stos` in blocks it takes to be cold
    (the inner layers of a tunnel stack: gtp's inner IP and TCP records and results), an
    instruction per iteration and slow to start; the vector stores stay stores."""
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("the expansion checked is gcc's")
    src = tmp_path / "z.c"
    src.write_text(
        '#include "rg/rg_pkt.h"\n'
        "struct res { unsigned char b[72]; };\n"
        "struct rec { unsigned char b[160]; };\n"
        "__attribute__((cold)) void a(struct res *r) { rg_zero(r, sizeof *r); }\n"
        "__attribute__((cold)) void b(struct rec *r) { rg_zero(r, sizeof *r); }\n"
        "void c(struct rec *r) { rg_zero(r, sizeof *r); }\n"
        # the commit of a lazily created TCP record (256 bytes and more): was `rep movs`
        "struct tcp { unsigned char b[264]; };\n"
        "__attribute__((cold)) void d(struct tcp *x, const struct tcp *y) "
        "{ rg_copy(x, y, sizeof *x); }\n"
    )
    inc = str(REPO / "runtime-c" / "include")
    asm = subprocess.run(
        [cc, "-O2", "-std=c11", "-S", "-o", "-", "-I", inc, str(src)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "rep stos" not in asm and "rep movs" not in asm
    assert "call\tmemset" not in asm and "call\tmemcpy" not in asm
    # and the generated code commits lazily created records with it
    assert "rg_copy(p_, inst_tcp, sizeof *inst_tcp);" in gen_c()


def test_a_layer_with_one_caller_returns_without_dispatch() -> None:
    c2, c0 = process_body(gen_c(GTP)), process_body(gen_c(GTP, 0))
    # udp is entered from ip1 only: its return is ip1's block after the call
    assert "switch (ret_udp)" in c0
    assert "switch (ret_udp)" not in c2
    assert re.search(r"goto B_ip1_\w+; /\* the one caller \*/", c2)
    # gtp (from udp and udp6) dispatches; an entry layer too (ret 0 ends the packet)
    assert "switch (ret_gtp)" in c2
    assert "switch (ret_ip1)" in c2


def test_inserts_into_a_created_instance_use_the_fresh_form() -> None:
    """fresh-seq: the insert on the path of ip's lazily created datagram (the scratch record,
    zeroed, its sequence untouched) tries rg_seq_insert_fresh and keeps the general insert and
    all its statistics behind it; the insert reached from the table (found) does not."""
    from rubikgen.ir.instrs import Create, Enter, InsertSeq

    prog = Compilation(TCP_IP).program
    fresh = {b.name for b in prog.blocks.values() for i in b.instrs
             if isinstance(i, InsertSeq) and i.fresh}  # fmt: skip
    plain = {b.name for b in prog.blocks.values() for i in b.instrs
             if isinstance(i, InsertSeq) and not i.fresh}  # fmt: skip
    assert any(n.startswith("ip.insert") for n in fresh)
    assert any(n.startswith("ip.insert") for n in plain)  # the found path's
    # every fresh insert is reached only through its layer's lazy create
    preds: dict[str, list[str]] = {}
    for b in prog.blocks.values():
        for s in b.successors():
            preds.setdefault(s, []).append(b.name)
    for n in fresh:
        seen, todo = set(), [n]
        while todo:
            p = todo.pop()
            for q in preds.get(p, []):
                qb = prog.blocks[q]
                if any(isinstance(i, Create) and i.lazy for i in qb.instrs) or q in seen:
                    continue
                assert not any(isinstance(i, Enter) for i in qb.instrs), f"{n}: enter, no create"
                seen.add(q)
                todo.append(q)
    body = process_body(gen_c())
    k = body.index("if (RG_LIKELY(rg_seq_insert_fresh(&inst_ip->seq[0], &L_ip_seqcfg,")
    fast = body[k : body.index("} else {", k)]
    assert "seq.inserts++;" in fast and "seq.bytes_new += len_;" in fast
    assert "rg_seq_insert(" not in fast and "sres_ip.dup_bytes" not in fast
    slow = body[body.index("} else {", k) :][:1500]
    assert "fl_ = rg_seq_insert(&inst_ip->seq[0]" in slow
    assert "tcp_ip__seq_loss" in slow and "ss_->bytes_new += sres_ip.new_bytes;" in slow
    # once per lazily created IPv4 datagram: ip's, and the one an ICMP error quotes
    fresh_c = re.findall(r"rg_seq_insert_fresh\(&inst_(\w+)->seq", body)
    assert sorted(fresh_c) == ["icmp_ip", "ip"], fresh_c
    # gtp: the outer and the inner IPv4 datagram
    assert process_body(gen_c(GTP)).count("rg_seq_insert_fresh(") == 2
    # not without the lazy create, nor at -O0
    assert "rg_seq_insert_fresh(" not in gen_c(TCP_IP, 0)
    c = Compilation(TCP_IP, disable=["fast-destroy"]).generated.files["tcp_ip_gen.c"]
    assert "rg_seq_insert_fresh(" not in c


def test_transition_bits_are_kept_only_for_the_setup_mask() -> None:
    """tmask is read only by the close's `complete` test (tmask & setup == setup): a transition
    outside the layer's setup sets no bit (ip has no setup: none; tcp's handshake bits stay)."""
    for path in (TCP_IP, GTP):
        c = gen_c(path)
        setups = {}
        for m in re.finditer(r"static void L_(\w+)_close\(", c):
            body = c[m.end() : c.index("\n}\n", m.end())]
            k = re.search(r"const uint64_t setup = UINT64_C\((\d+)\);", body)
            setups[m.group(1)] = k.group(1) if k else "0"
        assert setups.get("tcp") not in (None, "0")
        kept = re.findall(r"inst_(\w+)->tmask \|= UINT64_C\(1\) << (\d+);", c)
        assert kept and "inst_ip->tmask" not in c and "inst_ip1->tmask" not in c
        for layer, bit in kept:
            assert int(setups[layer]) >> int(bit) & 1, (layer, bit)
        # every transition still records which one fired this packet
        assert c.count("psm_tcp = ") > len([k for k in kept if k[0] == "tcp"])


def _cursor_writes_are_checked(body: str) -> int:
    """Every write of a layer's cursor in body: `= 0` (enter), or an advance by k right after
    the check that k bytes remain, or the fast option loop's advance whose check follows it
    (and its undo). Returns how many advances were checked."""
    lines = body.split("\n")
    n = 0
    last: dict[str, int] = {}  # the line of each cursor's previous write
    for i, line in enumerate(lines):
        m = re.search(r"\bcur_(\w+) (\+=|-=|=) ([^;]+);", line)
        if m is None or "cur_" not in line.split("=")[0]:
            continue
        x, op, v = m.groups()
        # the lines since this cursor's previous write (a layout's loads sit in between)
        prev = "\n".join(lines[max(last.get(x, 0), i - 40) : i])
        last[x] = i
        checks = (f"rg_has(in_{x}.len, cur_{x}, {v})", f"in_{x}.len - cur_{x} >= {v}")
        if op == "=":  # the start or the end of the input: both in bounds
            assert v in ("0", f"(uint32_t)in_{x}.len"), line
            continue
        n += 1
        if v == "(uint32_t)n_":
            assert f"if (n_ > in_{x}.len - cur_{x})" in prev, line
        elif op == "-=":
            assert lines[i - 1].strip() == f"if (cur_{x} > in_{x}.len) {{", line
        elif not any(c in prev for c in checks):
            nxt = "\n".join(lines[i + 1 : i + 5])
            assert v == "f_" and f"if (cur_{x} > in_{x}.len) {{" in nxt, line
    return n


def test_every_cursor_advance_follows_a_check() -> None:
    """The one-compare tests of the header code (`n_ > len - cur` for a variable field, the
    fast option loop's `len - cur >= n`) are exact only while a cursor never exceeds its
    input's length: the header code starts it at 0 and moves it only past bytes just
    checked. Every stock stack's per-packet function and burst stage, at -O0 and -O2, holds
    to that."""
    for stack in sorted((REPO / "specs" / "stacks").glob("*.yaml")):
        for lv in (0, 2):
            c = gen_c(str(stack), lv)
            assert _cursor_writes_are_checked(c[process_start(c) :]) > 0, stack.name
    bad = "if (!rg_has(in_ip.len, cur_ip, 20)) goto x;\ncur_ip += 20;\ncur_ip += 4;"
    with pytest.raises(AssertionError):
        _cursor_writes_are_checked(bad)
