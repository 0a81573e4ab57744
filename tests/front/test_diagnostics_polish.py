"""Diagnostics that lead to the fix: quoting hints for '!', '&' and '*', errors before warnings,
no warning that only echoes an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.front.workspace import Workspace

ROOT = REPO_ROOT
ERRORS = ROOT / "tests" / "specs" / "errors"


def diags(path: Path) -> list:
    ws = Workspace()
    ws.check(str(path))
    return ws.all_diagnostics()


@pytest.mark.parametrize(
    ("case", "quoted"),
    [
        ("RG001_bang_tag.yaml", 'when: "!header.syn"'),
        ("RG001_bang_nonspecific.yaml", 'when: "! header.syn"'),
        ("RG001_bang_flow.yaml", 'when: "!header.syn && header.ack"'),
    ],
)
def test_bang_hint_quotes_the_whole_expression(case: str, quoted: str) -> None:
    (d,) = diags(ERRORS / case)
    assert d.code == "RG001" and d.hint is not None
    assert quoted in d.hint
    assert "remove" not in d.hint  # removing the tag would invert the condition


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("&header.syn", '"&header.syn"'),
        ("{when: *x && y}", 'when: "*x && y"'),
        ("{when: !(payload[0] == 1), doc: d}", 'when: "!(payload[0] == 1)"'),
    ],
)
def test_flow_and_anchor_errors_say_the_same(tmp_path: Path, value: str, quoted: str) -> None:
    text = "protocol: p\nlayouts: {h: {a: 8}}\nheader: [h]\nevents:\n  e:\n"
    text += f"    {value}\n" if value.startswith("{") else f"    when: {value}\n"
    f = tmp_path / "p.yaml"
    f.write_text(text)
    (d,) = diags(f)
    assert d.code == "RG001" and "must be quoted" in d.message
    assert d.hint is not None and quoted in d.hint


def test_quoting_as_hinted_keeps_the_meaning(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "protocol: p\nlayouts: {h: {a: 8}}\nheader: [h]\nevents:\n  e: {when: ! header.a}\n"
    )
    (d,) = diags(f)
    fixed = d.hint.split("quote the whole expression: ", 1)[1].split(" (", 1)[0]
    f.write_text(f"protocol: p\nlayouts: {{h: {{a: 8}}}}\nheader: [h]\nevents:\n  e: {{{fixed}}}\n")
    ws = Workspace()
    doc = ws.check(str(f))
    assert [x for x in ws.all_diagnostics() if x.severity == "error"] == []
    assert doc.model.events["e"].when == "! header.a"


def test_errors_are_printed_before_warnings(tmp_path: Path) -> None:
    protos = ROOT / "specs" / "protocols"
    f = tmp_path / "s.yaml"
    f.write_text(
        "stack: s\nentry: eth\nlayers:\n"
        f"  eth: {{protocol: {protos / 'eth.yaml'}}}\n"
        f"  ip: {{protocol: {protos / 'ip.yaml'}}}\n"
        "edges:\n"
        "  - {from: eth, to: ip, when: 'header.ethertype == 0x0800'}\n"
        "  - {from: eth, to: ip, when: 'header.ethertype == 0x0800'}\n"  # RG055 warning, line 8
        "handlers:\n  h: {layer: nosuch}\n"  # RG052 error, line 10
    )
    out = subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", str(f)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    heads = [ln for ln in out.splitlines() if ": error[" in ln or ": warning[" in ln]
    assert [("error" in h) for h in heads] == [True, False], out
    assert "RG052" in heads[0] and "RG055" in heads[1]


def test_unknown_edge_target_suppresses_unreachable() -> None:
    got = [(d.code, d.severity) for d in diags(ERRORS / "RG052_edge_no_unreachable_echo.yaml")]
    assert got == [("RG052", "error")]
