"""The committed JSON Schemas match the models, and every stock spec names its schema."""

from __future__ import annotations

from pathlib import Path

from rubikgen.schema_gen import SCHEMAS, schema_text

ROOT = Path(__file__).resolve().parent.parent


def test_schemas_are_fresh() -> None:
    for name in SCHEMAS:
        on_disk = (ROOT / "schema" / name).read_text(encoding="utf-8")
        assert on_disk == schema_text(name), (
            f"schema/{name} is stale: run 'rubikgen schema --out schema/'"
        )


def test_every_spec_has_a_modeline() -> None:
    specs = sorted((ROOT / "specs").rglob("*.yaml"))
    assert specs
    for p in specs:
        first = p.read_text(encoding="utf-8").splitlines()[0]
        kind = "stack" if p.parent.name == "stacks" else "protocol"
        assert first == f"# yaml-language-server: $schema=../../schema/{kind}.schema.json", p


def test_schema_accepts_the_stock_specs() -> None:
    """The generated schema is usable by editors: every stock spec validates against it."""
    import jsonschema  # type: ignore[import-untyped]

    from rubikgen.source import load_yaml

    for p in sorted((ROOT / "specs").rglob("*.yaml")):
        kind = "stack" if p.parent.name == "stacks" else "protocol"
        schema = __import__("json").loads((ROOT / "schema" / f"{kind}.schema.json").read_text())
        jsonschema.validate(load_yaml(str(p), p.read_text()).data, schema)
