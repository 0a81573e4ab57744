"""The document model of rules files (`rules:`, checked by `rubikgen validate`, compiled into
a stack by `rubikgen build/run --rules`). docs/rules.md describes the language."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from rubikgen.models.common import Model

SimpleAction = Literal["pass", "drop", "drop-flow", "count"]


class Rewrite(Model):
    """Set header fields of the packet (through the stack's generated setters)."""

    rewrite: dict[StrictStr, StrictInt | StrictStr] = Field(
        min_length=1,
        description="Field -> new value: `tcp.dport: 8443`, `ip.ttl: 64`, `ip.saddr: 10.0.0.1` "
        "(names as in `match`).",
    )


class Rule(Model):
    """One rule: the first rule whose match holds decides the packet's fate."""

    name: StrictStr = Field(
        pattern=r"^[A-Za-z0-9_.\-]+$",
        description="Name of the rule (its hit counter in the summary); unique in the file.",
    )
    match: StrictStr | StrictBool = Field(
        description="An expression over the layers' header fields: `tcp.dport == 23`, "
        "`ip.header.saddr == 10.0.0.0/8 && udp.dport >= 16384` (docs/rules.md).",
    )
    stateful: StrictBool = Field(
        default=False,
        description="The decision taken on the first matching packet applies to every later "
        "packet of the same instance (the deepest layer with a selector), both directions.",
    )
    action: SimpleAction | Rewrite = Field(
        description="pass | drop | drop-flow | count | {rewrite: {FIELD: VALUE, ...}}."
    )
    doc: StrictStr | None = None


class RulesFile(Model):
    """A rules file: rules tried in order against every packet of one stack."""

    # not `stack:`: a top-level `stack` key makes a YAML file a stack spec for `rubikgen validate`
    spec: StrictStr | None = Field(
        default=None,
        description="The stack the rules are written for (relative to this file, or "
        "stock:NAME): `rubikgen validate` type-checks the rules against it.",
    )
    doc: StrictStr | None = None
    rules: list[Rule] = Field(description="The rules, first match wins.")
