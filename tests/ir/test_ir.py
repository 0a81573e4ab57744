"""The CFG IR: invariants after lowering every stock stack, the per-layer pipeline order
(REQUIREMENTS R8.1), declared effects, and the dumps."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.front.workspace import Workspace
from rubikgen.ir import Branch, Call, Program, Return, lower_stack, prune, to_dot, to_text, verify
from rubikgen.ir.nodes import Block, Jump
from rubikgen.sema.resolve import resolve_stack

REPO = REPO_ROOT
STACKS = sorted((REPO / "specs" / "stacks").glob("*.yaml"))


def lower(path: Path) -> Program:
    ws = Workspace()
    doc = ws.check_stack(str(path))
    assert not [d for d in ws.all_diagnostics() if d.severity == "error"]
    res = resolve_stack(doc.model, doc.stack_info, doc.smap)
    prog = lower_stack(doc.model, doc.stack_info, doc.smap, doc.abspath, res)
    prune(prog)
    return prog


@pytest.fixture(scope="module")
def tcp_ip() -> Program:
    return lower(REPO / "specs" / "stacks" / "tcp_ip.yaml")


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.stem)
def test_invariants_hold_on_every_stock_stack(stack: Path) -> None:
    prog = lower(stack)
    assert verify(prog) == []
    # every block is terminated and every branch has two distinct targets
    for b in prog.blocks.values():
        assert b.term is not None
        if isinstance(b.term, Branch):
            assert b.term.then in prog.blocks and b.term.else_ in prog.blocks


def test_verify_reports_broken_ir(tcp_ip: Program) -> None:
    b = next(iter(tcp_ip.blocks.values()))
    saved = b.term
    b.term = Jump("nowhere")
    try:
        assert any("undefined block 'nowhere'" in e for e in verify(tcp_ip))
    finally:
        b.term = saved
    b.term = None
    try:
        assert any("not terminated" in e for e in verify(tcp_ip))
    finally:
        b.term = saved
    assert verify(tcp_ip) == []


def _walk_layer(prog: Program, layer: str) -> list[str]:
    """Opcodes of a layer's blocks in a depth-first order from its entry (calls not followed)."""
    seen: set[str] = set()
    ops: list[str] = []
    todo = [prog.layers[layer].entry]
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        seen.add(n)
        blk: Block = prog.blocks[n]
        ops += [i.op for i in blk.instrs]
        todo += blk.successors()
    return ops


def test_pipeline_order_of_a_layer(tcp_ip: Program) -> None:
    ops = _walk_layer(tcp_ip, "tcp")

    def first(op: str) -> int:
        return ops.index(op)

    order = ["enter", "parse_header", "build_key", "lookup", "insert_seq", "set_state", "fire"]
    idx = [first(o) for o in order]
    assert idx == sorted(idx), list(zip(order, idx, strict=True))
    assert "destroy" in ops and first("destroy") > first("fire")


def test_transitions_are_tried_in_order_first_match_wins(tcp_ip: Program) -> None:
    chain = []
    blk = next(b for b in tcp_ip.blocks.values() if b.layer == "tcp" and ".psm." in b.name)
    while isinstance(blk.term, Branch):
        fire = tcp_ip.blocks[blk.term.then]
        chain.append(fire.instrs[0].name)
        # a fired transition goes straight to the end of the PSM step
        assert isinstance(fire.term, Jump) or isinstance(fire.term, Branch)
        blk = tcp_ip.blocks[blk.term.else_]
    # the order of tcp.yaml's transitions, as written there
    import yaml

    spec = yaml.safe_load((REPO / "specs" / "protocols" / "tcp.yaml").read_text())
    assert chain == [t["name"] for t in spec["psm"]["transitions"]]
    assert chain[:2] == ["rejected", "rst"] and "fin_acked" in chain
    assert blk.instrs[-1].op == "fail"


def test_virtual_atoms_are_latched_right_after_the_insert(tcp_ip: Program) -> None:
    ins = next(
        b for b in tcp_ip.blocks.values() if any(i.op == "insert_seq" for i in b.instrs)
        and b.layer == "ip"
    )  # fmt: skip
    ops = [i.op for i in ins.instrs]
    assert ops == ["insert_seq", "vupdate"]
    assert tcp_ip.layers["ip"].atoms[0][1] == "!v.header.more_frag"
    # tcp: v.temp.afin and v.temp.pfin, each one latch shared by every transition using it
    assert [t for _, t in tcp_ip.layers["tcp"].atoms] == ["v.temp.afin", "v.temp.pfin"]


