"""`rubikgen validate` on every document kind (issue 26): the failures of the issue's "Why",
each in the form a user met it, and the kinds `--list-kinds` names.

* a rules file without `spec:` still gets its syntax checked (`"tcp.dport == "`, `"((1"`);
* a chain file and a test vector that no longer parse, or name what does not exist;
* a reference that leaves the repository root (`../../../../root/.bashrc`) is an error at
  the reference and nothing of the target is printed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.validate import validate_fails

from rubikgen.cli import main
from rubikgen.front import specpath
from rubikgen.front.validate import KINDS

REPO = REPO_ROOT


@pytest.fixture(autouse=True)
def _no_search_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(specpath.ENV, raising=False)
    specpath.configure([])
    specpath.configure_trees([])


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, object]]]:
    capsys.readouterr()
    rc = main(["validate", "--format", "json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else []


def _where(diags: list[dict[str, object]]) -> set[tuple[object, object, object]]:
    return {(d["code"], d["line"], d["col"]) for d in diags if d["severity"] == "error"}


def test_list_kinds_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--list-kinds"]) == 0
    out = capsys.readouterr().out
    for kind, how in KINDS:
        assert f"{kind:9} {how}" in out
    assert {k for k, _ in KINDS} == {"protocol", "stack", "rules", "chain", "test"}


def test_rules_without_spec_are_syntax_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(
        "rules:\n"
        '  - {name: a, match: "tcp.dport == ", action: drop}\n'
        '  - {name: b, match: "((1", action: drop}\n'
        '  - {name: c, match: "ip.saddr == 10.0.0.300", action: drop}\n'
        '  - {name: c, match: "tcp.dport == 1", action: drop}\n',
        encoding="utf-8",
    )
    rc, diags = _json(capsys, str(f))
    assert rc == 1
    # after '== ': the missing operand; the unclosed '('; the octet; the second 'c'
    assert _where(diags) == {("RG010", 2, 36), ("RG010", 3, 24), ("RG015", 4, 35), ("RG022", 5, 12)}
    # still a warning that nothing was checked against a stack
    assert [d["code"] for d in diags if d["severity"] == "warning"] == ["RG004"]
    # a valid file without spec: passes (the warning aside)
    f.write_text('rules:\n  - {name: a, match: "tcp.dport == 1", action: drop}\n', encoding="utf-8")
    assert _json(capsys, str(f))[0] == 0


def test_chain_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "chain.yaml"
    f.write_text("chain:\n  - nf: flowstats\n  - nf: [events\n", encoding="utf-8")
    rc, diags = _json(capsys, str(tmp_path))
    assert rc == 1 and _where(diags) == {("RG001", 3, 9)}
    f.write_text("chain:\n  - nf: flowstat\n  - {nf: events}\n", encoding="utf-8")
    rc, diags = _json(capsys, str(tmp_path))
    assert rc == 1 and _where(diags) == {("RG011", 2, 9)}
    f.write_text("chain:\n  - nf: flowstats\n  - {nf: events, colour: red}\n", encoding="utf-8")
    rc, diags = _json(capsys, str(tmp_path))
    assert rc == 1 and _where(diags) == {("RG005", 3, 18)}


VECTOR = """\
test: udp
spec: ../stacks/tcp_ip.yaml
cases:
  - name: one
    packets:
      - {ipv4: {src: 10.0.0.1, dst: 10.0.0.2}, udp: {sport: 1, dport: 2}, payload: "x"}
      - {pcap: two.pcap}
    expect:
      streams: [{layer: udp, data: "x"}]
