"""The C target's typed context: what every renderer may read of the program being rendered
(`CContext`, built once per program by `build`), and the state of the one function being
written (`Walk`: the per-packet function and the burst stage each have their own)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from rubikgen.expr.types import NumT
from rubikgen.ir import instrs as I
from rubikgen.ir.layout import Arg, StackDesc
from rubikgen.ir.nodes import Program

from . import lean_walk
from .cexpr import to_c
from .layer_c import LayerC, ctype_of_width
from .outer_flows import outer_flow_layers
from .prune import Resets
from .rules_c import RulesC
from .rules_so import rules_backend
from .setters import Setters

_TYPED = {"u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t"}

__all__ = ["CContext", "HandlerC", "Walk", "build", "label"]


def label(block: str) -> str:
    """The C label of a block."""
    return "B_" + re.sub(r"\W", "_", block)


@dataclass
class HandlerC:
    name: str
    layer: str  # first layer that calls it
    args: list[tuple[str, str, str]] = field(default_factory=list)  # (name, ctype, kind)
    src: str = ""
    ends: str = ""  # a lifecycle handler: the close reasons it runs for

    @property
    def struct(self) -> str:
        return f"struct {self.name}_args"

    @property
    def prototype(self) -> str:
        return f"void {self.name}(const {self.struct} *args, rg_hctx *h)"


@dataclass
class Walk:
    """What renderers learn and leave while one function's blocks are written in order."""

    resets: Resets = field(default_factory=Resets)  # clears nothing reads (prune.py)
    key_built: str | None = None  # the previous instruction built this layer's key
    created: str | None = None  # the previous instruction created this layer's instance
    created_lazy: bool = False  # ... lazily
    # layers whose lookup looks in a closed table: each gets a late-packet exit (Z_<layer>)
    linger_exits: list[str] = field(default_factory=list)
    # layers whose lookup was rendered: each gets a verdict exit (V_<layer>)
    verdict_exits: list[str] = field(default_factory=list)

    def after(self, ins: I.Instr) -> None:
        """Records what `ins`, just rendered, leaves for the next instruction of its block."""
        if isinstance(ins, I.RULE_OPS):  # they feed the rules: the next instruction's state holds
            return
        self.key_built = ins.layer if isinstance(ins, I.BuildKey) else None
        self.created = ins.layer if isinstance(ins, I.Create) else None
        self.created_lazy = isinstance(ins, I.Create) and ins.lazy


@dataclass
class CContext:
    """The program's state for its renderers (read-only once `build` returned, but `walk`)."""

    prog: Program
    sd: StackDesc
    S: str  # the stack's C prefix
    hash: str
    opt: int
    layers: dict[str, LayerC]
    transforms: list[str]  # the transforms the program runs
    handlers: dict[str, HandlerC]
    memo_lookups: frozenset[str]  # tunnels' outer tables: a last-hit memo (outer_flows.py)
    rules: RulesC | None  # Program.rules: compiled in or reloadable (rules_c, rules_so)
    setters: Setters
    ret_ids: dict[str, dict[str, int]]  # per layer: call block -> its return id
    # fast-destroy layers whose one-packet instances observers may not be shown
    # (rg_obs.quiet_transient): nothing but on_close and freeing the sequences at their close
    quiet: list[str]
    max_repeat: dict[str, int]  # per self-looping layer: its loop's bound
    walk: Walk = field(default_factory=Walk)

    def for_walk(self) -> CContext:
        """The same program with a fresh function state (the burst stage's walk)."""
        return replace(self, walk=Walk())

    def targets(self) -> set[str]:
        """The blocks something jumps to (those get a label)."""
        t: set[str] = set()
        for lir in self.prog.layers.values():
            t.add(lir.entry)
        for b in self.prog.blocks.values():
            t.update(b.successors())
        return t

    def lean(self, body: str) -> str:
        """body with the TLV loops nothing reads walked by lengths only (lean_walk.py)."""
        return lean_walk.apply(body, [w for lc in self.layers.values() for w in lc.walks])


def _arg_types(lc: LayerC, args: list[Arg]) -> list[tuple[str, str, str]]:
    out = []
    for a in args:
        an = a.name
        if a.declared is not None:
            kind = "bytes" if a.declared == "bytes" else "num"
            ct = "rg_bytes" if a.declared == "bytes" else _TYPED[a.declared]
        else:
            ce = to_c(a.expr, lc.env())
            if isinstance(ce.type, NumT):
                kind, ct = "num", ctype_of_width(ce.type.width)
            else:
                kind, ct = "bytes", "rg_bytes"
        out.append((an, ct, kind))
    return out


