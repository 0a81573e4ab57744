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
