"""The gate never waves a broken document through (issue 26): mutants of every rubikgen
document under specs/ and examples/ (and the rules example of docs/examples/), each
certainly invalid, must make `rubikgen validate` exit 1 with an error at file:line:col of the
mutated file: never exit 0, never a traceback, never RG900/RG901.

The mutants (seeded: the same every run, and bounded):
* garbage: random bytes, with a 0xff byte (never UTF-8); and random words (a scalar, not a
  mapping);
* a syntax break: `key: [unclosed, {x: ` or an unclosed quote inserted at a random line;
* a truncation at a random offset;
  for these two, PyYAML (safe_load) must refuse the mutant too, so that it is certainly
  not YAML, whatever rubikgen's loader thinks (positions are retried until it does);
* an undefined identifier: a header field no layout has (protocols), a layer no stack has
  (stacks' edges, test vectors' expectations), a stack file that does not exist (test
  vectors), an NF no one ships (chains), a layer no stack has (rules' match);
* an unknown key at the top level, where every document model forbids extra keys.
For identifiers and keys the error must be on the mutated line.

The validator runs in this process (`rubikgen.cli.main`), on a copy of the tree with a `.git`
of its own (the references stay inside that repository root); a few cases also run it as a
subprocess, the way pre-commit does.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import REPO_ROOT
from support.validate import rubikgen_fails, validate_fails

from rubikgen.cli import main
from rubikgen.front.validate import kind_of

REPO = REPO_ROOT
SEED = 26
TREES = ("specs", "examples", "docs/examples")
UNKNOWN = "zz_undefined"


@dataclass
class Mutant:
    what: str
    text: bytes
    line: int | None = None  # the line the error must be on (None: anywhere in the file)


def documents() -> list[Path]:
    files = [
        p
        for t in TREES
        for p in sorted((REPO / t).rglob("*"))
        if p.suffix in (".yaml", ".yml", ".toml")
    ]
    return [p.relative_to(REPO) for p in files]


def _kind(rel: Path) -> str:
    data = yaml.safe_load((REPO / rel).read_text(encoding="utf-8"))
    kind = kind_of(str(rel), data)
    assert kind is not None, rel
    return kind


def _not_yaml(text: str) -> bool:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return True
    return not isinstance(data, dict)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _syntax(rng: random.Random, text: str) -> Mutant:
    lines = _lines(text)
    for _ in range(200):
        i = rng.randrange(len(lines) + 1)
        ind = re.match(r"[ ]*", lines[i] if i < len(lines) else "")
        pad = ind.group(0) if ind else ""
        ins = rng.choice([f"{pad}bad: [unclosed, {{x: \n", f'{pad}bad: "unclosed\n'])
        out = "".join(lines[:i] + [ins] + lines[i:])
        if _not_yaml(out):
            return Mutant("syntax", out.encode())
    raise AssertionError("no syntax break PyYAML refuses")


def _truncation(rng: random.Random, text: str) -> Mutant:
    for _ in range(500):
        out = text[: rng.randrange(1, len(text))]
        if _not_yaml(out):
            return Mutant("truncation", out.encode())
    raise AssertionError("no truncation PyYAML refuses")


def _garbage(rng: random.Random) -> list[Mutant]:
    raw = bytearray(rng.randbytes(300))
    raw[rng.randrange(len(raw))] = 0xFF
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(40))
    return [Mutant("garbage bytes", bytes(raw)), Mutant("garbage words", words.encode())]


def _values(
    node: yaml.Node, key: str | None = None
) -> Iterator[tuple[str | None, yaml.ScalarNode]]:
    """Every one-line scalar of the document with the key it is the value of (doc strings and
    comments are no expressions)."""
    if isinstance(node, yaml.ScalarNode):
        if node.start_mark.line == node.end_mark.line and key != "doc":
            yield key, node
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _values(v, k.value if isinstance(k, yaml.ScalarNode) else None)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            yield from _values(v, key)


def _replace_one(
    rng: random.Random, text: str, keys: tuple[str, ...] | None, pattern: str, repl: str, what: str
) -> Mutant | None:
    """`repl` for group 1 of `pattern` in one scalar, picked at random, that is the value of
    one of `keys` (any key when None)."""
    spots = []
    for key, node in _values(yaml.compose(text)):
        if keys is None or key in keys:
            a, b = node.start_mark.index, node.end_mark.index
            spots += [(a + m.start(1), a + m.end(1)) for m in re.finditer(pattern, text[a:b])]
    if not spots:
        return None
    a, b = rng.choice(spots)
    return Mutant(what, (text[:a] + repl + text[b:]).encode(), text.count("\n", 0, a) + 1)


Alt = tuple[tuple[str, ...] | None, str, str, str]
#: per kind, ways to make an identifier undefined, tried in order until one applies
IDENTIFIERS: dict[str, list[Alt]] = {
    "protocol": [
        # a header field no layout declares, in an expression
        (None, r"\bheader\.([A-Za-z_]\w*)", UNKNOWN, "undefined header field"),
        # the header made of a layout that does not exist
        (("header",), r"^([A-Za-z_]\w*)$", UNKNOWN, "undefined layout"),
    ],
    # an edge from a layer the stack does not have
    "stack": [
        (("from",), r"^([A-Za-z_]\w*)$", UNKNOWN, "undefined layer"),
        # a handler on a layer the stack does not have; a base stack that does not exist
        (("layer",), r"^([A-Za-z_]\w*)$", UNKNOWN, "undefined layer"),
        (("extends",), r"^(.+)$", f"{UNKNOWN}.yaml", "undefined base stack"),
    ],
    "chain": [(("nf",), r"^([A-Za-z_]\w*)$", UNKNOWN, "undefined NF")],
    # a field of a layer the stack does not have
    "rules": [(("match",), r"\b([a-z]\w*)\.[a-z]", UNKNOWN, "undefined layer")],
    "test": [(("spec",), r"^(.+)$", f"{UNKNOWN}.yaml", "undefined stack")],
}
WHATS = {alt[3] for alts in IDENTIFIERS.values() for alt in alts}


def _unknown_key(rng: random.Random, text: str) -> Mutant:
    lines = _lines(text)
    tops = [i for i, ln in enumerate(lines) if re.match(r"[A-Za-z_]\w*\s*:", ln)]
    i = rng.choice(tops)
    out = "".join(lines[:i] + [f"{UNKNOWN}_key: 1\n"] + lines[i:])
    return Mutant("unknown top-level key", out.encode(), i + 1)


def mutants(rel: Path) -> Iterator[Mutant]:
    rng = random.Random(f"{SEED}:{rel}")
    text = (REPO / rel).read_text(encoding="utf-8")
    yield from _garbage(rng)
    yield _syntax(rng, text)
    yield _truncation(rng, text)
    kind = _kind(rel)
    ident = next(
        (m for alt in IDENTIFIERS[kind] if (m := _replace_one(rng, text, *alt)) is not None), None
    )
    assert ident is not None, f"{rel}: no identifier to break"
    yield ident
    if kind == "test":  # a layer no stack has, in an expectation
        lay = _replace_one(rng, text, ("layer",), r"^(\w+)$", UNKNOWN, "undefined layer")
        if lay is not None:
            yield lay
    yield _unknown_key(rng, text)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mutants")
    (root / ".git").mkdir()  # the repository root of the copy
    for t in TREES:
        shutil.copytree(REPO / t, root / t)
    return root


def _validate(
    capsys: pytest.CaptureFixture[str], target: Path
) -> tuple[int, list[dict[str, object]]]:
    capsys.readouterr()
    rc = main(["validate", "--format", "json", str(target)])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else []


def test_the_stock_documents_are_valid(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The unmutated copies pass (so every failure below is the mutation's), and every kind is
    among them."""
    kinds = {_kind(rel) for rel in documents()}
    assert kinds == {"protocol", "stack", "rules", "chain", "test"}
    for t in TREES:
        rc, diags = _validate(capsys, tree / t)
        assert (rc, diags) == (0, []), (t, diags)


