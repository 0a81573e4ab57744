"""TOML and YAML versions of the same document load into equal models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT

from rubikgen.front.source import load_yaml
from rubikgen.front.workspace import Workspace

ROOT = REPO_ROOT
# the stock specs (not the test vectors of specs/tests/, which are not specs)
SPECS = sorted(p for p in (ROOT / "specs").rglob("*.yaml") if not p.name.endswith(".test.yaml"))


def _toml_value(v: Any) -> str:
    # Inline tables keep the key order of the source: field order is wire order, so the
    # conversion must not reorder (tomli_w moves sub-tables after plain keys).
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(data: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in data.items())


def ordered(model: Any) -> str:
    """The model as JSON with keys in document order: equal only if field order is equal."""
    return json.dumps(model.model_dump(by_alias=True))


@pytest.mark.parametrize("spec", SPECS, ids=[p.name for p in SPECS])
def test_toml_equals_yaml(spec: Path, tmp_path: Path) -> None:
    # rubikgen's loader keeps keys as written (PyYAML would turn a key `no:` into False).
    data = load_yaml(str(spec), spec.read_text()).data
    # Beside a copy of the library, so paths relative to the file (extends:) resolve alike.
    shutil.copytree(spec.parent.parent, tmp_path / "specs")
    toml_file = tmp_path / "specs" / spec.parent.name / (spec.stem + ".toml")
    toml_file.write_text(to_toml(data))
    ws = Workspace()
    a = ws.load(str(spec))
    b = ws.load(str(toml_file))
    assert a.model is not None and b.model is not None, [d.message for d in b.diags]
    assert ordered(a.model) == ordered(b.model)


def test_handwritten_toml_protocol_validates_with_positions() -> None:
    ws = Workspace()
    doc = ws.check(str(ROOT / "tests" / "specs" / "ok" / "udp.toml"))
    assert doc.model is not None
    assert [d for d in ws.all_diagnostics() if d.severity == "error"] == []
    yaml_doc = ws.check(str(ROOT / "specs" / "protocols" / "udp.yaml"))
    # Same protocol; only the parameter paths (relative to each file) and doc differ.
    skip = {"params", "doc"}
    assert json.dumps(doc.model.model_dump(exclude=skip)) == json.dumps(
        yaml_doc.model.model_dump(exclude=skip)
    )
    ip_yaml = [str(ROOT / "specs" / "protocols" / n) for n in ("ip.yaml", "ipv6.yaml")]
    assert doc.info.param_files["ip"] == ip_yaml


def test_toml_error_points_at_the_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(
        'protocol = "bad"\nheader = ["hdr"]\n\n[layouts.hdr]\nsport = 16\ndport = "sixteen"\n'
    )
    ws = Workspace()
    ws.check(str(f))
    diags = ws.all_diagnostics()
    assert [(d.code, d.line) for d in diags] == [("RG006", 6)]
