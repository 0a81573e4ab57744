"""The document model of spec test vectors (`*.test.yaml`, run by `rubikgen test`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from rubikgen.models.common import Model

CloseReason = Literal["accept", "evicted", "expired", "flushed", "open"]
Dir = Literal["c2s", "s2c"]
Link = Literal["ethernet", "raw", "null"]


class Hex(Model):
    """Bytes written as hexadecimal digits (spaces and colons between them are ignored)."""

    hex: StrictStr


ByteValue = Annotated[
    StrictStr | Hex,
    Field(description="Bytes: a string (each character one byte, \\xNN escapes) or {hex: ...}."),
]

# Fields of one scapy layer: name -> value (numbers, strings, flag strings such as "SA").
LayerFields = Annotated[dict[str, Any], Field(description="Field values of the scapy layer.")]
LayerValue = LayerFields | list[LayerFields]


class Fragment(Model):
    """Split the packet's IP datagram into fragments (IPv4, or IPv6 with a fragment header)."""

    size: StrictInt = Field(gt=0, description="Payload bytes per fragment (a multiple of 8).")
    order: list[StrictInt] | None = Field(
        default=None,
        description="Indices of the fragments in the order they are sent; an index may repeat "
        "(a duplicate) or be left out (a lost fragment). Default: in order.",
    )


class Packet(Model):
    """One packet (or several, with `fragment`): its layers from the link up, or raw bytes."""

    ts: StrictFloat | StrictInt | None = Field(
        default=None,
        description="Time in seconds (default: the previous packet's plus 1 ms; the first: 1).",
    )
    hex: StrictStr | None = Field(default=None, description="The whole frame, as hex.")
    pcap: StrictStr | None = Field(
        default=None, description="A capture (relative to the test file) whose frames are sent."
    )
    layers: list[dict[str, LayerFields]] | None = Field(
        default=None, description="Layers in order, when a layer repeats (tunnels)."
    )
    eth: LayerValue | None = None
    vlan: LayerValue | None = None
    ipv4: LayerValue | None = None
    ipv6: LayerValue | None = None
    ipv6_frag: LayerValue | None = None
    tcp: LayerValue | None = None
    udp: LayerValue | None = None
    sctp: LayerValue | None = None
    sctp_init: LayerValue | None = None
    sctp_init_ack: LayerValue | None = None
    sctp_cookie_echo: LayerValue | None = None
    sctp_cookie_ack: LayerValue | None = None
    sctp_data: LayerValue | None = None
    sctp_sack: LayerValue | None = None
    sctp_shutdown: LayerValue | None = None
    sctp_shutdown_ack: LayerValue | None = None
    sctp_shutdown_complete: LayerValue | None = None
    sctp_abort: LayerValue | None = None
    gtp: LayerValue | None = None
    vxlan: LayerValue | None = None
    gre: LayerValue | None = None
    mpls: LayerValue | None = None
    geneve: LayerValue | None = None
    icmp: LayerValue | None = None
    icmpv6_echo_request: LayerValue | None = None
    icmpv6_echo_reply: LayerValue | None = None
    icmpv6_unreach: LayerValue | None = None
    icmpv6_too_big: LayerValue | None = None
    icmpv6_time_exceeded: LayerValue | None = None
    ppp: LayerValue | None = None
    payload: ByteValue | None = None
    fragment: Fragment | None = None


class ExpectCall(Model):
    """One handler call (the events NF's line); fields left out are not compared."""

    handler: StrictStr
    layer: StrictStr | None = None
    dir: Dir | None = None
    end: CloseReason | None = Field(
        default=None, description="A call made because the instance ended, and why."
    )
    pkt: StrictInt | None = Field(default=None, description="1-based packet number.")
    args: dict[str, StrictInt | StrictBool | ByteValue] = Field(
        default_factory=dict, description="Arguments compared by name (bytes in full)."
    )


class ExpectGap(Model):
    """A hole gap recovery skipped (the events NF's gap line)."""

    layer: StrictStr | None = None
    dir: Dir | None = None
    seq: StrictInt | None = None
    len: StrictInt | None = None
    at: StrictInt | None = None


class Endpoints(Model):
    layer: StrictStr | None = None
    src: StrictStr | None = None
    dst: StrictStr | None = None
    sport: StrictInt | None = None
    dport: StrictInt | None = None


class ExpectStream(Endpoints):
    """The bytes one direction of one flow delivered (the streams NF's flows.jsonl line)."""

    dir: Dir | None = None
    sid: StrictInt | None = None
    data: ByteValue
    complete: StrictBool | None = None
    close: CloseReason | None = None
    gaps: list[list[StrictInt]] | None = None


class ExpectFlow(Endpoints):
    """One instance that outlived a packet, when it ended (the flowstats NF's line)."""

    close: CloseReason | None = None
    complete: StrictBool | None = None
    state: StrictStr | None = None
    packets: list[StrictInt] | None = Field(default=None, description="[c2s, s2c]")
    bytes: list[StrictInt] | None = Field(default=None, description="[c2s, s2c]")


class Expect(Model):
    """What the stack must do with the case's packets. Each list given is checked in full."""

    calls: list[ExpectCall] | None = Field(
        default=None, description="Every handler call, in order (and nothing else)."
    )
    handlers: list[StrictStr] | None = Field(
        default=None,
        description="Only the calls of these handlers are compared with calls (default: all).",
    )
    gaps: list[ExpectGap] | None = Field(
        default=None, description="Every hole skipped, in order (and nothing else)."
    )
    streams: list[ExpectStream] | None = Field(
        default=None,
        description="Every flow direction that delivered bytes, in any order "
        "(directions that delivered nothing may be left out).",
    )
    flows: list[ExpectFlow] | None = Field(
        default=None, description="Every instance that outlived a packet, in any order."
    )
    summary: dict[str, StrictInt] | None = Field(
        default=None, description="Numbers of the binary's JSON summary (packets, errors...)."
    )


class Case(Model):
    name: StrictStr
    link: Link | None = Field(default=None, description="Default: the file's link.")
    packets: list[Packet] = Field(min_length=1)
    expect: Expect


class TestFile(Model):
    """A file of test vectors for one stack."""

    test: StrictStr = Field(description="What the file tests.")
    # not `stack:`: a top-level `stack` key makes a YAML file a stack spec for `rubikgen validate`
    spec: StrictStr = Field(description="The stack spec, relative to this file, or stock:NAME.")
    link: Link = Field(
        default="ethernet",
        description="Link type of the capture each case writes: ethernet (an Ethernet header is "
        "added when a packet starts at IP), raw (IPv4/IPv6 frames) or null (BSD loopback).",
    )
    cases: list[Case] = Field(min_length=1)