def test_edges_are_calls_with_return_targets(tcp_ip: Program) -> None:
    calls = [b for b in tcp_ip.blocks.values() if isinstance(b.term, Call)]
    targets = {(b.layer, b.term.child) for b in calls if isinstance(b.term, Call)}
    assert ("ip", "tcp") in targets and ("eth", "vlan") in targets
    # ip is entered from eth, loopback, sll, sll2, ppp and vlan: one return target each
    assert {c[0].split(".")[0] for c in tcp_ip.layers["ip"].callers} == {
        "eth", "loopback", "sll", "sll2", "ppp", "vlan"}  # fmt: skip
    assert len(tcp_ip.layers["ip"].callers) == 6
    assert all(isinstance(b.term, Return) for b in tcp_ip.blocks.values() if b.term
               and isinstance(b.term, Return))  # fmt: skip


def test_self_loop_is_bounded_and_runs_after_destroy() -> None:
    prog = lower(REPO / "specs" / "stacks" / "quic.yaml")
    loops = [b for b in prog.blocks.values() if any(i.op == "reenter" for i in b.instrs)]
    assert loops, "quic_frame's self-loop is lowered"
    decide = [
        i for b in prog.blocks.values() for i in b.instrs if i.op == "loop_decide"
    ]  # fmt: skip
    assert decide and all(i.max_repeat >= 1 for i in decide)


def test_effects_name_foreign_perm_writes() -> None:
    prog = lower(REPO / "specs" / "stacks" / "quic.yaml")
    writes = {
        w for b in prog.blocks.values() for i in b.instrs if i.op == "assign" for w in i.writes
    }
    # quic_header writes quic_udp's perm (a cross-layer write, R8.3)
    assert any(w.startswith("PERM:quic_udp") for w in writes), writes


def test_event_order_respects_before_and_with(tmp_path: Path) -> None:
    # a handler with `with: asm` runs after asm and, with `before: [mark]`, before mark
    proto = tmp_path / "p.yaml"
    proto.write_text(
        (REPO / "specs" / "protocols" / "udp.yaml")
        .read_text()
        .replace("protocol: udp", "protocol: p")
        + "sequence: {meta: header.length}\n"
        "events:\n  asm: {do: ['assemble()']}\n  mark: {when: 'sdu_len > 0'}\n"
    )
    for f in ("ip.yaml", "ipv6.yaml", "eth.yaml"):
        shutil.copy(REPO / "specs" / "protocols" / f, tmp_path / f)
    stack = tmp_path / "s.yaml"
    stack.write_text(
        "stack: s\nentry: eth\n"
        "layers: {eth: {protocol: eth.yaml}, ip: {protocol: ip.yaml}, "
        "p: {protocol: p.yaml, args: {ip: ip}}}\n"
        "edges:\n  - {from: eth, to: ip}\n  - {from: ip, to: p, when: 'event.asm'}\n"
        "handlers:\n  h: {layer: p, with: asm, before: [mark], args: {data: sdu}}\n"
    )
    order = lower(stack).layers["p"].order
    assert order.index("asm") < order.index("h") < order.index("mark")


