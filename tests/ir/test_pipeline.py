"""The compilation object: each stage once per command, the same output as before, and the
build options that expose the pass manager (--dump-ir-after, --check-ir)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from support import REPO_ROOT

import rubikgen.sema.stack
from rubikgen.cli import main
from rubikgen.front.diagnostics import GenerateError
from rubikgen.front.workspace import Workspace
from rubikgen.ir import Program
from rubikgen.pipeline import Compilation

REPO = REPO_ROOT
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each spec file is parsed and how often a stack is checked, in this process."""
    seen: Counter[str] = Counter()
    parse = Workspace._model
    check = rubikgen.sema.stack.check_stack

    def counted_parse(self: Workspace, ap: str, loaded: object) -> object:
        seen[ap] += 1
        return parse(self, ap, loaded)  # type: ignore[arg-type]

    def counted_check(ws: object, doc: object) -> None:
        seen["check_stack"] += 1
        check(ws, doc)  # type: ignore[arg-type]

    monkeypatch.setattr(Workspace, "_model", counted_parse)
    monkeypatch.setattr(rubikgen.sema.stack, "check_stack", counted_check)
    return seen


def test_stages_run_once(counts: Counter[str]) -> None:
    comp = Compilation(TCP_IP)
    assert comp.stack_name == "tcp_ip"
    assert counts["check_stack"] == 0  # the name needs the load only
    gen = comp.generated
    assert Path(TCP_IP) in comp.spec_files()
    assert comp.generated is gen and comp.program is comp.lowered
    other = comp.with_options(opt_level=0).generated  # shares the checked documents
    assert other.files != gen.files
    assert counts["check_stack"] == 1
    assert counts[TCP_IP] == 1
    assert max(counts.values()) == 1, counts


@pytest.mark.parametrize("cmd", ["check", "stubs"])
def test_commands_load_and_check_once(
    cmd: str, counts: Counter[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rubikgen check` loaded the stack three times and checked it twice when the last build
    was not at -O2; every command now does each once."""
    (tmp_path / "tcp_ip.stamp").write_text('{"opt_level": 1}')  # the last build's level
    main([cmd, TCP_IP, "-o", str(tmp_path)])
    capsys.readouterr()
    assert counts[TCP_IP] == 1
    assert counts["check_stack"] == 1


def test_spec_errors_carry_the_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stack: bad\nlayers:\n  x: {protocol: nowhere.yaml}\n")
    comp = Compilation(bad)
    assert comp.stack_name == "bad"
    with pytest.raises(GenerateError) as e:
        _ = comp.generated
    assert e.value.diagnostics
    assert all(d.file.endswith("bad.yaml") for d in e.value.diagnostics)
    assert e.value.diagnostics[0] in comp.diagnostics


def test_a_rules_file_is_checked_with_the_stack_before_lowering(tmp_path: Path) -> None:
    # issue 28: the rules are checked in the check stage, against the semantic model (the
    # stack's layers), not against the IR after lowering and optimising
    rules = tmp_path / "r.yaml"
    rules.write_text('rules:\n  - {name: r, match: "tcp.nosuch == 1", action: drop}\n')
    comp = Compilation(TCP_IP, rules=rules)
    with pytest.raises(GenerateError) as ei:
        _ = comp.checked
    d = ei.value.diagnostics[0]
    assert (d.code, d.file, d.line) == ("RG011", str(rules), 2)
    assert "no header field 'nosuch'" in d.message
    assert "resolved" not in comp.__dict__ and "lowered" not in comp.__dict__
    good = tmp_path / "ok.yaml"
    good.write_text('rules:\n  - {name: r, match: "tcp.dport == 23", action: drop}\n')
    ok = Compilation(TCP_IP, rules=good)
    rs = ok.rules
    assert rs is not None and [r.name for r in rs.rules] == ["r"]
    assert "lowered" not in ok.__dict__


def test_build_dumps_the_ir_after_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rubikgen build --dump-ir-after PASS` writes what `rubikgen ir --dump-after PASS` prints,
    and the build is the one without the option (same C)."""
    out = tmp_path / "b"
    args = ["build", TCP_IP, "-o", str(out), "--check-ir"]
    assert main([*args, "--dump-ir-after", "const-prop", "--dump-ir-after", "dead-stores"]) == 0
    err = capsys.readouterr().err
    assert f"IR after pass const-prop: {out / 'tcp_ip.const-prop.ir'}" in err
    assert main(["ir", TCP_IP, "-O2", "--dump-after", "dead-stores"]) == 0
    printed = capsys.readouterr().out
    assert printed == "; after pass dead-stores\n" + (out / "tcp_ip.dead-stores.ir").read_text()
    assert (out / "tcp_ip_gen.c").read_text() == Compilation(TCP_IP).generated.files["tcp_ip_gen.c"]
    # a pass the level does not run is named, not silently skipped; an unknown one is a usage error
    assert main([*args, "-O1", "--dump-ir-after", "tail-dup"]) == 0
    assert "not run at -O1: tail-dup" in capsys.readouterr().err
    assert main([*args, "--dump-ir-after", "no-such-pass"]) == 2
    assert "unknown pass 'no-such-pass'" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["--check-ir", "RUBIKGEN_CHECK_IR=1"])
def test_check_ir_stops_a_build_after_a_pass_that_breaks_the_ir(
    how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check-ir (or the environment variable) runs the verifier after every pass: a pass that
    leaves a jump to no block stops the build there, naming the pass, before anything is
    compiled."""
    import rubikgen.opt as opt
    from rubikgen.ir.nodes import Jump

    def dangling(prog: Program) -> bool:
        next(iter(prog.blocks.values())).term = Jump("nowhere")
        return True

    monkeypatch.setitem(opt.PASSES, "dangling", opt.Pass("dangling", 1, dangling, "breaks"))
    monkeypatch.setattr(opt, "PIPELINE", ["dangling", *opt.PIPELINE])
    out = tmp_path / "b"
    if how.startswith("RUBIKGEN"):
        monkeypatch.setenv("RUBIKGEN_CHECK_IR", "1")
    flags = ["--check-ir"] if how == "--check-ir" else []
    assert main(["build", TCP_IP, "-o", str(out), *flags]) == 3
    err = capsys.readouterr().err
    assert "IR invalid after pass dangling" in err and "nowhere" in err
    assert not (out / "tcp_ip").exists()
