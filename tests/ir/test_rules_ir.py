"""A rules file lowered into the stack's IR Program (ir/lower_rules.py, ir/rules.py): the
rule opcodes sit after every header program and key build they feed, one ApplyRules at the
exit, the verifier checks them, the printer shows them, and the back-ends render them from
their registries. What the rules do to packets is the e2e tests' (tests/e2e/test_rules*.py
against tshark, tests/e2e/test_xdp.py for BPF verdicts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.backend.ebpf.registry import EBPF
from rubikgen.ir import instrs as I
from rubikgen.ir import lower_rules, to_text, verify
from rubikgen.ir.nodes import Program
from rubikgen.ir.rules import FieldRef, RulesDesc
from rubikgen.pipeline import Compilation

TCP_IP = REPO_ROOT / "specs" / "stacks" / "tcp_ip.yaml"
RULES = """
rules:
  - {name: telnet, match: "tcp.dport == 23", action: drop}
  - {name: web, stateful: true, match: "tcp.dport == 80", action: {rewrite: {tcp.dport: 8080}}}
  - {name: dns, match: "udp && udp.sport == 53", action: count}
"""


def _compile(tmp: Path, text: str, level: int, reload: bool = False) -> Compilation:
    p = tmp / "r.rules.yaml"
    p.write_text(text)
    return Compilation(TCP_IP, opt_level=level, rules=p, rules_reload=reload)


def _ops(prog: Program, kind: type) -> list[tuple[str, I.Instr]]:
    return [(b.name, i) for b in prog.blocks.values() for i in b.instrs if isinstance(i, kind)]


@pytest.mark.parametrize("level", [0, 2])
def test_rule_opcodes_follow_what_they_feed(tmp_path: Path, level: int) -> None:
    prog = _compile(tmp_path, RULES, level).program
    assert prog.rules is not None and prog.rules.rules is not None
    assert verify(prog) == []
    # a RuleRead right after every header program of a layer the rules name, none elsewhere
    named = {"tcp", "udp"}
    for b in prog.blocks.values():
        for k, ins in enumerate(b.instrs):
            nxt = b.instrs[k + 1] if k + 1 < len(b.instrs) else None
            if isinstance(ins, I.ParseHeader):
                assert isinstance(nxt, I.RuleRead) == (ins.layer in named), (b.name, ins.layer)
            if isinstance(ins, I.RuleRead):
                assert isinstance(b.instrs[k - 1], I.ParseHeader)
            # the stateful rule acts on instances: every key build is recorded
            if isinstance(ins, I.BuildKey):
                assert isinstance(nxt, I.RuleKey) and nxt.layer == ins.layer
    reads = {i.layer: i for _b, i in _ops(prog, I.RuleRead)}
    assert isinstance(reads["tcp"], I.RuleRead)
    assert [f.dotted for f in reads["tcp"].fields] == ["tcp.dport"]
    assert reads["udp"].fields == (FieldRef("udp", "sport", "num", 16),)
    assert "HEADER:tcp" in reads["tcp"].reads and reads["tcp"].is_command
    assert [type(i) for i in prog.exit] == [I.ApplyRules]
    text = to_text(prog)
    assert "rule_read fields=tcp.dport" in text and "\nexit:\n    apply_rules rules=" in text
    assert "; rule 1 web (" in text and "tcp.dport == 80 -> rewrite stateful" in text


def test_without_rules_the_program_has_none(tmp_path: Path) -> None:
    prog = Compilation(TCP_IP, opt_level=2).program
    assert prog.rules is None and prog.exit == []
    assert not _ops(prog, I.RuleRead) and not _ops(prog, I.RuleKey)
    assert "exit:" not in to_text(prog)


def test_stateless_rules_record_no_keys_and_reloadable_ones_read_every_layer(
    tmp_path: Path,
) -> None:
    stateless = _compile(tmp_path, 'rules: [{name: a, match: "tcp.dport == 1", action: drop}]', 1)
    assert not _ops(stateless.program, I.RuleKey)
    rl = _compile(tmp_path, RULES, 0, reload=True).program
    assert rl.rules is not None and rl.rules.reload and rl.rules.stack_spec == str(TCP_IP)
    whole = {i.layer for _b, i in _ops(rl, I.RuleRead) if isinstance(i, I.RuleRead) and i.whole}
    parsed = {i.layer for _b, i in _ops(rl, I.ParseHeader)}
    assert whole == parsed  # any rule set may read any layer's fixed part
    assert "apply_rules rules=" in to_text(rl) and " reload" in to_text(rl)


def test_the_verifier_checks_the_rules(tmp_path: Path) -> None:
    prog = _compile(tmp_path, RULES, 0).program
    apply = prog.exit[0]
    assert isinstance(apply, I.ApplyRules)
    blk = next(b for b in prog.blocks.values() if b.instrs)
    name, read = _ops(prog, I.RuleRead)[0]
    assert isinstance(read, I.RuleRead)
    old = read.fields
    read.fields = (FieldRef(read.layer, "nosuch", "num", 8),)
    blk.instrs.append(apply)
    prog.exit.append(apply)
    try:
        problems = verify(prog)
        assert any("apply_rules in a block" in p for p in problems)
        assert any("2 apply_rules" in p for p in problems)
        assert any(f"{name}: rule_read copies {read.layer}.nosuch" in p for p in problems)
    finally:
        read.fields = old
        blk.instrs.remove(apply)
        prog.exit.pop()
    assert verify(prog) == []
    with pytest.raises(ValueError, match="lowered already"):
        lower_rules(prog, RulesDesc(None))
    # a rule bound to a layer the program does not have
    desc = prog.rules
    assert desc is not None and desc.rules is not None
    r0 = desc.rules.rules[0]
    key = next(iter(r0.refs))
    was = r0.refs[key]
    r0.refs[key] = FieldRef("nolayer", "x", "num", 8)
    try:
        assert any("rule telnet: unknown layer 'nolayer'" in p for p in verify(prog))
    finally:
        r0.refs[key] = was


def test_the_xdp_target_renders_the_rule_opcodes_from_its_registry(tmp_path: Path) -> None:
    from rubikgen.backend.ebpf import generate_xdp

    assert EBPF.missing(I.RULE_OPS) == []
    c = _compile(tmp_path, 'rules: [{name: t, match: "tcp.dport == 23", action: drop}]', 2)
    text = generate_xdp(c.program).c
    assert "if (err_tcp == 0) RGX_RULES_tcp();" in text
    assert "rule t: tcp.dport == 23 -> drop */" in text


def test_a_reloadable_build_without_rules_has_the_host_side(tmp_path: Path) -> None:
    # `rubikgen run --rules R --rules-reload` builds without R (compiled to a shared object)
    prog = Compilation(TCP_IP, opt_level=0, rules_reload=True).program
    assert prog.rules is not None and prog.rules.reload and prog.rules.rules is None
    assert _ops(prog, I.RuleRead) and [type(i) for i in prog.exit] == [I.ApplyRules]
    assert verify(prog) == []
