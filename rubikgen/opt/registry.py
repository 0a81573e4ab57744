"""The pass registry: each pass module registers its function with ``@register(name, level)``.

A pass is a function ``Program -> bool`` (did it change anything); its docstring is its
description (``rubikgen ir --list-passes``). ``rubikgen.opt`` imports every pass module, so
``PASSES`` is complete once the package is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rubikgen.ir import Program

PassFn = Callable[[Program], bool]


@dataclass(frozen=True)
class Pass:
    name: str
    level: int  # the lowest -O level that runs it
    run: PassFn
    doc: str


PASSES: dict[str, Pass] = {}


def register(name: str, *, level: int) -> Callable[[PassFn], PassFn]:
    """Registers the decorated function as the pass `name`, run from -O`level` on."""

    def add(fn: PassFn) -> PassFn:
        if name in PASSES:
            raise ValueError(f"pass '{name}' registered twice")
        PASSES[name] = Pass(name, level, fn, fn.__doc__ or "")
        return fn

    return add


__all__ = ["PASSES", "Pass", "PassFn", "register"]
