"""The built-in values (`payload`, `sdu`, `current_state`, ...) are one table
(sema/builtins.py BUILTIN_VALUE_TABLE): the scope types them from it, the reserved names and
lowering's resources come from it, the language reference documents each of them and the C
back-end renders each of them."""

from __future__ import annotations

import re

import pytest
from support import REPO_ROOT

from rubikgen.pipeline import Compilation
from rubikgen.sema.builtins import BUILTIN_VALUE_TABLE, BUILTIN_VALUES, FRAME_VALUES, Context
from rubikgen.sema.scope import ProtocolScope

REPO = REPO_ROOT
ANY = Context("any context", virtual=True)  # every context flag open


@pytest.fixture(scope="module")
def tcp_scope() -> ProtocolScope:
    # tcp: bidirectional, with a psm and a sequence: every built-in value exists there
    info = Compilation(REPO / "specs" / "stacks" / "tcp_ip.yaml").stack_info
    li = info.layers["tcp"]
    params = {p: info.layers[t].protocol for p, t in li.bindings.items()}
    return ProtocolScope(li.protocol, params, ANY, dict(li.bindings))


@pytest.fixture(scope="module")
def stream_scope() -> ProtocolScope:
    # tls_stream (tcp_tls): a protocol with framing, where the framing values exist
    info = Compilation(REPO / "specs" / "stacks" / "tcp_tls.yaml").stack_info
    li = info.layers["tstream"]
    params = {p: info.layers[t].protocol for p, t in li.bindings.items()}
    return ProtocolScope(li.protocol, params, ANY, dict(li.bindings))


def test_the_scope_types_every_value_of_the_table(
    tcp_scope: ProtocolScope, stream_scope: ProtocolScope
) -> None:
    for name, bv in BUILTIN_VALUE_TABLE.items():
        # tcp has no framing: its values are typed in tls_stream's scope (and absent in tcp's)
        scope = stream_scope if name in FRAME_VALUES else tcp_scope
        assert (tcp_scope.resolve((name,)) is None) == (name in FRAME_VALUES), name
        r = scope.resolve((name,))
        assert r is not None, name
        assert (r.kind, r.type) == ("builtin", bv.type), name
    assert set(BUILTIN_VALUES) == set(BUILTIN_VALUE_TABLE) | {"true", "false"}


def test_values_needing_a_psm_or_two_directions_are_absent_without() -> None:
    info = Compilation(REPO / "specs" / "stacks" / "tcp_ip.yaml").stack_info
    eth = info.layers["eth"]  # no instance: no direction, and no psm
    assert not eth.protocol.bidirectional and not eth.protocol.states
    scope = ProtocolScope(eth.protocol, {}, ANY, {})
    absent = {n for n in BUILTIN_VALUE_TABLE if scope.resolve((n,)) is None}
    needs = {n for n, v in BUILTIN_VALUE_TABLE.items() if v.needs in ("direction", "psm")}
    assert absent == needs | set(FRAME_VALUES)  # eth has no framing either
    assert absent == {"to_active", "to_passive", "current_state", "frame_unit", "frame_error"}


def test_every_value_is_documented_and_rendered() -> None:
    doc = (REPO / "docs" / "spec-language.md").read_text(encoding="utf-8")
    layer_c = (REPO / "rubikgen" / "backend" / "layer_c.py").read_text(encoding="utf-8")
    for name in BUILTIN_VALUE_TABLE:
        assert f"`{name}`" in doc, name
        # the back-end's renderer of built-in names tests each by name
        assert re.search(rf"""["']{name}["']""", layer_c), name
