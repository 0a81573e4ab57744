"""The middle-end: each pass before/after on real stacks, the pipeline and its options."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubikgen.backend.emit import generate, lower_checked
from rubikgen.expr.ast import Num
from rubikgen.ir import Program, to_text, verify
from rubikgen.ir.nodes import Block, Branch, Cond, Jump
from rubikgen.opt import PASSES, PassError, optimize
from rubikgen.opt.cleanup import dead_blocks, fold_branches, jump_threading
from rubikgen.opt.lifecycle import fast_destroy, fast_forward, header_zeroing

REPO = Path(__file__).resolve().parents[1]
STACKS = sorted((REPO / "specs" / "stacks").glob("*.yaml"))
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


def lowered(path: str = TCP_IP) -> Program:
    return lower_checked(path)[0]


def ops(prog: Program, layer: str, op: str) -> list:
    return [i for b in prog.blocks.values() if b.layer == layer for i in b.instrs if i.op == op]


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.stem)
@pytest.mark.parametrize("level", [0, 1, 2])
def test_pipeline_keeps_the_ir_valid_on_every_stack(stack: Path, level: int) -> None:
    prog = lowered(str(stack))
    optimize(prog, level, check=True)  # raises on an invalid IR after any pass
    assert verify(prog) == []


def test_O0_runs_no_pass() -> None:
    prog = lowered()
    before = to_text(prog)
    res = optimize(prog, 0)
    assert res.records == [] and to_text(prog) == before


def test_fold_branches_takes_the_arm_the_constant_selects() -> None:
    prog = lowered()
    br = [
        b for b in prog.blocks.values() if isinstance(b.term, Branch) and b.term.cond.kind == "expr"
    ]
    b_true, b_false = br[0], br[1]
    assert isinstance(b_true.term, Branch) and isinstance(b_false.term, Branch)
    t_then, f_else = b_true.term.then, b_false.term.else_
    b_true.term.cond = Cond("expr", Num(1), "1")
    b_false.term.cond = Cond("expr", Num(0), "0")
    assert fold_branches(prog)
    # the upstream bug (R9.3) took the other successor when a condition folded
    assert b_true.term == Jump(t_then) and b_false.term == Jump(f_else)
    assert not fold_branches(prog)  # a fixpoint
    assert verify(prog) == []


def test_jump_threading_and_dead_blocks() -> None:
    prog = lowered()
    # an empty block that only jumps on: every reference to it goes to its target
    empties = [b for b in prog.blocks.values() if not b.instrs and isinstance(b.term, Jump)
               and b.name not in {lir.entry for lir in prog.layers.values()}]  # fmt: skip
    assert empties
    victim = empties[0]
    assert jump_threading(prog)
    refs = [b for b in prog.blocks.values() if victim.name in b.successors()]
    assert refs == []
    n = len(prog.blocks)
    assert dead_blocks(prog) and len(prog.blocks) < n
    assert victim.name not in prog.blocks
    assert verify(prog) == []
    prog.blocks["orphan"] = Block("orphan", "ip", term=Jump(next(iter(prog.blocks))))
    assert dead_blocks(prog) and "orphan" not in prog.blocks


def test_header_zeroing_marks_every_enter_and_skips_always_parsed_fields() -> None:
    prog = lowered()
    assert header_zeroing(prog) and not header_zeroing(prog)
    assert all(i.args["zero"] == "conditional" for b in prog.blocks.values() for i in b.instrs
               if i.op == "enter")  # fmt: skip
    c = generate(TCP_IP, opt_level=1).files["tcp_ip_gen.c"]
    c0 = generate(TCP_IP, opt_level=0).files["tcp_ip_gen.c"]
    assert "h_ip = L_ip_hdr_init;" in c0 and "h_ip = L_ip_hdr_init;" not in c
    # ipv6's extension headers are conditional: cleared one by one or as a whole
    assert "h_ipv6" in c


def test_fast_forward_borrows_and_settles_at_every_exit() -> None:
    prog = lowered()
    assert fast_forward(prog) and not fast_forward(prog)
    for layer in ("ip", "tcp", "ipv6", "tcp6"):
        assert all(i.args["borrow"] for i in ops(prog, layer, "insert_seq"))
        exits = [b for b in prog.blocks.values() if b.layer == layer
                 and b.term is not None and type(b.term).__name__ == "Return"]  # fmt: skip
        assert exits and all(any(i.op == "finish" and i.args["settle"] for i in b.instrs)
                             for b in exits)  # fmt: skip
    assert "RG_SEQ_BORROW" in generate(TCP_IP).files["tcp_ip_gen.c"]
    assert "RG_SEQ_BORROW" not in generate(TCP_IP, opt_level=1).files["tcp_ip_gen.c"]


def test_fast_destroy_makes_creation_lazy_where_the_psm_destroys() -> None:
    prog = lowered()
    assert fast_destroy(prog) and not fast_destroy(prog)
    for layer in ("ip", "tcp"):
        assert all(i.args.get("lazy") for i in ops(prog, layer, "create"))
        assert all(i.args.get("lazy") for i in ops(prog, layer, "destroy"))
        assert any(i.args.get("commit") for i in ops(prog, layer, "finish"))
    # udp has no PSM: its instances always outlive the packet, nothing to gain
    assert not any(i.args.get("lazy") for i in ops(prog, "udp", "create"))


def test_options_disable_and_dump_after() -> None:
    prog = lowered()
    res = optimize(prog, 2, disable=["fast-destroy"], dump_after=["fast-forward"])
    assert "fast-destroy" not in {r.name for r in res.records}
    assert "borrow=True" in res.dumps["fast-forward"]
    assert not any(i.args.get("lazy") for i in ops(prog, "ip", "create"))
    with pytest.raises(PassError):
        optimize(lowered(), 2, disable=["no-such-pass"])
    assert set(PASSES) >= {"fold-branches", "fast-forward", "fast-destroy"}


def test_cli_ir_and_build_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rubikgen.cli import main

    assert main(["ir", TCP_IP, "-O2", "--dump-after", "fast-destroy", "--layer", "ip"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("; after pass fast-destroy") and "lazy=True" in out
    assert main(["ir", TCP_IP, "-O2", "--timings", "-o", str(tmp_path / "ir.txt")]) == 0
    assert "pass fast-forward" in capsys.readouterr().err
    assert main(["ir", TCP_IP, "--disable-pass", "bogus"]) == 2
    assert main(["ir", "--list-passes", TCP_IP]) == 0
    assert "fast-destroy" in capsys.readouterr().out
