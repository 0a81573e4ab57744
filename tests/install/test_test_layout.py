"""The test suite's own layout (tests/README.md): every test module lives in one of the layer
folders, shared code lives in tests/support, and no test module imports another test module —
an import between test files runs the other file's module-level code (builds, captures) in the
wrong place and breaks when either moves, as it once broke CI."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO_ROOT

TESTS = REPO_ROOT / "tests"
FOLDERS = {"front", "ir", "opt", "backend", "runtime", "e2e", "install"}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "specs" not in p.relative_to(TESTS).parts)


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every import, at any depth (one inside a function counts too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("import_module", "spec_from_file_location")
        ):
            # importlib by name or by path: the argument names the module or its file
            out += [
                (node.lineno, a.value)
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
    return out


def _is_test_module(name: str) -> bool:
    parts = name.replace("/", ".").split(".")
    return any(p.startswith("test_") or p == "conftest" for p in parts)


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in [*_test_modules(), *TESTS.rglob("conftest.py"), *(TESTS / "support").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, name in _imported(tree):
            if _is_test_module(name):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{line}: imports {name}")
    assert not offenders, "move what is shared into tests/support:\n" + "\n".join(offenders)


def test_the_check_sees_each_kind_of_import() -> None:
    """The scan above finds a test-module import written in each way it can be written."""
    src = (
        "import test_a\n"
        "from tests.test_b import x\n"
        "def f():\n"
        "    from test_c import y\n"
        "import importlib\n"
        "importlib.import_module('test_d')\n"
        "from support.sources import read_pcap\n"
    )
    found = {n for _, n in _imported(ast.parse(src)) if _is_test_module(n)}
    assert {"test_a", "tests.test_b", "test_c", "test_d"} <= found
    assert not any(n.startswith("support") for n in found)


def test_every_test_module_is_in_a_layer_folder() -> None:
    misplaced = [
        str(p.relative_to(TESTS))
        for p in _test_modules()
        if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in FOLDERS
    ]
    assert not misplaced, f"test modules outside {sorted(FOLDERS)}: {misplaced}"


def test_basenames_are_unique() -> None:
    """Folders have no __init__.py (pytest's rootdir import), so two test files of one name in
    two folders would collide as one module."""
    names = [p.name for p in _test_modules()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_readme_lists_the_folders() -> None:
    text = (TESTS / "README.md").read_text(encoding="utf-8")
    missing = [f for f in sorted(FOLDERS | {"support"}) if f"`{f}/`" not in text]
    assert not missing, f"tests/README.md does not describe {missing}"
