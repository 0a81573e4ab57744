"""The IR of a rules file compiled into a stack (docs/rules.md): the rules, each with its match
expression and what every name in it is bound to (a header field, a layer, an address
literal), as the check stage (rubikgen/rules/check.py) binds them against the stack's semantic
model. `lower_rules` (ir/lower_rules.py) puts them into the stack's `Program`: the opcodes
that feed them (`RuleRead`, `RuleKey`, ir/instrs.py) in the blocks, the one that applies them
(`ApplyRules`) at the function's exit, and `Program.rules` (`RulesDesc`) for the tables the
back-ends render once per stack. Imports nothing above the expression language."""

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


@dataclass(frozen=True)
class RulesDesc:
    """The rules of a Program: the set compiled in (None: a reloadable build started without
    one), whether sets are swapped at run time (`--rules-reload`, backend/rules_so.py), and
    the stack spec a reloadable binary reports (`rubikgen ctl SOCKET rules info`)."""

    rules: RuleSet | None
    reload: bool = False
    stack_spec: str = ""

    def fields(self) -> dict[str, list[FieldRef]]:
        """Per layer, in the order the rules name them: the fields the rules read."""
        out: dict[str, list[FieldRef]] = {}
        for r in self.rules.rules if self.rules is not None else []:
            for v in r.refs.values():
                if isinstance(v, FieldRef) and v not in out.setdefault(v.layer, []):
                    out[v.layer].append(v)
        return out

    def layers(self) -> set[str]:
        """The layers the rules name (a field of theirs, or the layer itself)."""
        return {
            v.layer
            for r in (self.rules.rules if self.rules is not None else [])
            for v in r.refs.values()
            if isinstance(v, FieldRef | LayerRef)
        }

    def need_instance(self) -> bool:
        """Rules that act on the packet's instance (stateful ones, drop-flow): every rule set
        of a reloadable build may."""
        rules = self.rules.rules if self.rules is not None else []
        return self.reload or any(r.stateful or r.action == "drop-flow" for r in rules)