def test_text_and_dot_dumps(tcp_ip: Program, tmp_path: Path) -> None:
    text = to_text(tcp_ip, "ip")
    assert "insert_seq" in text and "reads" in text and "../protocols/ip.yaml:" in text
    dot = to_dot(tcp_ip, "tcp")
    assert dot.startswith('digraph "tcp_ip"')
    if shutil.which("dot"):
        f = tmp_path / "g.dot"
        f.write_text(to_dot(tcp_ip))
        r = subprocess.run(["dot", "-Tsvg", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_ir_command(tmp_path: Path) -> None:
    from rubikgen.cli import main

    stack = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")
    out = tmp_path / "ir.txt"
    assert main(["ir", stack, "--layer", "ip", "-o", str(out)]) == 0
    text = out.read_text()
    assert "; entry raw_ipv4: ip" in text and "insert_seq" in text and "tcp.enter" not in text
    assert main(["ir", stack, "--dot", "-o", str(tmp_path / "ir.dot")]) == 0
    assert (tmp_path / "ir.dot").read_text().startswith("digraph")
    assert main(["ir", stack, "--layer", "nope"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("stack: bad\nentry: eth\nlayers: {eth: {protocol: missing.yaml}}\n")
    assert main(["ir", str(bad)]) == 1


def test_expressions_in_the_ir_are_sema_s_resolved_trees(tcp_ip: Program) -> None:
    """Every condition and instruction expression is typed and bound (verify checks it); a
    re-parsed copy, which has neither, is reported."""
    from dataclasses import replace

    from rubikgen.expr import parse_expr
    from rubikgen.expr.ast import Name, walk
    from rubikgen.expr.types import BytesT

    conds = [
        b.term.cond.expr
        for b in tcp_ip.blocks.values()
        if isinstance(b.term, Branch) and b.term.cond.expr is not None
    ]
    assert conds and verify(tcp_ip) == []
    names = [n for e in conds for n in walk(e) if isinstance(n, Name)]
    kinds = {n.ref.kind for n in names if n.ref is not None}
    assert {"field", "state", "event", "builtin"} <= kinds

    # the types are sema's: tcp's 16-bit ports, ip's state, a foreign field of the bound layer
    # (as the semantic model holds them: it binds no name on demand)
    from rubikgen.pipeline import Compilation

    model = Compilation(REPO / "specs" / "stacks" / "tcp_ip.yaml").resolved.layers

    def bound(layer: str, parts: tuple[str, ...]) -> Name:
        return next(
            n
            for e in model[layer].exprs.values()
            for n in walk(e)
            if isinstance(n, Name) and n.parts == parts
        )

    tcp = model["tcp"]
    assert bound("tcp", ("header", "sport")).type.width == 16  # type: ignore[union-attr]
    assert tcp.name(("current_state",)).ref.kind == "builtin"  # type: ignore[union-attr]
    saddr = bound("tcp", ("ip", "header", "saddr"))
    assert saddr.ref is not None and saddr.ref.owner == "ip"
    saddr6 = bound("tcp6", ("ip", "header", "saddr"))
    assert saddr6.ref is not None and saddr6.ref.owner == "ipv6"
    # one protocol, two layers: the parameter's field has the bound layer's type
    assert (saddr.type, saddr6.type) == (BytesT(4), BytesT(16))
    b = next(b for b in tcp_ip.blocks.values() if isinstance(b.term, Branch) and b.term.cond.expr)
    assert isinstance(b.term, Branch) and b.term.cond.expr is not None
    bare = parse_expr("header.syn")
    old = b.term.cond
    b.term.cond = replace(old, expr=bare)
    try:
        assert any("is not bound" in p or "no type" in p for p in verify(tcp_ip))
    finally:
        b.term.cond = old


def test_each_opcode_is_a_dataclass_the_verifier_checks(tcp_ip: Program) -> None:
    from rubikgen.ir import instrs as I
    from rubikgen.ir.nodes import OPCODES

    used = {type(i) for b in tcp_ip.blocks.values() for i in b.instrs}
    assert used <= set(OPCODES.values()) and I.InsertSeq in used
    assert {c.op for c in OPCODES.values() if c.command} == {
        "create", "destroy", "insert_seq", "frame", "assemble", "callback", "transform", "handler",
        "observe", "error", "finish", "find_flow", "rule_read", "rule_key", "apply_rules",
    }  # fmt: skip
    blk = next(b for b in tcp_ip.blocks.values() if any(isinstance(i, I.Enter) for i in b.instrs))
    enter = next(i for i in blk.instrs if isinstance(i, I.Enter))
    assert "zero" not in enter.operands()  # defaults are not dumped
    enter.zero = "some"
    bare = I.Instr(layer=blk.layer)  # no opcode
    blk.instrs.append(bare)
    try:
        problems = verify(tcp_ip)
        assert any("bad zero 'some'" in p for p in problems)
        assert any("unknown instruction Instr" in p for p in problems)
    finally:
        enter.zero = "all"
        blk.instrs.remove(bare)
    assert verify(tcp_ip) == []


def test_the_layer_descriptions_hold_resolved_expressions(tcp_ip: Program) -> None:
    """The header program, sequence and key the back-end renders come typed from sema too."""
    from rubikgen.expr import parse_expr
    from rubikgen.ir.layout import If, KeyItem

    tcp = tcp_ip.layers["tcp"].desc
    assert tcp is not None and tcp.seq is not None
    assert [k.text for k in tcp.key_a] == ["ip.header.saddr", "header.sport"]
    assert any(isinstance(s, If) for s in tcp.header)  # options only when hdr_len > 5
    assert tcp.seq.meta.type is not None and tcp_ip.desc is not None
    assert tcp_ip.desc.handlers["tcp_data"].args[0].text == "sdu"
    old = tcp.key_a[1]
    tcp.key_a[1] = KeyItem(old.text, parse_expr(old.text))
    try:
        assert any("layer tcp: description" in p for p in verify(tcp_ip))
    finally:
        tcp.key_a[1] = old


def test_nothing_after_sema_parses_or_checks_expressions() -> None:
    """Lowering, the passes and the back-end use sema's resolved trees (sema/resolve.py)."""
    import re

    after_sema = [REPO / "rubikgen" / d for d in ("ir", "opt", "backend")]
    call = re.compile(r"\b(parse_expr|parse_stmt|check_expr|check_stmt|resolve_expr)\s*\(")
    offenders = [
        f"{p.relative_to(REPO)}:{i}"
        for d in after_sema
        for p in sorted(d.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if call.search(line)
    ]
    assert offenders == []
