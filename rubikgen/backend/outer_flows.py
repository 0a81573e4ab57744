"""Instance tables of a tunnel's outer layers: looked up through a last-hit memo.

A layer with an instance table under a tunnel (GTP's UDP, with IP again above it) holds the
outer flow of every flow the tunnel carries: the packets of a tunnel share its instance, so
consecutive packets look the same key up far more often than at an inner layer, where the
flows interleave. Those lookups go through `rg_flow_lookup_memo_n` (rg_flow.h), which
compares the record of the table's last hit before hashing and probing. Other tables keep
the plain lookup, whose misses would pay the extra compare for nothing: the innermost
flows, and a layer whose children are one-to-one with its flows (TCP under TLS).

A tunnel is recognised on the IR's call graph: from the layer, a path of edges reaches a
layer of a protocol that also occurs at or below it (IP in UDP in IP), and a layer with an
instance table above it. The layer must not be an inner copy itself: GTP's inner IP sits
between the outer and the inner UDP, but its own protocol occurs below it (the outer IP), so
its flows interleave like any inner layer's. An ICMP error's quote is no tunnel either: the
IP header it quotes leads only to layers that find a flow (`lookup:`) and create none, and
errors are rare, so the outer IP's every lookup would pay the memo for nothing; those layers
are left out of the path. At -O1 and above (-O0, the differential tests' reference, keeps
the plain lookup everywhere)."""

from __future__ import annotations

from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import Call

__all__ = ["outer_flow_layers"]


def _reach(edges: dict[str, set[str]], start: str) -> set[str]:
    """Layers reachable from start by one edge or more (start itself only through a cycle)."""
    seen: set[str] = set()
    todo = list(edges.get(start, ()))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(edges.get(n, ()))
    return seen


def outer_flow_layers(prog: object) -> frozenset[str]:
    """The layers with an instance table that carry a tunnel (see the module's doc)."""
    tabled: set[str] = set()
    finders: set[str] = set()  # layers that only find another layer's instance (lookup:)
    down: dict[str, set[str]] = {}  # parent -> children
    up: dict[str, set[str]] = {}  # child -> parents
    for b in prog.blocks.values():  # type: ignore[attr-defined]
        for ins in b.instrs:
            if isinstance(ins, I.Lookup):
                tabled.add(ins.layer)
            elif isinstance(ins, I.FindFlow):
                finders.add(ins.layer)
        t = b.term
        if isinstance(t, Call) and t.child != t.layer:  # self-loops (VLAN in VLAN) are no tunnel
            down.setdefault(t.layer, set()).add(t.child)
            up.setdefault(t.child, set()).add(t.layer)
    proto = {n: lir.desc.protocol for n, lir in prog.layers.items()}  # type: ignore[attr-defined]
    # an ICMP error's quoted headers: the finders, and the layers leading only to finders
    quotes = finders | {n for n in prog.layers if (r := _reach(down, n)) and r <= finders}  # type: ignore[attr-defined]
    out = set()
    for n in tabled:
        above = _reach(down, n) - {n} - quotes
        below = _reach(up, n) | {n}
        if proto[n] in {proto[b] for b in below - {n}}:
            continue  # an inner copy (GTP's inner IP, below the inner UDP): flows interleave
        if above & tabled and {proto[a] for a in above} & {proto[b] for b in below}:
            out.add(n)
    return frozenset(out)
