"""The semantic model (`Compilation.resolved`, rubikgen/sema/model.py): every typed expression
and statement of a layer is keyed by where the spec writes it (its document and its path in
it), never by its text, and nothing after the check stage parses, checks or resolves again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO_ROOT

from rubikgen.expr import check as expr_check
from rubikgen.expr import parser as expr_parser
from rubikgen.expr import unparse
from rubikgen.expr.ast import Name, walk
from rubikgen.expr.types import BytesT
from rubikgen.models.common import expr_text
from rubikgen.pipeline import Compilation
from rubikgen.sema import protocol as sema_protocol
from rubikgen.sema import resolve as sema_resolve
from rubikgen.sema import scope as sema_scope

STACKS = REPO_ROOT / "specs" / "stacks"


@pytest.fixture(scope="module")
def http() -> Compilation:
    # tcp_tls_http: extends tcp_tls, user-defined events, one handler's args on tcp and tcp6
    return Compilation(STACKS / "tcp_tls_http.yaml", opt_level=2)


def _at(docs: list[Any], path: tuple[str | int, ...]) -> Any:
    """The value at `path` of the first document that has it (the file as written, then
    the model with its defaults: `sequence.data` is `payload` unless written)."""
    for doc in docs:
        try:
            for p in path:
                doc = doc[p]
        except (KeyError, IndexError, TypeError):
            continue
        return doc
    raise KeyError(path)


def test_every_entry_is_keyed_by_the_place_that_writes_it(http: Compilation) -> None:
    """Each key leads, in its own document, to the text whose tree it holds: a key is a place,
    not a text (a by-text key would not name a document path at all)."""
    res = http.resolved
    stack = http.checked.model
    assert stack is not None
    stack_doc = stack.model_dump(by_alias=True)
    raw: dict[str, Any] = {}
    n = 0
    for L, lm in res.layers.items():
        proto = http.stack_info.layers[L].protocol
        if proto.file not in raw:
            raw[proto.file] = yaml.safe_load(Path(proto.file).read_text())
        docs = {
            "protocol": [raw[proto.file], proto.model.model_dump(by_alias=True)],
            "stack": [stack_doc],
        }
        for (origin, path), tree in [*lm.exprs.items(), *lm.stmts.items()]:
            text = expr_text(_at(docs[origin], path))
            parsed = (
                expr_parser.parse_expr(text)
                if (origin, path) in lm.exprs
                else expr_parser.parse_stmt(text)
            )
            assert unparse(tree) == unparse(parsed), (L, origin, path)
            n += 1
    assert n > 300  # every layer's protocol and the stack's edges, handlers and events
    kinds = {o for lm in res.layers.values() for o, _p in lm.exprs}
    assert kinds == {"protocol", "stack"}


def test_the_same_text_in_two_layers_is_two_entries_with_two_meanings(http: Compilation) -> None:
    """`ip.header.saddr` in http_req's args (layer tcp, ip bound to the ip layer) and in
    http_req6's (layer tcp6, bound to ipv6; one YAML anchor, so one text): a 4-byte and a
    16-byte address, each found at its handler's path, and each lowered with its own type."""
    res = http.resolved
    v4 = res.layers["tcp"].stack_expr(("handlers", "http_req", "args", "saddr"))
    v6 = res.layers["tcp6"].stack_expr(("handlers", "http_req6", "args", "saddr"))
    assert unparse(v4) == unparse(v6) == "ip.header.saddr"
    assert (v4.type, v6.type) == (BytesT(4), BytesT(16))
    assert isinstance(v4, Name) and isinstance(v6, Name)
    assert (v4.ref and v4.ref.owner, v6.ref and v6.ref.owner) == ("ip", "ipv6")
    # tcp.yaml's own expressions, one text at one protocol path, in the two layers
    key = ("selector", "sides", 0, 0)
    a, b = res.layers["tcp"].expr(key), res.layers["tcp6"].expr(key)
    assert unparse(a) == unparse(b) and (a.type, b.type) == (BytesT(4), BytesT(16))
    # the same text at several places of one layer is one entry per place, each at its line
    tcp = http.stack_info.layers["tcp"].protocol
    places: dict[str, list[tuple[str | int, ...]]] = {}
    for o, p in res.layers["tcp"].exprs:
        if o == "protocol":
            places.setdefault(unparse(res.layers["tcp"].expr(p)), []).append(p)
    text, paths = max(places.items(), key=lambda kv: len(kv[1]))
    assert len(paths) >= 3, text
    assert len({tcp.smap.pos(p).line for p in paths}) == len(paths)
    # lowering took each handler's from its own layer's model
    hd = http.lowered.desc
    assert hd is not None
    t4 = next(a.expr.type for a in hd.handlers["http_req"].args if a.name == "saddr")
    t6 = next(a.expr.type for a in hd.handlers["http_req6"].args if a.name == "saddr")
    assert (t4, t6) == (BytesT(4), BytesT(16))
    with pytest.raises(KeyError, match="no expression resolved"):
        res.layers["tcp"].stack_expr(("handlers", "http_req6", "args", "saddr"))


