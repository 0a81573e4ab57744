"""The checked form of a rules file, what the C back-end (backend/rules_c.py) reads: rules
with their typed expressions and the fields their names resolved to. Imports nothing above
the expression language (the back-end's import contract)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubikgen.expr.ast import Expr, Name

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
# a reloadable stack (--rules-reload) copies this much of each header's fixed part: the fields
# a reloadable rule set can read (backend/rules_so.py)
RELOAD_COPY_BYTES = 64


@dataclass(frozen=True)
class FieldRef:
    layer: str
    field: str
    kind: str  # "num" | "bytes"
    width: int  # bits of the value compared (bytes fields: 8 * size)
    # not a header field: `LAYER.checksum_bad`, 1 when a checksum of the layer's header does
    # not verify in this packet (computed when a rule reads it)
    virtual: bool = False

    @property
    def dotted(self) -> str:
        return f"{self.layer}.{self.field}"


@dataclass(frozen=True)
class LayerRef:
    layer: str


@dataclass(frozen=True)
class Lit:
    """An IPv4 (bits 32) or IPv6 (bits 128) literal (prefix: its length, None for an
    address)."""

    value: int
    prefix: int | None = None
    bits: int = 32

    @property
    def mask(self) -> int:
        n = self.bits if self.prefix is None else self.prefix
        return ((1 << n) - 1) << (self.bits - n) if n else 0


Resolved = FieldRef | LayerRef | Lit


@dataclass
class RuleIR:
    index: int
    name: str
    line: int
    match_text: str
    expr: Expr
    refs: dict[tuple[int, int], Resolved]  # Name (start, end) -> what it names
    action: str  # pass | drop | drop-flow | count | rewrite | reject | clamp-mss
    rewrite: list[tuple[FieldRef, int]] = field(default_factory=list)
    stateful: bool = False
    # reject: RG_REJECT_F_* (1: reset the receiver too, 2: ICMP administratively prohibited)
    reject_flags: int = 0
    # clamp-mss: the largest MSS, and the TCP layers whose SYNs it applies to
    clamp_mss: int = 0
    clamp_layers: list[str] = field(default_factory=list)

    def ref(self, n: Name) -> Resolved:
        return self.refs[(n.start, n.end)]


@dataclass
class RuleSet:
    file: str  # as displayed in comments and diagnostics
    digest: str  # sha256 of the file's text: part of the build's spec hash
    rules: list[RuleIR]
