"""Tests marked `full_matrix` (the exhaustive cases of an accounting matrix, beside a fixed
sample that always runs) are left out unless the `-m` expression names the marker or
RG_FULL_MATRIX=1 is set:
`python3 -m pytest tests/test_frame_accounting.py -m full_matrix` runs only them, `-m "full_matrix
or not full_matrix"` everything."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RG_FULL_MATRIX") or "full_matrix" in (config.getoption("markexpr") or ""):
        return
    keep = [i for i in items if i.get_closest_marker("full_matrix") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
