"""Property tests: mutated valid specs never crash the validator.

Whatever the mutation (keys deleted, values swapped for other types, identifiers misspelled,
YAML text broken), `rubikgen validate` exits 0, 1 or 3, never prints a traceback, and every
diagnostic has a line and a column.
"""

from __future__ import annotations

import copy
import io
import json
import random
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO_ROOT

from rubikgen.cli import main

ROOT = REPO_ROOT
PROTOCOLS = sorted((ROOT / "specs" / "protocols").glob("*.yaml"))
STACKS = sorted((ROOT / "specs" / "stacks").glob("*.yaml"))
SPECS = PROTOCOLS + STACKS

JUNK: list[Any] = [
    None,
    0,
    -1,
    2**70,
    3.5,
    True,
    "",
    "x",
    "header.nope",
    "1 +",
    [],
    {},
    [1, [2]],
    {"a": {"b": None}},
]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, prefix + (i,))
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        data = data[p]
    return data


def mutate(data: Any, rnd: random.Random, n: int) -> Any:
    data = copy.deepcopy(data)
    for _ in range(n):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = rnd.choice(paths)
        parent = _get(data, path[:-1])
        key = path[-1]
        op = rnd.randrange(4)
        if op == 0:  # delete
            del parent[key]
        elif op == 1:  # swap type
            parent[key] = copy.deepcopy(rnd.choice(JUNK))
        elif op == 2:  # misspell identifiers in strings
            v = parent[key]
            if isinstance(v, str) and v:
                i = rnd.randrange(len(v))
                parent[key] = v[:i] + rnd.choice("xq_.!(") + v[i + 1 :]
            elif isinstance(parent, dict) and isinstance(key, str) and key:
                parent[key + "x"] = parent.pop(key)
        else:  # duplicate a sibling into a list / mapping
            v = parent[key]
            if isinstance(parent, list):
                parent.insert(rnd.randrange(len(parent) + 1), copy.deepcopy(v))
            else:
                parent[f"{key}_copy"] = copy.deepcopy(v)
    return data


def run_validate(path: Path) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["validate", "--format", "json", str(path)])
    return code, json.loads(out.getvalue() or "[]"), err.getvalue()


def check(path: Path) -> None:
    code, diags, err = run_validate(path)
    assert code in (0, 1, 3), code
    assert "Traceback" not in err
    for d in diags:
        assert d["line"] >= 1 and d["col"] >= 1, d
    assert code != 3, diags


settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("ci")


@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, 10_000), n=st.integers(1, 4))
@settings(max_examples=150)
def test_mutated_documents(tmp_path_factory: Any, seed: int, which: int, n: int) -> None:
    src = SPECS[which % len(SPECS)]
    data = yaml.safe_load(src.read_text())
    mutated = mutate(data, random.Random(seed), n)
    d = tmp_path_factory.mktemp("m")
    # Stacks refer to protocols by relative path: keep the layout.
    target = d / src.parent.name / src.name
    target.parent.mkdir(parents=True)
    (d / "protocols").mkdir(exist_ok=True)
    for p in PROTOCOLS:
        if p != src:
            (d / "protocols" / p.name).write_text(p.read_text())
    target.write_text(yaml.safe_dump(mutated, sort_keys=False))
    check(target)


@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, 10_000))
@settings(max_examples=100)
def test_broken_yaml_text(tmp_path_factory: Any, seed: int, which: int) -> None:
    src = SPECS[which % len(SPECS)]
    text = src.read_text()
    rnd = random.Random(seed)
    chars = list(text)
    for _ in range(rnd.randint(1, 5)):
        i = rnd.randrange(len(chars))
        chars[i] = rnd.choice(
            ["\t", ":", "- ", "{", "]", "&a ", "*a", "\x00", "'", '"', "\n  ", "#", "!!binary "]
        )
    d = tmp_path_factory.mktemp("b")
    target = d / src.name
    target.write_text("".join(chars))
    check(target)


@given(st.binary(max_size=400))
@settings(max_examples=100)
def test_binary_garbage(tmp_path_factory: Any, blob: bytes) -> None:
    target = tmp_path_factory.mktemp("g") / "garbage.yaml"
    target.write_bytes(blob)
    check(target)


def test_hostile_documents(tmp_path: Path) -> None:
    cases = {
        "empty.yaml": "",
        "tabs.yaml": "protocol: x\n\tlayouts: {}\n",
        "dup.yaml": "protocol: x\nprotocol: y\n",
        "bomb.yaml": "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
        "huge.yaml": "protocol: x\nlayouts: {a: {f: 99999999999999999999999999999999999}}\nheader: [a]\n",
        "deep.yaml": "protocol: x\nheader:\n"
        + "".join("  " * i + "- if: '1'\n" + "  " * i + "  then:\n" for i in range(1, 60)),
        "nested.yaml": "[" * 3000 + "]" * 3000,
        "aliases.yaml": "protocol: &p x\nlayouts: &l {a: {f: 8}}\nheader: [a]\nperm: *l\n",
        "multi.yaml": "protocol: x\n---\nstack: y\n",
        "list.yaml": "- protocol: x\n",
        "toml.toml": "protocol = \n",
    }
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        check(p)
