"""The eBPF target's registry: a renderer per IR node kind it renders (instrs.py)."""

from __future__ import annotations

from typing import Any

from ..registry import Registry

# the context is xcontext.XContext (typed Any here: the renderers import this module first)
EBPF: Registry[Any] = Registry("ebpf")
