"""Issue 13 (fewer instructions per packet): the generated C of the changes, before/after.

Each test checks that a change applies where its pattern is and not where it must not; that
the output stays the same is the differential suite's job (-O0 against -O2 on real captures)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from rubikgen.pipeline import Compilation

REPO = Path(__file__).resolve().parents[1]
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


@cache
def gen_c(path: str = TCP_IP, opt_level: int = 2) -> str:
    return Compilation(path, opt_level=opt_level).generated.files[f"{Path(path).stem}_gen.c"]


def process_body(c: str) -> str:
    """The per-packet function (the lifecycle entries and helpers before it excluded)."""
    start = c.index("_process(")
    return c[start:]


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
