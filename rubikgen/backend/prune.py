"""Per-layer resets nobody reads, removed from the rendered per-packet function (-O1 and up).

Each layer's `enter` clears its event flags (`ev_L`), its sequence results (`sres_L`) and its
temps (`t_L`) for every packet. Where the function never reads one of them (a layer without a
sequence has no insert filling `sres_L`; a layer without events reads no `ev_L`), the clear is
dead, but the C compiler keeps it (the locals are aggregates of a very large function): a
72-byte memset per layer per packet. The function's text is the read set: a reset goes when
every other mention of its variable is a plain store (`v = ...`, `v.f = ...`, `v[i] = ...`
starting a statement); any other mention (a test, an argument, `&v`, `|=`) is a read and keeps
it. Text-based on purpose: it sees everything the back-end and the rules hooks wrote."""

from __future__ import annotations

import re

__all__ = ["Resets"]

# a plain store to v starts here: optional member or index, then `=` (not `==`)
_STORE = re.compile(r"(?:\.\w+|\[[^\]\n]*\])?\s*=(?!=)")
# what may precede a store on its line: nothing, or the end of a statement, block or condition
_STMT_START = re.compile(r"(?:^|[;{}]|\))\s*$")


class Resets:
    """The prunable reset lines of one function: line text -> the variable it clears."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}

    def add(self, var: str, line: str) -> str:
        self.lines[line] = var
        return line

    def unread(self, body: str, var: str) -> bool:
        for m in re.finditer(rf"(?<![\w.>]){re.escape(var)}\b", body):
            ls = body.rfind("\n", 0, m.start()) + 1
            le = body.find("\n", m.end())
            le = len(body) if le < 0 else le
            if body[ls:le].strip() in self.lines:
                continue  # a reset itself
            if _STORE.match(body, m.end()) and _STMT_START.search(body[ls : m.start()]):
                continue  # a plain store
            return False
        return True

    def prune(self, body: str) -> str:
        """body without the resets of variables it never reads."""
        dead = {v for v in set(self.lines.values()) if self.unread(body, v)}
        if not dead:
            return body
        keep = [ln for ln in body.split("\n") if self.lines.get(ln.strip()) not in dead]
        return "\n".join(keep)
