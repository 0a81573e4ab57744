"""References between spec files (`stock:` names, the spec search path) and validate on
repositories full of YAML that is not rubikgen's (what the pre-commit hook sees)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.cli import main
from rubikgen.front import specpath
from rubikgen.front.workspace import Workspace

REPO = REPO_ROOT

STACK = """\
stack: refs
entry: ip
layers:
  ip:  {protocol: IP}
  udp: {protocol: UDP, args: {ip: ip}}
edges:
  - {from: ip, to: udp, when: "event.asm && header.protocol == 17"}
"""


def stack(tmp: Path, ip: str = "stock:ip.yaml", udp: str = "stock:udp.yaml") -> Path:
    p = tmp / "refs.yaml"
    p.write_text(STACK.replace("IP", ip).replace("UDP", udp), encoding="utf-8")
    return p


def _shown(p: Path) -> str:
    """A path as diagnostics show it: relative to the working directory unless outside it."""
    rel = os.path.relpath(p)
    return rel if not rel.startswith("..") else str(p)


def diags(path: Path) -> list[tuple[str, int, int, str, str]]:
    ws = Workspace()
    ws.check(str(path))
    return [(d.code, d.line, d.col, d.message, d.hint or "") for d in ws.all_diagnostics()]


@pytest.fixture(autouse=True)
def _no_search_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(specpath.ENV, raising=False)
    specpath.configure([])


def test_stock_names_resolve_from_anywhere(tmp_path: Path) -> None:
    assert diags(stack(tmp_path)) == []
    # the same files as the stock tcp_ip stack's relative references
    assert diags(stack(tmp_path, "stock:protocols/ip.yaml")) == []
    ws = Workspace()
    doc = ws.check(str(stack(tmp_path)))
    files = {os.path.abspath(li.protocol.file) for li in doc.stack_info.layers.values()}
    assert files == {str(REPO / "specs" / "protocols" / n) for n in ("ip.yaml", "udp.yaml")}


def test_unknown_stock_name(tmp_path: Path) -> None:
    (d,) = diags(stack(tmp_path, udp="stock:udpp.yaml"))
    code, line, col, message, hint = d
    assert (code, line, col) == ("RG007", 5, 19)  # at the reference
    assert message == "protocol file 'stock:udpp.yaml' not found"
    assert "did you mean 'stock:udp.yaml'?" in hint
    assert hint.endswith(f"looked in: {_shown(REPO / 'specs' / 'protocols' / 'udpp.yaml')}")


def test_stock_names_stay_in_the_library(tmp_path: Path) -> None:
    (d,) = diags(stack(tmp_path, udp="stock:../../README.md"))
    assert d[:3] == ("RG007", 5, 19)


def test_relative_then_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "myudp.yaml").write_text(
        (REPO / "specs" / "protocols" / "udp.yaml")
        .read_text(encoding="utf-8")
        .replace("ip.yaml, ipv6.yaml", "stock:ip.yaml, stock:ipv6.yaml"),
        encoding="utf-8",
    )
    s = stack(tmp_path, udp="myudp.yaml")
    (d,) = diags(s)
    assert d[:4] == ("RG007", 5, 19, "protocol file 'myudp.yaml' not found")
    assert _shown(tmp_path / "myudp.yaml") in d[4] and "--spec-path" in d[4]
    monkeypatch.setenv(specpath.ENV, f"{tmp_path / 'nowhere'}:{lib}")
    assert diags(s) == []
    monkeypatch.setenv(specpath.ENV, str(tmp_path / "nowhere"))
    (d,) = diags(s)
    assert (
        f"{_shown(tmp_path / 'myudp.yaml')}, {_shown(tmp_path / 'nowhere' / 'myudp.yaml')}" in d[4]
    )
    specpath.configure([str(lib)])  # what --spec-path does
    assert diags(s) == []
    # a file next to the stack wins over the search path
    (tmp_path / "myudp.yaml").write_text("protocol: [\n", encoding="utf-8")
    assert [x[0] for x in diags(s)] == ["RG001", "RG007"]


def test_cli_spec_path_and_stock_arguments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "u.yaml").write_text(
        (REPO / "specs" / "protocols" / "udp.yaml")
        .read_text(encoding="utf-8")
        .replace("ip.yaml, ipv6.yaml", "stock:ip.yaml, stock:ipv6.yaml"),
        encoding="utf-8",
    )
    s = stack(tmp_path, udp="u.yaml")
    assert main(["validate", str(s)]) == 1
    assert main(["validate", "--spec-path", str(lib), str(s)]) == 0
    files = list((REPO / "specs").rglob("*.yaml"))
    capsys.readouterr()
    assert main(["validate", "stock:"]) == 0
    # test vectors are rubikgen documents too (issue 26): nothing of the library is skipped
    assert capsys.readouterr().out.strip() == f"{len(files)} spec files OK"
    assert main(["validate", "--format", "json", "stock:nope.yaml"]) == 1
    (d,) = json.loads(capsys.readouterr().out)
    assert (d["code"], d["file"]) == ("RG007", "stock:nope.yaml")


NOT_SPECS = {
    ".github/workflows/ci.yml": "name: CI\non: [push]\njobs:\n  t: {runs-on: ubuntu}\n",
    "compose.yaml": "services:\n  db: {image: postgres}\n",
    "Taskfile.yml": "version: '3'\ntasks:\n  build: {cmds: [make]}\n",  # 'tasks' ~ 'stack'
    "k8s.yaml": "kind: Pod\n---\nkind: Service\n",  # several documents
    "cfn.yaml": "Resources:\n  B: {Type: x, Name: !Ref N}\n",  # tags
    "pyproject.toml": '[project]\nname = "x"\n',
}
# Files that do not parse are errors, whatever they were meant as (issue 26): (code, line, col)
BROKEN = {
    "empty.yaml": ("# nothing\n", "RG003", 1, 1),
    "broken.yaml": ("key: [unclosed\n", "RG001", 1, 6),  # at the unclosed [
    "list.yaml": ("- a\n- b\n", "RG003", 1, 1),
    "bad.toml": ("[project\n", "RG008", 1, 9),
    "latin1.yml": ("name: caf\xe9\n", "RG001", 1, 10),
}


def test_validate_skips_what_is_not_rubikgen(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for rel, text in NOT_SPECS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    (tmp_path / "net").mkdir()
    s = stack(tmp_path / "net")
    files = [str(tmp_path / r) for r in NOT_SPECS] + [str(s)]
    assert main(["validate", "--strict", "-v", *files]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"1 spec file OK ({len(NOT_SPECS)} other YAML/TOML files skipped)"
    for rel in NOT_SPECS:
        assert f"{tmp_path / rel}: note: skipped: not a rubikgen document" in err
    assert main(["validate", str(tmp_path)]) == 0  # a directory: the same (dot dirs aside)
    assert "1 spec file OK" in capsys.readouterr().out


def test_validate_fails_on_what_does_not_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for rel, (text, *_) in BROKEN.items():
        (tmp_path / rel).write_bytes(text.encode("latin-1"))
    assert main(["validate", "--format", "json", str(tmp_path)]) == 1
    got = {
        (Path(d["file"]).name, d["code"], d["line"], d["col"])
        for d in json.loads(capsys.readouterr().out)
    }
    assert got == {(rel, *want) for rel, (_, *want) in BROKEN.items()}
    # excluded explicitly: not read at all
    globs = [x for rel in BROKEN for x in ("--exclude", rel)]
    assert main(["validate", *globs, str(tmp_path)]) == 0, capsys.readouterr()
    assert main(["validate", "--exclude", f"{tmp_path}/*", str(tmp_path)]) == 0


def test_strict_fails_on_skipped_files_beside_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    s = stack(tmp_path)
    (tmp_path / "compose.yaml").write_text(NOT_SPECS["compose.yaml"], encoding="utf-8")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "ci.yml").write_text(NOT_SPECS["compose.yaml"], encoding="utf-8")
    assert main(["validate", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["validate", "--strict", "--format", "json", str(tmp_path)]) == 1
    (d,) = json.loads(capsys.readouterr().out)  # ci/ holds no rubikgen document: not named
    assert (d["code"], d["file"], d["line"]) == ("RG003", str(tmp_path / "compose.yaml"), 1)
    assert main(["validate", "--strict", "--exclude", "compose.yaml", str(tmp_path), str(s)]) == 0
    # a file that does not parse is an error, but does not make its folder one of documents
    (tmp_path / "ci" / "list.yaml").write_text("- a\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["validate", "--strict", "--format", "json", str(tmp_path / "ci")]) == 1
    (d,) = json.loads(capsys.readouterr().out)
    assert (d["code"], d["file"]) == ("RG003", str(tmp_path / "ci" / "list.yaml"))


@pytest.mark.parametrize(
    ("text", "code", "line"),
    [
        ("protocl: demo\nlayouts:\n  hdr: {kind: 8}\n", "RG003", 1),  # misspelt, next to layouts
        ("protocol: demo\nlayouts: [\n", "RG001", 3),  # does not parse, but is a protocol
        ('stack = "s"\nentry = [\n', "RG008", 2),  # TOML, the same
        ("protocol: demo\nlayouts: {hdr: {kind: 7}}\nheader: [hdr]\n", "RG020", 2),
    ],
)
def test_validate_still_reports_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture, text: str, code: str, line: int
) -> None:
    f = tmp_path / ("spec.toml" if "=" in text.splitlines()[0] else "spec.yaml")
    f.write_text(text, encoding="utf-8")
    assert main(["validate", "--format", "json", str(f)]) == 1
    got = json.loads(capsys.readouterr().out)
    assert (got[0]["code"], got[0]["line"]) == (code, line), got


def test_extends_names_a_stock_stack(tmp_path: Path) -> None:
    """`extends: stock:tcp_ip.yaml` composes the stock stack from any directory, and a wrong
    stock stack name is RG007 at `extends`, suggesting the stock stack (not a protocol)."""
    p = tmp_path / "vx.yaml"
    p.write_text(
        "stack: vx\n"
        "extends: stock:tcp_ip.yaml\n"
        "layers:\n"
        "  vxlan: {protocol: stock:vxlan.yaml}\n"
        "graft:\n"
        "  - {subtree: ethernet, prefix: inner_}\n"
        "edges:\n"
        '  - {from: udp, to: vxlan, when: "header.dport == 4789"}\n'
        "  - {from: vxlan, to: inner_eth}\n",
        encoding="utf-8",
    )
    assert diags(p) == []
    p.write_text(p.read_text().replace("stock:tcp_ip.yaml", "stock:tcp_ipx.yaml"))
    (d,) = diags(p)
    assert d[:3] == ("RG007", 2, 10)
    assert "did you mean 'stock:tcp_ip.yaml'?" in d[4]
