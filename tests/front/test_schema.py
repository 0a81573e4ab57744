"""The committed JSON Schemas match the models, and every stock spec names its schema."""

from __future__ import annotations

from pathlib import Path

from support import REPO_ROOT

from rubikgen.front.schema_gen import SCHEMAS, schema_text

ROOT = REPO_ROOT


def _doc_kind(p: Path) -> str:
    """The document kind of a file under specs/ (test vectors: *.test.yaml)."""
    if p.name.endswith(".test.yaml"):
        return "spectest"
    return "stack" if p.parent.name == "stacks" else "protocol"


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
        kind = _doc_kind(p)
        assert first == f"# yaml-language-server: $schema=../../schema/{kind}.schema.json", p


def test_schema_accepts_the_stock_specs() -> None:
    """The generated schema is usable by editors: every stock spec validates against it."""
    import jsonschema  # type: ignore[import-untyped]

    from rubikgen.front.source import load_yaml

    for p in sorted((ROOT / "specs").rglob("*.yaml")):
        kind = _doc_kind(p)
        schema = __import__("json").loads((ROOT / "schema" / f"{kind}.schema.json").read_text())
        jsonschema.validate(load_yaml(str(p), p.read_text()).data, schema)


# ---------------------------------------------------------------------------------------------
# The schema rejects what is structurally wrong, and `validate` agrees
# ---------------------------------------------------------------------------------------------

#: Diagnostics about a document's structure: what a JSON Schema can express.
STRUCTURE_CODES = {"RG003", "RG004", "RG005", "RG006"}
#: Diagnostics about the text itself (syntax, encoding, size): no document reaches the schema.
TEXT_CODES = {"RG001", "RG002", "RG008", "RG009"}
ERRORS = ROOT / "tests" / "specs" / "errors"
#: Corpus documents whose structure code depends on another key's value, which the schema does
#: not express: it accepts them, `validate` reports the code.
CONTEXTUAL = {
    "RG006_early_byte_sequence.yaml": "`early` is allowed with `unit: message` only",
    "RG006_edge_input.yaml": "`input` is allowed on self-loops (from == to) only",
    "RG006_input_not_self_loop.yaml": "`input` is allowed on self-loops (from == to) only",
}


def _schemas() -> dict[str, dict]:
    import json

    return {k: json.loads((ROOT / "schema" / f"{k}.schema.json").read_text()) for k in ("protocol", "stack", "chain")}  # fmt: skip


def _schema_errors(doc: object) -> dict[str, str | None]:
    """Per schema, the first violation's message, or None when the document is valid."""
    import jsonschema

    out: dict[str, str | None] = {}
    for kind, schema in _schemas().items():
        err = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(doc)
        )
        out[kind] = None if err is None else err.message
    return out


def _kind(doc: object) -> str | None:
    if isinstance(doc, dict):
        for k in ("protocol", "stack", "chain"):  # a chain file: NFs (rubikgen/front/chain.py)
            if k in doc:
                return k
    return None


def _validate_codes(path: Path) -> set[str]:
    from rubikgen.front.chain import check_chain_file, is_chain_document
    from rubikgen.front.source import load_text
    from rubikgen.front.workspace import Workspace

    if is_chain_document(load_text(str(path), path.read_text()).data):
        return {d.code for d in check_chain_file(str(path)).diags if d.severity == "error"}
    ws = Workspace()
    ws.check(str(path))
    return {d.code for d in ws.all_diagnostics() if d.file.endswith(path.name) and d.severity == "error"}  # fmt: skip


def _corpus() -> list[Path]:
    return sorted(p for p in ERRORS.iterdir() if p.suffix in (".yaml", ".toml"))


def _expected_codes(path: Path) -> set[str]:
    import re

    pat = re.compile(r"^#\s*expect:\s*(RG\d{3})\b")
    return {
        m[1] for line in path.read_text(errors="replace").splitlines() if (m := pat.match(line))
    }


def test_schema_rejects_the_structural_errors_of_the_corpus() -> None:
    """Each corpus document whose expected diagnostic is a structure violation (missing or
    unknown key, wrong shape, neither protocol nor stack) is rejected by the schema of its kind
    (both schemas when it is neither), and `validate` reports that diagnostic. Every other
    corpus document that parses is structurally valid: the schema accepts it and leaves the rest
    to `validate`, which reports no structure code for it either."""
    from rubikgen.front.source import load_text

    structural = semantic = 0
    for path in _corpus():
        want = _expected_codes(path)
        if want & TEXT_CODES:
            continue  # not a document: the YAML/TOML reader stops first
        doc = load_text(str(path), path.read_text()).data
        errors = _schema_errors(doc)
        kind = _kind(doc)
        got = _validate_codes(path)
        if path.name in CONTEXTUAL:
            assert kind is not None and errors[kind] is None, (path.name, errors)
            assert want & STRUCTURE_CODES <= got, (path.name, got)
        elif want & STRUCTURE_CODES:
            structural += 1
            kinds = [kind] if kind else ["protocol", "stack"]
            for k in kinds:
                assert errors[k] is not None, f"{path.name}: the {k} schema accepts it"
            assert want & STRUCTURE_CODES <= got, (path.name, got)
        else:
            semantic += 1
            assert kind is not None and errors[kind] is None, (path.name, errors)
            assert not got & STRUCTURE_CODES, (path.name, got)
    assert structural >= 5 and semantic >= 40, (structural, semantic)


def _mutations(doc: dict) -> list[tuple[str, dict, str]]:
    """Structurally broken copies of a stock spec: (what, document, the code validate gives)."""
    import copy

    kind = _kind(doc)
    out = []
    d = copy.deepcopy(doc)
    d["layoutz" if kind == "protocol" else "layerz"] = {}
    out.append(("unknown key", d, "RG005"))
    d = copy.deepcopy(doc)
    # a stack that extends another needs neither entry nor layers: without its base, both
    del d[("extends" if "extends" in d else "layers") if kind == "stack" else "protocol"]
    out.append(("missing key", d, "RG004" if kind == "stack" else "RG003"))
    d = copy.deepcopy(doc)
    d["edges" if kind == "stack" else "header"] = "not-a-list"
    out.append(("wrong shape", d, "RG006"))
    return out


def test_schema_and_validate_reject_broken_stock_specs(tmp_path: Path) -> None:
    """Every stock spec, broken in three structural ways, is rejected by its schema and by
    `validate` with the matching code."""
    import json
    import shutil

    from rubikgen.front.source import load_yaml

    specs = tmp_path / "specs"  # a copy: relative protocol paths resolve as in the original
    shutil.copytree(ROOT / "specs", specs)
    n = 0
    for p in sorted(specs.rglob("*.yaml")):
        if p.name.endswith(".test.yaml"):
            continue  # test vectors: tests/e2e/test_spectest.py
        doc = load_yaml(str(p), p.read_text()).data
        for what, bad, code in _mutations(doc):
            kind = _kind(bad)
            errors = _schema_errors(bad)
            for k in [kind] if kind else ["protocol", "stack"]:
                assert errors[k] is not None, f"{p.name} ({what}): the {k} schema accepts it"
            q = p.parent / f"broken-{p.stem}.yaml"
            q.write_text(json.dumps(bad))  # JSON is YAML
            assert code in _validate_codes(q), f"{p.name} ({what}): validate misses {code}"
            n += 1
    assert n >= 60
