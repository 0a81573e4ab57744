"""dead-blocks: blocks no entry reaches are removed."""

from __future__ import annotations

from rubikgen.ir import Program, prune

from .registry import register


@register("dead-blocks", level=1)
def dead_blocks(prog: Program) -> bool:
    """Blocks that no entry reaches are removed."""
    return prune(prog) > 0
