"""`rubikgen graph --psm` stays readable: each transition is drawn once (a `from: "*"`
transition leaves one 'any state' box, several sources join at a point, transitions with the
same sources and target share one edge), long guards are wrapped, and the TCP PSM fits the width
of an A4 page. Rendered with Graphviz's dot."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.cli.graph import wrap_guard
from rubikgen.front.workspace import Workspace

ROOT = REPO_ROOT
PROTOCOLS = sorted((ROOT / "specs" / "protocols").glob("*.yaml"))
A4_WIDTH_PT = 595  # 210 mm


def with_psm() -> list[Path]:
    ws = Workspace()
    return [p for p in PROTOCOLS if getattr(ws.load(str(p)).model, "psm", None) is not None]


def svg(path: Path) -> str:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed (bash ci/setup.sh installs it)")
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", "graph", str(path), "--psm", "--format", "svg"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def texts(doc: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", doc)]


@pytest.mark.parametrize("proto", with_psm(), ids=lambda p: p.stem)
def test_each_transition_drawn_once(proto: Path) -> None:
    model = Workspace().load(str(proto)).model
    doc = svg(proto)
    got = texts(doc)
    for i, t in enumerate(model.psm.transitions, start=1):
        assert got.count(f"{i}. {t.name}") == 1, (proto.name, t.name)
    n_any = sum(t.from_ == "*" for t in model.psm.transitions)
    assert got.count("any state") == (1 if n_any else 0)


def test_tcp_psm_fits_a4_width() -> None:
    doc = svg(ROOT / "specs" / "protocols" / "tcp.yaml")
    width = float(re.search(r'<svg width="([\d.]+)pt"', doc).group(1))
    assert width <= A4_WIDTH_PT, f"TCP PSM is {width} pt wide"


def test_wrap_guard_keeps_the_text_and_breaks_at_operators() -> None:
    g = "header.rst && (current_state != SYN_SENT || (header.ack && header.ack_seq == perm.a_isn1))"
    rows = wrap_guard(g, 30)
    assert all(len(r) <= 30 for r in rows)
    assert " ".join(r.strip() for r in rows) == g
    assert rows[0] == "header.rst &&"
    assert wrap_guard("a && b", 30) == ["a && b"]
