"""Checks of a protocol's `framing:` (docs/spec-language.md 2.7a): one way of cutting units, a
length prefix that parses, bounds that fit the runtime's framer (rg/rg_framer.h)."""

from __future__ import annotations

from typing import Any

from rubikgen.front.diagnostics import Diagnostic
from rubikgen.models.protocol import parse_length

MAX_UNIT = 1 << 30  # rg_framer's lengths are 32-bit; a unit this large is no message
MAX_DELIM = 8  # RG_FRAME_DELIM_MAX


def check_framing(m: Any, smap: Any, has_selector: bool, diags: list[Diagnostic]) -> None:
    fr = m.framing
    if fr is None:
        return
    path = ("framing",)
    if not has_selector:
        diags.append(
            smap.diag(
                "RG030",
                "framing needs a selector",
                path,
                key=True,
                hint="the framer keeps a unit that straddles deliveries per instance and "
                "direction; add a selector keying the connection",
            )
        )
    kinds = [k for k in ("length", "delimiter", "size") if getattr(fr, k) is not None]
    if len(kinds) != 1:
        diags.append(
            smap.diag(
                "RG039",
                "framing needs exactly one of length, delimiter, size"
                + (f" (got {', '.join(kinds)})" if kinds else ""),
                path + ((kinds[1],) if len(kinds) > 1 else ()),
                key=True,
                hint="length: '5 + u16 at 3' (a length prefix), delimiter: \"\\r\\n\", size: 16",
            )
        )
    if not 1 <= fr.max <= MAX_UNIT:
        diags.append(
            smap.diag(
                "RG039", f"framing max {fr.max} is out of range 1..{MAX_UNIT}", path + ("max",)
            )
        )
    if m.sequence is not None:
        diags.append(
            smap.diag(
                "RG039",
                "a protocol with framing has no sequence of its own",
                path,
                key=True,
                hint="framing takes in-order bytes: put the sequence in the layer below (tcp) "
                "and hand its assembled sdu to this layer",
            )
        )
    if m.header:
        diags.append(
            smap.diag(
                "RG039",
                "a protocol with framing has no header program",
                ("header",),
                key=True,
                hint="the framing layer cuts units; parse each unit in the layer above it",
            )
        )
    if fr.length is not None:
        lp = parse_length(fr.length)
        if lp is None:
            diags.append(
                smap.diag(
                    "RG039",
                    f"framing length {fr.length!r} is not 'A + uW at K'",
                    path + ("length",),
                    hint="the unit's length from a field of the unit: e.g. '5 + u16 at 3' (TLS "
                    "records), '2 + u16 at 0' (DNS over TCP), '4 + u24 at 1', 'u32le at 0'; "
                    "W is 8, 16, 24 or 32, 'le' little-endian, 'M *' before it a multiplier",
                )
            )
        elif lp.at > 255 or lp.add >= MAX_UNIT or not 1 <= lp.mul <= 1 << 16:
            diags.append(
                smap.diag(
                    "RG039",
                    f"framing length {fr.length!r}: offset at most 255, addend below {MAX_UNIT}, "
                    "multiplier 1..65536",
                    path + ("length",),
                )
            )
        elif lp.prefix > fr.max:
            diags.append(
                smap.diag(
                    "RG039",
                    f"framing max {fr.max} is shorter than the length prefix ({lp.prefix} bytes)",
                    path + ("max",),
                )
            )
    if fr.delimiter is not None:
        n = len(fr.delimiter.encode())
        if not 1 <= n <= MAX_DELIM:
            diags.append(
                smap.diag(
                    "RG039",
                    f"framing delimiter of {n} bytes: 1 to {MAX_DELIM}",
                    path + ("delimiter",),
                )
            )
    if fr.size is not None and not 1 <= fr.size <= fr.max:
        diags.append(
            smap.diag(
                "RG039",
                f"framing size {fr.size} is out of range 1..max ({fr.max})",
                path + ("size",),
            )
        )
