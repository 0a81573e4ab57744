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

from rubikgen.pipeline import Compilation

REPO = Path(__file__).resolve().parents[1]
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


@cache
def gen_c(path: str = TCP_IP, opt_level: int = 2) -> str:
    return Compilation(path, opt_level=opt_level).generated.files[f"{Path(path).stem}_gen.c"]


def process_body(c: str) -> str:
    """The per-packet function (the lifecycle entries and helpers before it excluded)."""
    start = c.index("_process(")
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
    from rubikgen.build import spans_define

    c = "\n".join(ln.strip() for ln in gen_c().splitlines())  # (directives are indented)
    # the store sits behind the switch; --checksums writes the spans it verifies with
    store_tcp = "ctx->span[8] = (rg_span){(uint8_t *)(uintptr_t)in_tcp.ptr"
    tcp_hook = c[c.index("if (err_tcp == 0) {\n#if tcp_ip_SPANS") :]
    tcp_hook = tcp_hook[: tcp_hook.index("\n}\n}\n")]
    assert tcp_hook.count(store_tcp) == 2
    assert "#if !tcp_ip_SPANS" in tcp_hook and "tcp_ip__csum_check(ctx, 8u);" in tcp_hook
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


def test_a_created_instance_skips_the_drop_flow_test() -> None:
    body = process_body(gen_c())

    def block(label: str) -> str:
        start = re.search(rf"\n{label}_\d+: ", body)
        assert start, label
        end = re.compile(r"\nB_\w+: ").search(body, start.end())
        assert end, label
        return body[start.end() : end.start()]

    created, found = block("B_tcp_create"), block("B_tcp_found")
    assert "RG_FLOW_MEMCAP_DROPPED" not in created
    assert "ctx->obs->on_packet(" in created  # observers still see the packet
    assert "RG_FLOW_MEMCAP_DROPPED" in found  # a later packet of a dropped flow is counted
    assert "RG_FLOW_MEMCAP_DROPPED" not in block("B_ip_create")


def test_a_setter_call_the_scan_misses_fails_to_link(tmp_path: Path) -> None:
    """Without spans a setter could only do nothing: it is not defined, so a call hidden from
    the build's scan of the handler file (here in a file it includes) is a link error."""
    from rubikgen.build import BuildError, build

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
    lean = "any_until (../protocols/tcp.yaml:54): lengths only, no field read"
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


def test_tunnels_outer_tables_look_up_through_the_memo() -> None:
    # gtp: UDP (and the outer IP) carry the tunnel; the inner IP and TCP are innermost
    c2, c0 = process_body(gen_c(GTP)), process_body(gen_c(GTP, 0))
    memo = set(re.findall(r"rg_flow_lookup_memo_n\(ctx->tbl_(\w+), kf_\1, \d+, &dir_\1\)", c2))
    assert memo == {"udp", "udp6", "ip1", "ip1v6"}
    plain = set(re.findall(r"rg_flow_lookup_n\(ctx->tbl_(\w+), kf_\1,", c2))
    assert plain == {"ip2", "ip2v6", "tcp", "tcp6"}
    assert "rg_flow_lookup_memo_n" not in c0  # -O0: the differential tests' reference
    # no tunnel: tcp_ip's tables, and TCP under TLS (one TLS instance per connection)
    assert "rg_flow_lookup_memo_n" not in gen_c()
    tls = str(REPO / "specs" / "stacks" / "tcp_tls.yaml")
    assert "rg_flow_lookup_memo_n" not in gen_c(tls)
    assert "rg_flow_lookup_n(ctx->tbl_tcp," in gen_c(tls)


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
