"""The document model of rules files (`rules:`, checked by `rubikgen validate`, compiled into
a stack by `rubikgen build/run --rules`). docs/rules.md describes the language."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

from rubikgen.models.common import Model

SimpleAction = Literal["pass", "drop", "drop-flow", "count", "reject"]


class Rewrite(Model):
    """Set header fields of the packet (through the stack's generated setters)."""

    rewrite: dict[StrictStr, StrictInt | StrictStr] = Field(
        min_length=1,
        description="Field -> new value: `tcp.dport: 8443`, `ip.ttl: 64`, `ip.saddr: 10.0.0.1` "
        "(names as in `match`).",
    )


class RejectOptions(Model):
    """How a rejected packet is answered (docs/rules.md, Reject)."""

    both: StrictBool = Field(
        default=False,
        description="TCP: also send a RST to the receiver (when the segment has ACK set).",
    )
    icmp: Literal["port", "admin"] = Field(
        default="port",
        description="Not TCP: ICMP/ICMPv6 port unreachable (port) or administratively "
        "prohibited (admin).",
    )


class Reject(Model):
    """Drop the packet and answer it: a TCP RST, or an ICMP/ICMPv6 destination unreachable."""

    reject: RejectOptions = Field(description="{both: BOOL, icmp: port|admin}.")


class ClampMss(Model):
    """Lower the MSS option of TCP SYN and SYN-ACK segments to at most N bytes."""

    clamp_mss: int = Field(
        alias="clamp-mss",
        ge=1,
        le=65535,
        strict=True,
        description="The largest MSS the segment may announce (1 to 65535): a larger MSS "
        "option is rewritten to it, the TCP checksum fixed incrementally.",
    )


# the tags are the models' names, never keys of the data (schema_errors keeps the parts of an
# error's location that are keys of the data)
_ACTION_KEYS = {"rewrite": "Rewrite", "reject": "Reject", "clamp-mss": "ClampMss"}


def _action_tag(v: Any) -> str | None:
    """Which form of action v is: a word, or a mapping named by its key (one error for the
    form written, not one per form)."""
    if isinstance(v, str):
        return "simple"
    if isinstance(v, dict):
        for k in _ACTION_KEYS:
            if k in v:
                return _ACTION_KEYS[k]
        return None
    return type(v).__name__ if type(v).__name__ in _ACTION_KEYS.values() else None


Action = Annotated[
    (
        Annotated[SimpleAction, Tag("simple")]
        | Annotated[Rewrite, Tag("Rewrite")]
        | Annotated[Reject, Tag("Reject")]
        | Annotated[ClampMss, Tag("ClampMss")]
    ),
    Discriminator(
        _action_tag,
        custom_error_type="action",
        custom_error_message="an action is pass, count, drop, drop-flow, reject, or a mapping "
        "with 'rewrite', 'reject' or 'clamp-mss'",
    ),
]


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
    action: Action = Field(
        description="pass | drop | drop-flow | count | reject | {reject: {both, icmp}} | "
        "{rewrite: {FIELD: VALUE, ...}} | {clamp-mss: N}."
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
