"""What the eBPF renderers share: the per-layer view (the C target's LayerC, whose names
the BPF program keeps: they are fields of a per-CPU scratch record, see program.py), the
expression environment, and the error for what cannot be lowered."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.expr.ast import Call, Expr, Name, Str, walk
from rubikgen.expr.types import BOOL, BytesT
from rubikgen.ir.cond import Src
from rubikgen.ir.nodes import Program

from ..cexpr import CExpr, CRef
from ..layer_c import LayerC, LayerEnv

# builtins whose value needs a sequence's history (gaps, overlaps): not on the stateless path
_STATEFUL_BUILTINS = {"gap_len", "gap_seq", "overlap_seq", "overlap_len", "overlap_new"}


class Unlowerable(Exception):
    """Something of the stack or the rules the XDP program cannot do without user space's
    state, or at all in eBPF: a build error (RG080) at the spec or rules line `src`."""

    def __init__(self, what: str, src: Src | None, hint: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.src = src
        self.hint = hint


class XEnv(LayerEnv):
    """cexpr's environment for one layer of the XDP program: LayerEnv's names, except what
    reads a sequence or a virtual latch (rendered from this packet alone, program.py's
    fresh-instance model) and what has no meaning in a packet-offset view."""

    def __init__(self, lc: LayerC, src: Src | None) -> None:
        super().__init__(lc)
        self.src = src

    def ref(self, name: Name) -> CRef:
        r = name.ref
        x = name.parts[-1]
        if r is not None and r.kind == "atom":
            return CRef(f"va_{self.lc.name}[{x}]", BOOL)
        if r is not None and r.kind == "builtin" and x in _STATEFUL_BUILTINS:
            raise Unlowerable(f"'{name.dotted}' depends on earlier packets", self.src)
        if r is not None and r.kind in ("perm", "foreign_perm", "temp", "foreign_temp"):
            o = self._owner(name)
            v = (o.d.perms if "perm" in r.kind else o.d.temps)[x]
            if isinstance(v.type, BytesT) and v.size is not None:
                raise Unlowerable(f"'{name.dotted}' is a fixed-size byte variable", self.src)
        return super().ref(name)

    def assemble(self) -> str:
        # fresh-instance model (program.py): a datagram whose first insert is at offset 0 of
        # a zero-based sequence is whole in this packet when the PSM reaches an accept state;
        # anything else (a fragment) is decided by user space: the packet is deferred
        sq = self.lc.d.seq
        if sq is None or not sq.zero_based:
            raise Unlowerable(
                f"assemble() in layer {self.lc.name}: a stream's data depends on earlier packets",
                self.src,
            )
        n = self.lc.name
        return f"if (seqm_{n} != 0) RGX_DEFER(); else sdu_{n} = seqd_{n};"

    def seq_ready_upto(self, offset: str) -> str:
        raise Unlowerable("ready_upto() reads the sequence's history", self.src)


def require_lowerable(e: Expr, src: Src | None) -> None:
    """Refuse what the packet-offset view of bytes cannot render (byte literals, varints)."""
    for n in walk(e):
        if isinstance(n, Str):
            raise Unlowerable("a byte-string literal (payload matching)", src)
        if isinstance(n, Call) and n.func in ("varint", "varint_len", "name_len", "ready_upto"):
            raise Unlowerable(f"{n.func}()", src)


def to_bpf(e: Expr, lc: LayerC, src: Src | None) -> CExpr:
    from ..cexpr import to_c

    require_lowerable(e, src)
    try:
        return to_c(e, XEnv(lc, src))
    except (ValueError, KeyError) as x:
        raise Unlowerable(f"expression of layer {lc.name}: {x}", src) from None


def cond_bpf(e: Expr, lc: LayerC, src: Src | None) -> str:
    from ..cexpr import cond_to_c

    require_lowerable(e, src)
    try:
        return cond_to_c(e, XEnv(lc, src))
    except (ValueError, KeyError) as x:
        raise Unlowerable(f"condition of layer {lc.name}: {x}", src) from None


@dataclass
class XContext:
    """The program being rendered: its IR, the layer views, and what the renderers record."""

    prog: Program
    layers: dict[str, LayerC]
    full: set[str]  # layers rendered block by block (their edges are followed)
    leaf: set[str]  # layers whose header only is parsed (nothing needed below them)
    flow_layers: set[str]  # layers whose selector key is looked up in the flow maps
    rule_layers: set[str]
    rule_fields: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    max_repeat: dict[str, int] = field(default_factory=dict)
    stateful: set[str] = field(default_factory=set)  # edges read the PSM, events, sequences
    kids: dict[str, set[str]] = field(default_factory=dict)  # layer -> layers it calls
    prog_id: dict[str, int] = field(default_factory=dict)  # layer -> its slot in rg_progs
    resumes: dict[str, list[str]] = field(default_factory=dict)  # layer -> blocks resumed at

    def resume_id(self, layer: str, block: str) -> int:
        """The number the layer's program dispatches on to go on at `block` (0: its entry)."""
        rs = self.resumes.setdefault(layer, [])
        if block not in rs:
            rs.append(block)
        return rs.index(block) + 1

    @property
    def rendered(self) -> set[str]:
        return self.full | self.leaf
