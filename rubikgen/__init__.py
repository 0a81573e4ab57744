"""rubikgen: declarative protocol-stack specs compiled to C for middleboxes."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # rubikgen.Stack: the Python bindings, imported on first use (the CLI never needs them)
    if name in ("Stack", "Event", "FlowKey"):
        from rubikgen import bindings

        return getattr(bindings, name)
    raise AttributeError(f"module 'rubikgen' has no attribute {name!r}")
