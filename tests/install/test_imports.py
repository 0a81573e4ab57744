"""The package's import graph has no cycle: every import counts, at module level, inside a
function or under TYPE_CHECKING (a cycle hidden in a function is still two modules that
cannot be understood, tested or split apart one without the other)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO_ROOT

PKG = REPO_ROOT / "rubikgen"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(mods: dict[str, Path], name: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules an import statement of module `name` names."""
    if isinstance(node, ast.Import):
        raw = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = name.split(".") if mods[name].name == "__init__.py" else name.split(".")[:-1]
            pkg = pkg[: len(pkg) - node.level + 1]
            base = ".".join(pkg + ([base] if base else []))
        raw = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = []
    for m in raw:
        while m and m not in mods:
            m = m.rpartition(".")[0]
        # a module importing its own package (`from rubikgen import x`) is not an edge to it
        if m and m != name and not name.startswith(m + "."):
            out.append(m)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m].update(_targets(mods, m, node))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_detector_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    g = import_graph()
    assert "rubikgen.front.workspace" in g["rubikgen.pipeline"]  # module level
    assert "rubikgen.sema.stack" in g["rubikgen.front.workspace"]  # inside a function
    assert "rubikgen.front.document" in g["rubikgen.sema.stack"]  # under TYPE_CHECKING


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


# The checkers of sema and the expression parser: what computes the semantic model. Lowering,
# the passes and the back-ends read the model (`Compilation.resolved`, copied into the IR);
# none of them may check, resolve or parse a spec expression again, directly or through another
# module (issue 28). setup.cfg's `reads-the-model` import-linter contract says the same
# (indirect imports included); this test sees imports inside functions and under TYPE_CHECKING
# too, and names the chain.
CHECKERS = {
    "rubikgen.sema.resolve",
    "rubikgen.sema.protocol",
    "rubikgen.sema.scope",
    "rubikgen.sema.stack",
    "rubikgen.sema.symbols",
    "rubikgen.sema.udes",
    "rubikgen.sema.checksums",
    "rubikgen.sema.limits",
    "rubikgen.expr.check",
    "rubikgen.expr.parser",
    "rubikgen.front.workspace",
    # a rules file is loaded and checked in the check stage too; after it, the IR holds it
    "rubikgen.rules.check",
    "rubikgen.rules.front",
    "rubikgen.rules.model",
}
READERS = ("rubikgen.ir", "rubikgen.opt", "rubikgen.backend")


def chains_to(graph: dict[str, set[str]], src: str, targets: set[str]) -> list[list[str]]:
    """For each target `src` reaches, one import chain from `src` to it."""
    via: dict[str, str | None] = {src: None}
    todo = [src]
    while todo:
        v = todo.pop()
        for w in sorted(graph[v]):
            if w not in via:
                via[w] = v
                todo.append(w)
    out = []
    for t in sorted(targets & set(via)):
        chain = [t]
        while (up := via[chain[-1]]) is not None:
            chain.append(up)
        out.append(chain[::-1])
    return out


def test_lowering_and_backends_read_the_model_and_never_call_sema() -> None:
    g = import_graph()
    # the graph sees what lowering does read: sema's data-only result modules
    assert {"rubikgen.sema.model", "rubikgen.sema.stack_info"} <= g["rubikgen.ir.lower"]
    bad = [
        " -> ".join(c)
        for m in sorted(g)
        if m.startswith(READERS)
        for c in chains_to(g, m, CHECKERS)
    ]
    assert bad == []
    # and the check would see one: the resolve stage reaches the checkers
    assert chains_to(g, "rubikgen.sema.resolve", {"rubikgen.expr.check"})


def test_the_model_holds_no_resolver() -> None:
    # a closure over sema's scope in the model would be a sema call after the check stage that
    # no import shows: the layer's model holds data only
    from dataclasses import fields

    from rubikgen.sema.model import LayerModel, Resolution

    for cls in (LayerModel, Resolution):
        assert not [f.name for f in fields(cls) if "Callable" in str(f.type)]
        assert not [n for n, v in vars(cls).items() if isinstance(v, staticmethod | classmethod)]
