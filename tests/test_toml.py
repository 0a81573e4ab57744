"""TOML and YAML versions of the same document load into equal models."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from rubikgen.source import load_yaml
from rubikgen.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").rglob("*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=[p.name for p in SPECS])
def test_toml_equals_yaml(spec: Path, tmp_path: Path) -> None:
    # rubikgen's loader keeps keys as written (PyYAML would turn a key `no:` into False).
    data = load_yaml(str(spec), spec.read_text()).data
    toml_file = tmp_path / (spec.stem + ".toml")
    toml_file.write_text(tomli_w.dumps(data))
    ws = Workspace()
    a = ws.load(str(spec))
    b = ws.load(str(toml_file))
    assert a.model is not None and b.model is not None, [d.message for d in b.diags]
    assert a.model == b.model


def test_handwritten_toml_protocol_validates_with_positions() -> None:
    ws = Workspace()
    doc = ws.check(str(ROOT / "tests" / "specs" / "ok" / "udp.toml"))
    assert doc.model is not None
    assert [d for d in ws.all_diagnostics() if d.severity == "error"] == []
    yaml_doc = ws.check(str(ROOT / "specs" / "protocols" / "udp.yaml"))
    # Same protocol; only the parameter paths (relative to each file) and doc differ.
    skip = {"params", "doc"}
    assert doc.model.model_dump(exclude=skip) == yaml_doc.model.model_dump(exclude=skip)
    ip_yaml = [str(ROOT / "specs" / "protocols" / n) for n in ("ip.yaml", "ipv6.yaml")]
    assert doc.info.param_files["ip"] == ip_yaml


def test_toml_error_points_at_the_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('protocol = "bad"\nheader = ["hdr"]\n\n[layouts.hdr]\nsport = 16\ndport = "sixteen"\n')
    ws = Workspace()
    ws.check(str(f))
    diags = ws.all_diagnostics()
    assert [(d.code, d.line) for d in diags] == [("RG006", 6)]
