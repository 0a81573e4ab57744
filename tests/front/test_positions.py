"""Positions inside values: expressions written over several lines, with quotes or escapes, in
YAML and in TOML, map back to the exact source column (rubikgen/front/source.py)."""

from __future__ import annotations

import pytest

from rubikgen.front.source import load_text


def _at(file: str, text: str, path: tuple[str | int, ...], needle: str) -> tuple[int, int]:
    """Line and column the source map gives for `needle` inside the string value at path."""
    loaded = load_text(file, text)
    assert loaded.data is not None, [d.message for d in loaded.diags]
    value = loaded.data
    for p in path:
        value = value[p]
    d = loaded.smap.diag(
        "RG011",
        "x",
        path,
        offset=(value.index(needle), value.index(needle) + len(needle)),
        text=value,
    )
    return d.line, d.col


def _find(text: str, needle: str) -> tuple[int, int]:
    for n, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return n, line.index(needle) + 1
    raise AssertionError(needle)


@pytest.mark.parametrize(
    "text",
    [
        'when: "a && header.zz"\n',
        "when: 'a && header.zz'\n",
        "when: a && header.zz\n",
        "when: 'it''s && header.zz'\n",
        'when: "a\\t&& header.zz"\n',
        'when: "a \\u00e9 && header.zz"\n',
        "when: >-\n  a &&\n  b && header.zz\n",
        "when: |-\n  a &&\n  b && header.zz\n",
        "when: a &&\n  b &&\n      header.zz\n",
        'when: "a &&\n  b && header.zz"\n',
        'when: "a && \\\n  header.zz"\n',
        "x: 1\nwhen: >-  # a comment\n  a && header.zz\n",
    ],
)
def test_yaml_expression_columns(text: str) -> None:
    assert _at("t.yaml", text, ("when",), "header.zz") == _find(text, "header.zz")


@pytest.mark.parametrize(
    "text, path",
    [
        ('when = "a && header.zz"\n', ("when",)),
        ("when = 'a && header.zz'\n", ("when",)),
        ('t = { x = 1, when = "a && header.zz" }\n', ("t", "when")),
        ('t = [\n  "a",\n  "a && header.zz",\n]\n', ("t", 1)),
        ('[[ev.do]]\nx = "a"\n[[ev.do]]\nwhen = "header.zz"\n', ("ev", "do", 1, "when")),
        ('[a]\nb.c = { d = ["x", "y && header.zz"] }\n', ("a", "b", "c", "d", 1)),
        ('when = """\na &&\n  header.zz"""\n', ("when",)),
        ("when = '''a &&\nheader.zz'''\n", ("when",)),
        ('"quoted key" = "a && header.zz"\n', ("quoted key",)),
    ],
)
def test_toml_expression_columns(text: str, path: tuple[str | int, ...]) -> None:
    assert _at("t.toml", text, path, "header.zz") == _find(text, "header.zz")


def test_toml_keys_and_tables() -> None:
    text = '[layouts.hdr]\nkind = 8\n\n[[events.e.do]]\ncallback = "cb"\n'
    loaded = load_text("t.toml", text)
    smap = loaded.smap
    assert (smap.key_pos(("layouts", "hdr")).line, smap.key_pos(("layouts", "hdr")).col) == (1, 10)
    assert (
        smap.pos(("layouts", "hdr", "kind")).line,
        smap.pos(("layouts", "hdr", "kind")).col,
    ) == (2, 8)
    assert smap.pos(("events", "e", "do", 0, "callback")).line == 5


@pytest.mark.parametrize(
    "text, code, line, col",
    [
        ("a = 1\na = 2\n", "RG002", 2, 1),
        ("[a]\nb = 1\n[a]\n", "RG002", 3, 1),
        ("a = {b = 1, b = 2}\n", "RG002", 1, 13),
        ("a = [\n", "RG008", 1, 6),
        ('a = "x\n', "RG008", 1, 7),
    ],
)
def test_toml_errors(text: str, code: str, line: int, col: int) -> None:
    loaded = load_text("t.toml", text)
    assert [(d.code, d.line, d.col) for d in loaded.diags] == [(code, line, col)]
