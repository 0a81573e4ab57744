"""Burst stage 1's prefetches in the generated C (issue 13): both keys' index slots of every
bidirectional table, the hashes kept for pass B only when asked (rg_ctx_cfg.prefetch_records).

That stage 1 changes no output is the differential suite's job (test_burst_sizes: bursts 1, 7
with pass B, 32; the runtime's rg_flow_prefetch_rec/hint are checked in test_flow.c)."""

from __future__ import annotations

import re
from functools import cache

from support import REPO_ROOT

from rubikgen.pipeline import Compilation

REPO = REPO_ROOT


@cache
def stage1(stack: str) -> str:
    """Stage 1 of a stock stack at -O2: from its comment to the end of pass B's function."""
    c = Compilation(str(REPO / "specs" / "stacks" / f"{stack}.yaml"), opt_level=2)
    text = c.generated.files[f"{stack}_gen.c"]
    start = text.index("/* Burst stage 1 (rubikgen/backend/burst_c.py)")
    end = text.index("\n}\n", text.index("__prefetch_recs(void *vctx)")) + 3
    return text[start:end]


#: the keys as words (keywords.py): built in registers, no store-forwarding stall in the hash
HINT = re.compile(r"rg_flow_prefetch_hint_w\(ctx->pf_hs, ctx->tbl_(\w+), kw_\1, (\w+), (\d+)\);")


def test_bidirectional_tables_prefetch_both_keys_slots() -> None:
    s = stage1("tcp_ip")
    hints = {m[1]: (m[2], int(m[3])) for m in HINT.finditer(s)}
    # tcp/udp (both IP versions) are bidirectional: the swapped key's slot too
    assert hints["tcp"] == ("kwr_tcp", 12) and hints["udp"] == ("kwr_udp", 12)
    assert hints["tcp6"] == ("kwr_tcp6", 36) and hints["udp6"] == ("kwr_udp6", 36)
    # IP's fragment tables have one key
    assert hints["ip"] == ("NULL", 11) and hints["ipv6"] == ("NULL", 36)
    # the swapped key is built before its hint, from the header fields stage 1 parsed
    k = s.index("rg_flow_prefetch_hint_w(ctx->pf_hs, ctx->tbl_tcp,")
    assert "kc0_tcp = rg_kw_bytes(h_ip.saddr, 4, 0, 4);" in s[:k]
    assert "kwr_tcp[0] = rg_kw_put(kc2_tcp, 0, 4, 0)" in s[:k]  # daddr first
    assert "(kr_tcp + " not in s and "(kf_tcp + " not in s  # stage 1 stores no byte key
    # no hint for an empty table, and nothing that changes a table
    assert s.count("rg_flow_prefetch_hint_w(") == s.count("if (rg_flow_live(ctx->tbl_")
    for call in ("rg_flow_lookup", "rg_flow_create", "rg_flow_delete", "rg_flow_touch"):
        assert call not in s


def test_pass_b_only_with_prefetch_records() -> None:
    s = stage1("tcp_ip")
    assert "if (ctx->pf_hs) rg_flow_prefetch_hints(ctx->pf_hs);" in s
    c = Compilation(str(REPO / "specs" / "stacks" / "tcp_ip.yaml"), opt_level=2)
    text = c.generated.files["tcp_ip_gen.c"]
    assert "ctx->pf_hs = cfg && cfg->prefetch_records ? &ctx->pf_hints : NULL;" in text
    # the stack descriptor's two entries (the clock offset's follows since the observers'
    # per-packet timestamps)
    assert "    tcp_ip__prefetch,\n    tcp_ip__prefetch_recs,\n    tcp_ip_clock_offset,\n};" in text


def test_tunnels_prefetch_the_inner_tables_both_ways() -> None:
    hints = {m[1]: m[2] for m in HINT.finditer(stage1("gtp"))}
    assert hints.get("tcp") == "kwr_tcp", hints