def _handlers(prog: Program, sd: StackDesc, layers: dict[str, LayerC]) -> dict[str, HandlerC]:
    hs: dict[str, HandlerC] = {}
    for hn, h in sd.handlers.items():
        lc = layers[h.layer]
        hs[hn] = HandlerC(hn, h.layer, _arg_types(lc, h.args), h.src)
    for lir in prog.layers.values():
        for hn, reasons in lir.lifecycle:
            hs[hn].ends = ", ".join(reasons)
    for b in prog.blocks.values():
        for ins in b.instrs:
            if not isinstance(ins, I.Callback):
                continue
            lc = layers[ins.layer]
            types = _arg_types(lc, ins.args)
            old = hs.get(ins.name)
            if old is None:
                hs[ins.name] = HandlerC(ins.name, ins.layer, types, str(ins.src))
            else:  # the widest type of every layer that calls it
                merged = []
                for (n1, t1, k1), (_n2, t2, _k2) in zip(old.args, types, strict=False):
                    merged.append((n1, t1 if t1 >= t2 or k1 == "bytes" else t2, k1))
                old.args = merged
    return hs


def has_drain(lc: LayerC) -> bool:
    """Whether the layer's sequences deliver what they hold when an instance ends."""
    return bool(lc.has_seq and lc.d.seq is not None and lc.d.seq.drain)


def build(prog: Program, hash_: str, opt_level: int) -> CContext:
    """The context of a lowered, optimised program (the per-layer views prepared)."""
    assert prog.desc is not None
    sd = prog.desc
    S = prog.stack
    layers: dict[str, LayerC] = {}
    for name, lir in prog.layers.items():
        assert lir.desc is not None
        layers[name] = LayerC(lir.desc, lir.index, layers)
    xfs: dict[str, list[str]] = {}
    for b in prog.blocks.values():
        for ins in b.instrs:
            if isinstance(ins, I.Transform):
                xfs.setdefault(ins.layer, []).append(ins.name)
    transforms = sorted({t for ts in xfs.values() for t in ts})
    for name, lc in layers.items():
        lc.atoms = len(prog.layers[name].atoms)
        hs = [h for h, hd in sd.handlers.items() if hd.layer == name]
        hs += [u for u, ul in sd.udes.items() if ul == name]  # their fired flags
        lc.prepare(hs, xfs.get(name))
    handlers = _handlers(prog, sd, layers)
    # tunnels' outer tables: a last-hit memo before the hash (outer_flows.py)
    memo = outer_flow_layers(prog) if opt_level >= 1 else frozenset()
    # the program's rules (Program.rules, rules_c.py or rules_so.py), None without
    rb = rules_backend(prog, S, layers)
    # checksums, field setters: spans always when rules rewrite fields or verify a
    # checksum (`checksum_bad` reads the header's span), or when a set loaded at run time
    # may (reloadable builds)
    rd = prog.rules
    spans = rd is not None and (
        rd.reload
        or any(r.action in ("rewrite", "clamp-mss") for r in (rd.rules.rules if rd.rules else []))
    )
    spans = spans or (rb is not None and rb.reads_checksums())
    setters = Setters(S, list(layers.values()), always=spans)
    for name, lc in layers.items():
        lc.rule_slot = rb is not None and rb.has_slot(name)
    # one return id per call site of each layer (callers are (call block, ret block))
    ret_ids = {
        name: {call: i + 1 for i, (call, _) in enumerate(lir.callers)}
        for name, lir in prog.layers.items()
    }
    max_repeat: dict[str, int] = {}
    lazy: set[str] = set()
    for b in prog.blocks.values():
        for ins in b.instrs:
            if isinstance(ins, I.LoopDecide):
                max_repeat.setdefault(ins.layer, int(ins.max_repeat))
            elif isinstance(ins, I.Create) and ins.lazy:
                lazy.add(ins.layer)
    quiet = [
        n
        for n, lc in layers.items()
        if n in lazy
        and lc.index < 64  # a bit of the mask
        and not has_drain(lc)
        and not prog.layers[n].lifecycle
        and not (rb.on_close(n) if rb else "")
    ]
    return CContext(
        prog, sd, S, hash_, opt_level, layers, transforms, handlers, memo, rb, setters,
        ret_ids, quiet, max_repeat,
    )  # fmt: skip


def looped(cx: CContext, lc: LayerC) -> bool:
    """A layer with instances that may parse several times in one frame (a self-loop), whose
    observers see the frame once per instance (the Observe renderer)."""
    return bool(cx.max_repeat.get(lc.name, 0)) and lc.has_instance
