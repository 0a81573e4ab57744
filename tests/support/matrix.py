"""Exhaustive matrices sampled per run (issue 28 item 6).

A matrix test (captures x stacks, passes x captures, ...) runs a sample of its cells on each run
and the rest under the `full_matrix` marker, which tests/conftest.py deselects unless asked
(`--full-matrix`, or `-m full_matrix` for the unsampled cells alone). The sample is drawn from
RG_MATRIX_SEED, by default the date (YYYYMMDD, UTC), so successive days cover the whole matrix;
pytest's header prints the seed and `RG_MATRIX_SEED=N` reproduces a run's sample exactly.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest


def seed() -> int:
    """The run's seed; tests/conftest.py fixes it in the environment before collection, so
    every xdist worker draws the same sample."""
    return int(os.environ.get("RG_MATRIX_SEED") or datetime.now(UTC).strftime("%Y%m%d"))


def full() -> bool:
    return os.environ.get("RG_FULL_MATRIX") == "1"


def sample(items: Iterable[Any], k: int, *, name: str) -> list[Any]:
    """k of items (all when the full matrix runs), the same for a seed and a name; in the
    items' own order so that test ids keep their order."""
    pool = list(items)
    if full() or len(pool) <= k:
        return pool
    chosen = set(random.Random(f"{seed()}:{name}").sample(range(len(pool)), k))
    return [x for i, x in enumerate(pool) if i in chosen]


def params(items: Sequence[Any], k: int, *, name: str, always: Iterable[Any] = ()) -> list[Any]:
    """pytest parameters for every item: a sample of k (plus `always`) as they are, the others
    marked `full_matrix`."""
    keep = set(map(repr, sample(items, k, name=name))) | set(map(repr, always))
    return [
        x if repr(x) in keep else pytest.param(*_args(x), marks=pytest.mark.full_matrix)
        for x in items
    ]


def _args(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)