"""


def test_test_vectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".git").mkdir()
    specs = tmp_path / "specs"
    for d in ("stacks", "protocols"):
        os.makedirs(specs / d)
        for p in (REPO / "specs" / d).iterdir():
            (specs / d / p.name).write_bytes(p.read_bytes())
    tests = specs / "tests"
    tests.mkdir()
    v = tests / "udp.test.yaml"
    v.write_text(VECTOR, encoding="utf-8")
    (tests / "two.pcap").write_bytes(b"")
    assert _json(capsys, str(v)) == (0, [])
    # the syntax error in a test vector
    lines = VECTOR.splitlines(keepends=True)
    v.write_text("".join(lines[:2] + ["  bad: [unclosed, {x: \n"] + lines[3:]), encoding="utf-8")
    rc, diags = _json(capsys, str(tests))
    assert rc == 1 and {c for c, *_ in _where(diags)} == {"RG001"}
    # what it names: a stack, a layer of it, a capture
    v.write_text(
        VECTOR.replace("tcp_ip.yaml", "tcp_ipp.yaml"), encoding="utf-8"
    )  # a stack that is not there
    rc, diags = _json(capsys, str(v))
    assert rc == 1 and _where(diags) == {("RG007", 2, 7)}
    v.write_text(
        VECTOR.replace("layer: udp", "layer: udpp").replace("two.pcap", "three.pcap"),
        encoding="utf-8",
    )
    rc, diags = _json(capsys, str(v))
    assert rc == 1 and _where(diags) == {("RG052", 9, 25), ("RG007", 7, 16)}
    # the schema: a key the model does not have
    v.write_text(VECTOR.replace("test: udp\n", "test: udp\nlinks: raw\n"), encoding="utf-8")
    rc, diags = _json(capsys, str(v))
    assert rc == 1 and _where(diags) == {("RG005", 2, 1)}
    # a stack with errors: reported in the stack, and at the vector's spec
    (specs / "stacks" / "tcp_ip.yaml").write_text("stack: [\n", encoding="utf-8")
    v.write_text(VECTOR, encoding="utf-8")
    rc, diags = _json(capsys, str(v))
    assert rc == 1
    assert {(Path(str(d["file"])).name, d["line"]) for d in diags} >= {
        ("udp.test.yaml", 2),
        ("tcp_ip.yaml", 2),
    }


SECRET = "export TOKEN=very-secret-value"


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    """A repository (a `.git`) whose stack names a file outside it."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".bashrc").write_text(SECRET + "\n", encoding="utf-8")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "specs" / "stacks").mkdir(parents=True)
    s = repo / "specs" / "stacks" / "evil.yaml"
    s.write_text(
        "stack: evil\nentry: a\nlayers:\n  a: {protocol: ../../../home/.bashrc}\n",
        encoding="utf-8",
    )
    return repo, s


def test_references_stay_in_the_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, s = _outside(tmp_path)
    out = validate_fails(str(repo / "specs"))
    assert (
        f"{s}:4:17: error[RG007]: protocol file '../../../home/.bashrc' leaves the repository root"
        in out
    )
    assert "TOKEN" not in out and "very-secret" not in out, out
    # the same with a symbolic link inside the repository that points outside
    (repo / "specs" / "protocols").mkdir()
    (repo / "specs" / "protocols" / "p.yaml").symlink_to(tmp_path / "home" / ".bashrc")
    s.write_text(s.read_text().replace("../../../home/.bashrc", "../protocols/p.yaml"))
    rc, diags = _json(capsys, str(s))
    assert rc == 1 and _where(diags) == {("RG007", 4, 17)}
    assert SECRET not in json.dumps(diags)
    # a directory of the spec search path may hold it
    rc, diags = _json(capsys, "--spec-path", str(tmp_path / "home"), str(s))
    assert "leaves the repository root" not in json.dumps(diags)


def test_outside_git_the_validated_folder_is_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, s = _outside(tmp_path)
    (repo / ".git").rmdir()
    rc, diags = _json(capsys, str(repo / "specs"))
    assert rc == 1 and _where(diags) == {("RG007", 4, 17)}
    assert SECRET not in json.dumps(diags)
    # the stock library is always allowed, and so are references inside the folder
    s.write_text(
        "stack: ok\nentry: ip\nlayers:\n  ip: {protocol: stock:ip.yaml}\n", encoding="utf-8"
    )
    assert _json(capsys, str(repo / "specs"))[0] == 0