def _raise(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("sema called after the check stage")


# what computes the semantic model: parsing, checking, name resolution, the protocol check
_SEMA = [
    expr_parser.parse_expr,
    expr_parser.parse_stmt,
    expr_check.check_expr,
    expr_check.check_stmt,
    expr_check.resolve_expr,
    expr_check.resolve_stmt,
    sema_scope.ProtocolScope.resolve,
    sema_scope.ProtocolScope._resolve_all,
    sema_protocol.ExprChecker.expr,
    sema_protocol.ExprChecker.stmt,
    sema_protocol.check_protocol,
    sema_resolve.resolve_stack,
]


def test_lowering_passes_and_back_end_run_with_sema_made_to_raise(
    http: Compilation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `resolved`, sema's parsers, checkers and resolver raise (their code replaced, so
    a caller holding the function by any name is caught; the parsers' caches emptied):
    lowering, the passes and the back-end still give the same C as a compilation that could
    call them."""
    want = http.generated.files
    comp = Compilation(STACKS / "tcp_tls_http.yaml", opt_level=2)
    _ = comp.resolved
    for f in _SEMA:
        cache_clear = getattr(f, "cache_clear", None)
        if cache_clear is not None:  # an lru_cache: its function is the one to trap
            cache_clear()
            f = f.__wrapped__  # type: ignore[attr-defined]
        monkeypatch.setattr(f, "__code__", _raise.__code__)
    with pytest.raises(AssertionError, match="sema called"):
        expr_parser.parse_expr("1")  # the trap is armed
    assert comp.generated.files == want


RULES = """
rules:
  - {name: telnet, match: "tcp.dport == 23 || tcp.sport == 23", action: drop}
  - {name: web, stateful: true, match: "tcp.dport == 80", action: {rewrite: {tcp.dport: 8080}}}
  - {name: net, match: "ip.saddr == 10.0.0.0/8 && ip6.daddr != 2001:db8::1", action: count}
"""


@pytest.mark.parametrize("reload", [False, True], ids=["inline", "reload"])
def test_rules_are_checked_in_the_check_stage_and_read_from_the_ir_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reload: bool
) -> None:
    """A rules file is loaded and checked with the stack (`checked`), its errors raised there;
    after `resolved`, the rules checker, the expression parser and sema raise, and lowering
    the rules into the IR, the passes and the back-end still give the same C."""
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.rules import check as rules_check

    rp = tmp_path / "r.rules.yaml"
    rp.write_text(RULES.replace("ip6.daddr", "ipv6.daddr"))
    stack = STACKS / "tcp_ip.yaml"
    want = Compilation(stack, opt_level=1, rules=rp, rules_reload=reload).generated.files
    bad = tmp_path / "bad.rules.yaml"
    bad.write_text(RULES)  # no layer ip6
    with pytest.raises(GenerateError) as e:
        _ = Compilation(stack, opt_level=1, rules=bad).checked
    assert [d.code for d in e.value.diagnostics] == ["RG011"]
    comp = Compilation(stack, opt_level=1, rules=rp, rules_reload=reload)
    _ = comp.resolved
    traps = [*_SEMA, rules_check.load, rules_check.check, rules_check._Checker.expr,
             rules_check._Checker.field, rules_check.StackFields.of_model.__func__]  # fmt: skip
    for f in traps:
        cache_clear = getattr(f, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
            f = f.__wrapped__  # type: ignore[attr-defined]
        monkeypatch.setattr(f, "__code__", _raise.__code__)
    with pytest.raises(AssertionError, match="sema called"):
        rules_check.load(str(rp))
    assert comp.generated.files == want


def test_names_lowering_writes_are_bound_once(http: Compilation) -> None:
    # current_state, the states, event.E and the variables: bound in the resolve stage, so
    # lowering builds its PSM and event conditions without a scope
    tcp = http.resolved.layers["tcp"]
    cs = tcp.name(("current_state",))
    assert cs.ref is not None and cs.ref.kind == "builtin"
    assert {n.ref.kind for n in walk(cs) if isinstance(n, Name) and n.ref} == {"builtin"}
    with pytest.raises(KeyError, match="not bound by sema"):
        tcp.name(("perm", "no_such_variable"))
