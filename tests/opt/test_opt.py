"""The middle-end: each pass before/after on real stacks, the pipeline and its options."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.backend.emit import Generated
from rubikgen.expr.ast import Num
from rubikgen.ir import Program, to_text, verify
from rubikgen.ir.nodes import Block, Branch, Cond, Jump
from rubikgen.opt import PASSES, PassError, optimize
from rubikgen.opt.dead_blocks import dead_blocks
from rubikgen.opt.fast_destroy import fast_destroy
from rubikgen.opt.fast_forward import fast_forward
from rubikgen.opt.fold_branches import fold_branches
from rubikgen.opt.header_zeroing import header_zeroing
from rubikgen.opt.jump_threading import jump_threading
from rubikgen.pipeline import Compilation

REPO = REPO_ROOT
STACKS = sorted((REPO / "specs" / "stacks").glob("*.yaml"))
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


def generate(path: str, opt_level: int = 2) -> Generated:
    return Compilation(path, opt_level=opt_level, check_ir=True).generated


def lowered(path: str = TCP_IP) -> Program:
    return Compilation(path).lowered  # checked and lowered, not optimised


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
    assert all(i.zero == "conditional" for b in prog.blocks.values() for i in b.instrs
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
        assert all(i.borrow for i in ops(prog, layer, "insert_seq"))
        exits = [b for b in prog.blocks.values() if b.layer == layer
                 and b.term is not None and type(b.term).__name__ == "Return"]  # fmt: skip
        assert exits and all(any(i.op == "finish" and i.settle for i in b.instrs)
                             for b in exits)  # fmt: skip
    assert "RG_SEQ_BORROW" in generate(TCP_IP).files["tcp_ip_gen.c"]
    assert "RG_SEQ_BORROW" not in generate(TCP_IP, opt_level=1).files["tcp_ip_gen.c"]


def test_fast_destroy_makes_creation_lazy_where_the_psm_destroys() -> None:
    prog = lowered()
    assert fast_destroy(prog) and not fast_destroy(prog)
    for layer in ("ip", "tcp"):
        assert all(i.lazy for i in ops(prog, layer, "create"))
        assert all(i.lazy for i in ops(prog, layer, "destroy"))
        assert any(i.commit for i in ops(prog, layer, "finish"))
    # udp has no PSM: its instances always outlive the packet, nothing to gain
    assert not any(i.lazy for i in ops(prog, "udp", "create"))


def test_options_disable_and_dump_after() -> None:
    prog = lowered()
    res = optimize(prog, 2, disable=["fast-destroy"], dump_after=["fast-forward"])
    assert "fast-destroy" not in {r.name for r in res.records}
    assert "borrow=True" in res.dumps["fast-forward"]
    assert not any(i.lazy for i in ops(prog, "ip", "create"))
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


# ---------------------------------------------------------------------------------------------
# const-prop, tail-dup, dead-stores


def _prepared() -> Program:
    """tcp_ip after the passes that precede the constant group at -O2."""
    prog = lowered()
    for name in ("fold-branches", "jump-threading", "dead-blocks", "header-zeroing",
                 "fast-forward", "fast-destroy"):  # fmt: skip
        PASSES[name].run(prog)
    return prog


def _branch_texts(prog: Program, layer: str) -> list[str]:
    from rubikgen.expr.ast import unparse

    return [unparse(b.term.cond.expr) for b in prog.blocks.values() if b.layer == layer
            and isinstance(b.term, Branch) and b.term.cond.expr is not None]  # fmt: skip


def test_const_prop_folds_branches_implied_by_the_path() -> None:
    from rubikgen.opt.const_prop import const_prop

    prog = _prepared()
    before = [b.term.cond.kind for b in prog.blocks.values()
              if b.layer == "ip" and isinstance(b.term, Branch)]  # fmt: skip
    assert before.count("has_inst") >= 2
    assert const_prop(prog)
    while const_prop(prog):  # a folded branch removes an edge: the join below learns more
        pass
    # every path to "has the packet an instance?" knows it: found, or lazily created
    assert not [b for b in prog.blocks.values() if b.layer == "ip"
                and isinstance(b.term, Branch) and b.term.cond.kind == "has_inst"]  # fmt: skip
    assert verify(prog) == []
    dead_blocks(prog)
    assert verify(prog) == []


def _reach(prog: Program, start: str, layer: str, depth: int) -> set[str]:
    seen, todo = set(), [(start, 0)]
    while todo:
        n, d = todo.pop()
        if n in seen or d > depth:
            continue
        seen.add(n)
        todo += [(s, d + 1) for s in prog.blocks[n].successors()]
    return seen - {start}


def test_tail_dup_specialises_the_created_path() -> None:
    from rubikgen.opt.const_prop import const_prop
    from rubikgen.opt.tail_dup import tail_dup

    prog = _prepared()
    n0 = len(prog.blocks)
    for _ in range(16):
        changed = False
        for p in (const_prop, tail_dup, fold_branches, jump_threading, dead_blocks):
            changed = p(prog) or changed
        if not changed:
            break
    assert verify(prog) == []
    texts = _branch_texts(prog, "ip")
    # the created datagram's path tests the fragment bits alone (the state is known to be DUMP)
    # while the found path still tests the state
    assert "!header.more_frag && header.frag_off == 0" in texts
    assert any(t.startswith("current_state == 0 &&") for t in texts)
    # branch lifting: the event decision after the PSM moved into each transition's path;
    # after `frag` (psm.frag) `psm.dump || psm.last` is false, asm is not reachable from there
    frag = next(b for b in prog.blocks.values() if b.name.startswith("ip.t_frag"))
    assert not any(s.startswith("ip.ev_asm") for s in _reach(prog, frag.name, "ip", 3))
    dump = next(b for b in prog.blocks.values() if b.name.startswith("ip.t_dump"))
    assert prog.blocks[dump.term.target].name.startswith("ip.ev_asm")
    # bounded: each layer grew by at most the budget
    from rubikgen.opt.tail_dup import BUDGET

    assert all(v <= BUDGET for v in prog.dup_spent.values())
    assert len(prog.blocks) < n0 * 2


def test_simplify_short_circuits_and_keeps_truthiness() -> None:
    from rubikgen.expr import parse_expr, resolve_expr
    from rubikgen.expr.ast import unparse
    from rubikgen.opt.facts import _context, simplify
    from rubikgen.sema.builtins import Context
    from rubikgen.sema.scope import ProtocolScope

    comp = Compilation(TCP_IP)
    prog = comp.lowered
    ctx = _context(prog)
    f = {("state", "tcp"): 0, ("ev*", "tcp"): 0, ("psm", "tcp"): 0}
    # the tcp layer's names, as sema binds them (every context open)
    li = comp.stack_info.layers["tcp"]
    params = {p: comp.stack_info.layers[t].protocol for p, t in li.bindings.items()}
    scope = ProtocolScope(li.protocol, params, Context("any", virtual=True), dict(li.bindings))

    def s(text: str) -> str:
        e, _ = resolve_expr(parse_expr(text), scope, allow_virtual=True)
        return unparse(simplify(ctx, f, "tcp", e))

    assert s("current_state == 0 && header.syn") == "!!header.syn"
    assert s("current_state == 1 && header.syn") == "0"
    assert s("event.asm || header.ack == 1") == "header.ack == 1"
    assert s("header.fin || !event.asm") == "1"
    assert s("header.x + 1") == "header.x + 1"


def test_dead_stores_drop_unread_flags_and_variables(tmp_path: Path) -> None:
    from rubikgen.opt.dead_stores import dead_stores

    prog = lowered()
    fires = {i.event for i in ops(prog, "tcp", "fire")}
    assert "tcp_data" in fires and "asm" in fires
    assert dead_stores(prog) and not dead_stores(prog)
    after = {i.event for i in ops(prog, "tcp", "fire")}
    # nothing tests event.tcp_data (a handler); stack edges test event.asm
    assert "tcp_data" not in after and "asm" in after
    # the handler call itself stays
    assert any(i.name == "tcp_data" for i in ops(prog, "tcp", "handler"))
    # a temp nobody reads loses its assignment; one that is read keeps it
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "protocol: toy\n"
        "layouts:\n  h:\n    a: 8\n    b: 8\n"
        "header: [h]\n"
        "temp:\n  unused: {bits: 8}\n  used: {bits: 8}\n"
        "prep:\n  - 'temp.unused = header.a'\n  - 'temp.used = header.b'\n"
        "  - if: 'temp.used == 1'\n    then: ['set_sdu(payload)']\n"
    )
    st = tmp_path / "s.yaml"
    st.write_text("stack: s\nentry: toy\nlayers:\n  toy: {protocol: p.yaml}\n")
    p2 = lowered(str(st))
    targets = lambda: {i.stmt.target.parts[1] for i in ops(p2, "toy", "assign")}  # noqa: E731
    assert targets() == {"unused", "used"}
    assert dead_stores(p2)
    assert targets() == {"used"}


def test_cheap_first_tests_virtual_atoms_last() -> None:
    from rubikgen.opt.cheap_first import cheap_first

    prog = lowered()
    t0 = [t for t in _branch_texts(prog, "tcp") if "__v.0 && __v.1 && perm.afin_acked" in t]
    assert t0  # the spec writes the virtual atoms first
    assert cheap_first(prog) and not cheap_first(prog)
    texts = _branch_texts(prog, "tcp")
    assert "perm.afin_acked && perm.pfin_acked && __v.0 && __v.1" in texts
    assert verify(prog) == []


def test_dead_stores_set_only_the_sequence_flags_something_reads() -> None:
    c2 = generate(TCP_IP, opt_level=2).files["tcp_ip_gen.c"]
    c1 = generate(TCP_IP, opt_level=1).files["tcp_ip_gen.c"]
    # nothing in tcp_ip reads event.rexmit etc.: -O2 stores none of the four flags
    assert "] = (fl_ & RG_SEQ_EV_REXMIT) != 0;" in c1
    assert "] = (fl_ & RG_SEQ_EV_REXMIT) != 0;" not in c2
    prog = lowered()
    optimize(prog, 2)
    assert all(i.events == [] for i in ops(prog, "tcp", "insert_seq"))


def test_bit_fields_are_read_with_one_load() -> None:
    c = generate(TCP_IP, opt_level=0).files["tcp_ip_gen.c"]
    assert "h_ip.frag_off = (uint16_t)((rg_load_be16(p_ + 6)) & 0x1fffu);" in c
    assert "h_ip.version = (uint8_t)((rg_load_u8(p_) >> 4) & 0xfu);" in c