def test_every_mutant_fails_at_its_place(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tried: dict[str, int] = {}
    for rel in documents():
        target = tree / rel
        original = target.read_bytes()
        try:
            for m in mutants(rel):
                target.write_bytes(m.text)
                rc, diags = _validate(capsys, target)
                label = f"{rel} ({m.what})"
                assert rc == 1, (label, rc, diags)
                codes = {d["code"] for d in diags}
                assert not codes & {"RG900", "RG901"}, (label, diags)
                mine = [
                    d
                    for d in diags
                    if d["severity"] == "error"
                    and Path(str(d["file"])).resolve() == target.resolve()
                ]
                assert mine, (label, diags)
                nlines = m.text.count(b"\n") + 1
                assert all(
                    1 <= int(str(d["line"])) <= nlines and int(str(d["col"])) >= 1 for d in mine
                ), (label, mine)
                if m.line is not None:
                    assert any(d["line"] == m.line for d in mine), (label, m.line, mine)
                tried[m.what] = tried.get(m.what, 0) + 1
        finally:
            target.write_bytes(original)
    # nothing skipped its way through: each kind of mutant was made, for every document
    n = len(documents())
    for what in ("garbage bytes", "garbage words", "syntax", "truncation", "unknown top-level key"):
        assert tried[what] == n, tried
    assert sum(tried.get(w, 0) for w in WHATS) >= n


def test_mutants_in_a_walk_fail_as_a_subprocess(tree: Path) -> None:
    """What the pre-commit hook and CI run: a directory walk in a new process, exit 1 with
    file:line:col, no traceback. The failures of the issue: a stack overwritten with garbage,
    a syntax error in a test vector."""
    stack = tree / "specs" / "stacks" / "sctp.yaml"
    vector = tree / "specs" / "tests" / "gtp.test.yaml"
    originals = {p: p.read_bytes() for p in (stack, vector)}
    try:
        stack.write_bytes(random.Random(SEED).randbytes(300))
        lines = originals[vector].decode().splitlines(keepends=True)
        vector.write_text(
            "".join(lines[:2] + ["  bad: [unclosed, {x: \n"] + lines[3:]), encoding="utf-8"
        )
        out = validate_fails("--strict", str(tree / "specs"))
        for p in (stack, vector):
            assert re.search(rf"{re.escape(str(p))}:\d+:\d+: error\[RG00\d\]", out), out
    finally:
        for p, b in originals.items():
            p.write_bytes(b)


def test_a_lookup_into_a_table_of_other_key_sizes_fails_in_validate(
    tree: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A lookup's key sizes are checked once the stack binds its layers (issue 27): tcp_ip's
    IPv4 quote (icmp_tcp, 4-byte addresses) bound to the TCP-over-IPv6 table (tcp6, 16-byte
    ones) is RG029 at the binding, naming both protocols' lines; `build` says the same, no
    internal error from the C back-end."""
    stack = tree / "specs" / "stacks" / "tcp_ip.yaml"
    original = stack.read_text(encoding="utf-8")
    good = "args: {ip: icmp_ip, flow: tcp, icmp: icmp, outer: ip}"
    assert original.count(good) == 1
    line = original[: original.index(good)].count("\n") + 1
    try:
        stack.write_text(original.replace(good, good.replace("flow: tcp,", "flow: tcp6,")))
        rc, diags = _validate(capsys, stack)
        assert rc == 1, diags
        errs = [d for d in diags if d["code"] == "RG029"]
        assert len(errs) == 1, diags
        d = errs[0]
        assert Path(str(d["file"])).resolve() == stack.resolve() and d["line"] == line, d
        quote = (tree / "specs" / "protocols" / "icmp_quote.yaml").read_text(encoding="utf-8")
        qline = quote.splitlines().index("    - [ip.header.saddr, header.sport]") + 1
        msg = str(d["message"])
        assert f"icmp_quote.yaml:{qline}" in msg and "4 bytes" in msg and "16 bytes" in msg, d
        out = rubikgen_fails("build", str(stack), "-o", str(tmp_path / "b"))
        assert f"{stack}:{line}:" in out and "error[RG029]" in out, out
    finally:
        stack.write_text(original, encoding="utf-8")
    rc, diags = _validate(capsys, stack)
    assert (rc, diags) == (0, []), diags
