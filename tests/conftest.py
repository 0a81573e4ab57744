"""Shared by every test folder (tests/README.md lists them).

tests/ goes first on sys.path so that the shared helpers import as `support.*` from any folder
(pytest's default import mode also does this for a rootdir conftest; said here, not relied on).
"""

import os
import sys
from pathlib import Path
from typing import Any

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from support import matrix  # noqa: E402  (needs the path above)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full-matrix",
        action="store_true",
        help="run every cell of the sampled matrices (tests marked full_matrix); tests/support/matrix.py",
    )


def pytest_configure(config: pytest.Config) -> None:
    # fixed here, before collection and before xdist starts its workers (they inherit the
    # environment), so that the controller and every worker draw the same sample
    os.environ.setdefault("RG_MATRIX_SEED", str(matrix.seed()))
    # compiled stacks by content address (rubikgen/toolchain/build.py), shared by the test
    # files, the xdist workers and successive runs: one stack at one set of flags compiles once
    os.environ.setdefault("RG_BUILD_CACHE", str(Path(_TESTS).parent / "build" / "test-cache"))
    # tshark's answers by content address (tests/support/oracle/tshark.py), shared the same way
    os.environ.setdefault(
        "RG_TSHARK_CACHE", str(Path(_TESTS).parent / "build" / "test-cache" / "tshark")
    )
    if config.getoption("--full-matrix"):
        os.environ["RG_FULL_MATRIX"] = "1"


def pytest_report_header(config: pytest.Config) -> str:
    what = "full" if matrix.full() else "sampled (--full-matrix for every cell)"
    return f"matrices: {what}, RG_MATRIX_SEED={matrix.seed()}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # the header is hidden under -q: the seed again at the end, where a failure is read
    terminalreporter.write_line(pytest_report_header(terminalreporter.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if matrix.full() or "full_matrix" in (config.option.markexpr or ""):
        return
    out = [i for i in items if i.get_closest_marker("full_matrix") is not None]
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = [i for i in items if i.get_closest_marker("full_matrix") is None]
