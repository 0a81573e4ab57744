"""Shared by tests; moved from runtime/test_flood.py."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.hostile import REPO

CONN_FRAMES = 8  # frames of one normal connection (flood.connection)


def accounted(summary: dict) -> None:
    assert summary["flows_opened"] == summary["flows_closed"]
    assert summary["live_at_end"] >= 0
    for name, layer in summary["layers"].items():
        assert layer["opened"] == sum(layer["closed"].values()), name


def _flood() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flood", REPO / "bench" / "flood.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flood"] = mod
    spec.loader.exec_module(mod)
    return mod


flood = _flood()
