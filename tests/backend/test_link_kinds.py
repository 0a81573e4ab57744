"""The link kinds are one table: the C runtime's RG_LINK_KIND_TABLE (rg_api.h: the enum that
indexes rg_stack_desc.entry, and the names the driver's summary prints) is the order in which
the back-end fills that array (LINK_KINDS) and the names a stack's `entry:` accepts."""

import json
import re
from typing import get_args

from support import REPO_ROOT

from rubikgen.ir.lower import _LINK_OF_PROTOCOL, LINK_KINDS
from rubikgen.models.stack import LinkType

REPO = REPO_ROOT


def test_link_kinds_are_one_table() -> None:
    text = (REPO / "runtime-c" / "include" / "rg" / "rg_api.h").read_text()
    got = re.findall(r'X\((RG_LINK_\w+), (\d+), "(\w+)"\)', text)
    assert [int(v) for _c, v, _n in got] == list(range(len(got)))
    assert tuple(name for _c, _v, name in got) == LINK_KINDS
    assert set(get_args(LinkType)) == set(LINK_KINDS)


def _api_table() -> list[tuple[str, str, str]]:
    text = (REPO / "runtime-c" / "include" / "rg" / "rg_api.h").read_text()
    return re.findall(r'X\((RG_LINK_\w+), (\d+), "(\w+)"\)', text)


def test_the_bindings_and_the_schema_take_the_same_table() -> None:
    # the Cython bindings repeat the C enum's names (a cdef extern block must list them): in
    # the table's order, all of them
    pyx = (REPO / "rubikgen" / "bindings" / "_stack.pyx").read_text()
    assert re.findall(r"^\s+(RG_LINK_[A-Z0-9_]+)\s*$", pyx, re.M) == [
        c for c, _v, _n in _api_table()
    ]
    # the stack schema's `entry:` keys (generated from the models)
    schema = json.loads((REPO / "schema" / "stack.schema.json").read_text())
    enums = [v for v in _enums(schema) if "raw_ipv4" in v]
    assert enums and all(tuple(v) == LINK_KINDS for v in enums)
    # the link kind of each link-layer protocol (`entry: LAYER`) is one of them
    assert set(_LINK_OF_PROTOCOL.values()) <= set(LINK_KINDS)


def _enums(node: object) -> list[list[str]]:
    if isinstance(node, dict):
        out = [node["enum"]] if isinstance(node.get("enum"), list) else []
        return out + [e for v in node.values() for e in _enums(v)]
    if isinstance(node, list):
        return [e for v in node for e in _enums(v)]
    return []
