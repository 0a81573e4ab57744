"""Frames of a test case, built with scapy from the case's packet descriptions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubikgen.front.source import Path as DocPath

# Link type numbers of the pcap file a case writes (LINKTYPE_*).
LINKTYPES = {"ethernet": 1, "raw": 101, "null": 0}

# Description keys -> scapy classes (module, class name); the keys of a packet that are layers.
LAYERS: dict[str, tuple[str, str]] = {
    "eth": ("scapy.layers.l2", "Ether"),
    "vlan": ("scapy.layers.l2", "Dot1Q"),
    "ipv4": ("scapy.layers.inet", "IP"),
    "ipv6": ("scapy.layers.inet6", "IPv6"),
    "ipv6_frag": ("scapy.layers.inet6", "IPv6ExtHdrFragment"),
    "tcp": ("scapy.layers.inet", "TCP"),
    "udp": ("scapy.layers.inet", "UDP"),
    "sctp": ("scapy.layers.sctp", "SCTP"),
    "sctp_init": ("scapy.layers.sctp", "SCTPChunkInit"),
    "sctp_init_ack": ("scapy.layers.sctp", "SCTPChunkInitAck"),
    "sctp_cookie_echo": ("scapy.layers.sctp", "SCTPChunkCookieEcho"),
    "sctp_cookie_ack": ("scapy.layers.sctp", "SCTPChunkCookieAck"),
    "sctp_data": ("scapy.layers.sctp", "SCTPChunkData"),
    "sctp_sack": ("scapy.layers.sctp", "SCTPChunkSACK"),
    "sctp_shutdown": ("scapy.layers.sctp", "SCTPChunkShutdown"),
    "sctp_shutdown_ack": ("scapy.layers.sctp", "SCTPChunkShutdownAck"),
    "sctp_shutdown_complete": ("scapy.layers.sctp", "SCTPChunkShutdownComplete"),
    "sctp_abort": ("scapy.layers.sctp", "SCTPChunkAbort"),
    "gtp": ("scapy.contrib.gtp", "GTP_U_Header"),
    "vxlan": ("scapy.layers.vxlan", "VXLAN"),
    "gre": ("scapy.layers.l2", "GRE"),
    "mpls": ("scapy.contrib.mpls", "MPLS"),
    "geneve": ("scapy.contrib.geneve", "GENEVE"),
    "icmp": ("scapy.layers.inet", "ICMP"),
    "icmpv6_echo_request": ("scapy.layers.inet6", "ICMPv6EchoRequest"),
    "icmpv6_echo_reply": ("scapy.layers.inet6", "ICMPv6EchoReply"),
    "icmpv6_unreach": ("scapy.layers.inet6", "ICMPv6DestUnreach"),
    "icmpv6_too_big": ("scapy.layers.inet6", "ICMPv6PacketTooBig"),
    "icmpv6_time_exceeded": ("scapy.layers.inet6", "ICMPv6TimeExceeded"),
    "ppp": ("scapy.layers.ppp", "PPP"),
}


class PacketError(Exception):
    """A packet description scapy cannot build; path: where in the document."""

    def __init__(
        self, message: str, path: DocPath, hint: str | None = None, key: bool = False
    ) -> None:
        super().__init__(message)
        self.path = path
        self.hint = hint
        self.key = key  # at the key of path (an unknown field), not its value


@dataclass
class Frame:
    ts_ns: int
    data: bytes
    linktype: int  # of a frame read from a pcap given in the case; else the case's


def byte_value(v: Any) -> bytes:
    """A ByteValue of the document as bytes (ValueError when it cannot be)."""
    if isinstance(v, dict):
        digits = re.sub(r"[\s:]", "", v["hex"])
        return bytes.fromhex(digits)
    if any(ord(c) > 0xFF for c in v):
        raise ValueError("a byte string holds characters above \\xff: use {hex: ...}")
    return bytes(v.encode("latin-1"))


def _scapy_class(key: str) -> Any:
    import importlib
    import logging

    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    mod, name = LAYERS[key]
    return getattr(importlib.import_module(mod), name)


def _layer(key: str, fields: dict[str, Any], path: DocPath) -> Any:
    import difflib

    cls = _scapy_class(key)
    names = [f.name for f in cls.fields_desc]
    for k in fields:
        if k not in names:
            best = difflib.get_close_matches(k, names, n=1)
            hint = f"did you mean '{best[0]}'?" if best else f"fields: {', '.join(names)}"
            raise PacketError(f"{key} ({cls.__name__}) has no field '{k}'", (*path, k), hint, True)
    vals = {k: (byte_value(v) if isinstance(v, dict) else v) for k, v in fields.items()}
    try:
        return cls(**vals)
    except Exception as e:  # scapy raises many kinds on bad values
        raise PacketError(f"{key}: {e}", path) from e


def _layers_of(raw: dict[str, Any], path: DocPath) -> list[tuple[str, dict[str, Any], DocPath]]:
    out: list[tuple[str, dict[str, Any], DocPath]] = []
    if raw.get("layers") is not None:
        for i, item in enumerate(raw["layers"]):
            if len(item) != 1:
                raise PacketError(
                    "each item of layers is one {LAYER: {fields}}", (*path, "layers", i)
                )
            ((k, v),) = item.items()
            if k not in LAYERS:
                raise PacketError(
                    f"unknown layer '{k}'", (*path, "layers", i), f"layers: {', '.join(LAYERS)}"
                )
            out.append((k, v, (*path, "layers", i, k)))
    for k, v in raw.items():
        if k in LAYERS:
            if out and raw.get("layers") is not None:
                raise PacketError("give the layers either in 'layers' or as keys", (*path, k))
            for j, fields in enumerate(v if isinstance(v, list) else [v]):
                out.append((k, fields, (*path, k, j) if isinstance(v, list) else (*path, k)))
    return out


def _fragments(net: Any, frag: dict[str, Any], path: DocPath) -> list[Any]:
    """The fragments of the IP datagram net (scapy splits it), in the order asked for."""
    from scapy.layers.inet import IP, fragment
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6

    size = frag["size"]
    if size % 8:
        raise PacketError("fragment size must be a multiple of 8", (*path, "fragment", "size"))
    if isinstance(net, IP):
        parts = fragment(net, fragsize=size)  # type: ignore[no-untyped-call]
    elif isinstance(net, IPv6) and IPv6ExtHdrFragment in net:
        # fragment6's size counts the IPv6 header and the unfragmentable part too
        hdr = len(net) - len(net[IPv6ExtHdrFragment].payload)
        parts = fragment6(net, size + hdr)  # type: ignore[no-untyped-call]
    else:
        raise PacketError(
            "fragment needs an ipv4 layer, or ipv6 with an ipv6_frag layer", (*path, "fragment")
        )
    order = frag.get("order")
    if order is None:
        return list(parts)
    for i, idx in enumerate(order):
        if not 0 <= idx < len(parts):
            raise PacketError(
                f"fragment index {idx} out of range: the datagram has {len(parts)} fragments",
                (*path, "fragment", "order", i),
            )
    return [parts[i] for i in order]


def build_frames(
    packets: list[dict[str, Any]], link: str, base: Path, path: DocPath
) -> list[Frame]:
    """The frames of a case's packets (raw document data, validated by the model)."""
    frames: list[Frame] = []
    ts = 1.0
    first = True
    for i, raw in enumerate(packets):
        ppath = (*path, i)
        if raw.get("ts") is not None:
            ts = float(raw["ts"])
        elif not first:
            ts += 0.001
        first = False
        ts_ns = round(ts * 1e9)
        kinds = [k for k in ("hex", "pcap") if raw.get(k) is not None]
        layers = _layers_of(raw, ppath)
        if len(kinds) + bool(layers) != 1:
            raise PacketError("a packet is one of: hex, pcap, or layers", ppath)
        if raw.get("hex") is not None:
            try:
                data = byte_value({"hex": raw["hex"]})
            except ValueError as e:
                raise PacketError(f"bad hex: {e}", (*ppath, "hex")) from e
            frames.append(Frame(ts_ns, data, LINKTYPES[link]))
            continue
        if raw.get("pcap") is not None:
            frames += _pcap_frames(base / raw["pcap"], (*ppath, "pcap"))
            continue
        link_part = None
        if link == "ethernet" and layers[0][0] != "eth":
            # fixed addresses: scapy would otherwise look up routes and ARP tables
            link_part = _scapy_class("eth")(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        elif link == "null":
            from scapy.layers.l2 import Loopback

            link_part = Loopback(type=2 if layers[0][0] == "ipv4" else 30)
        net = None
        for key, fields, lpath in layers:
            lay = _layer(key, fields, lpath)
            if net is None and key not in ("ipv4", "ipv6"):
                link_part = lay if link_part is None else link_part / lay
            else:
                net = lay if net is None else net / lay
        if raw.get("payload") is not None:
            try:
                pay = byte_value(raw["payload"])
            except ValueError as e:
                raise PacketError(str(e), (*ppath, "payload")) from e
            if net is not None:
                net = net / pay
            else:
                link_part = pay if link_part is None else link_part / pay
        parts = [net] if not raw.get("fragment") else _fragments(net, raw["fragment"], ppath)
        for n, p in enumerate(parts):
            whole = (
                p if link_part is None else (link_part.copy() / p if p is not None else link_part)
            )
            frames.append(Frame(ts_ns + n * 1000, bytes(whole), LINKTYPES[link]))
    return frames


def _pcap_frames(file: Path, path: DocPath) -> list[Frame]:
    from scapy.utils import PcapReader

    try:
        with PcapReader(str(file)) as r:
            lt = r.linktype
            return [Frame(int(p.time * 1_000_000_000), bytes(p), lt) for p in r]
    except (OSError, Exception) as e:
        raise PacketError(f"cannot read {file}: {e}", path) from e


def write_pcap(frames: list[Frame], file: Path) -> None:
    """A nanosecond pcap of the frames (one link type: the first frame's)."""
    import struct

    lt = frames[0].linktype if frames else 1
    with open(file, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, lt))
        for fr in frames:
            sec, ns = divmod(fr.ts_ns, 1_000_000_000)
            f.write(struct.pack("<IIII", sec, ns, len(fr.data), len(fr.data)))
            f.write(fr.data)
