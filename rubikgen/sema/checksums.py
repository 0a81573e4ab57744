"""Checks of a protocol's `checksums:` and `pseudo_header:` (docs/spec-language.md, section
Checksums), and the fixed header offsets checksums and setters rely on."""

from __future__ import annotations

import difflib

from rubikgen.front.diagnostics import Diagnostic
from rubikgen.sema.info import FieldInfo, ProtocolInfo

__all__ = ["check_checksums", "fixed_offsets"]

_WIDTH = {"internet": 16, "crc32c": 32}


def fixed_offsets(info: ProtocolInfo) -> dict[str, int]:
    """Bit offset from the header's start of every field at a fixed place: the fields of the
    layouts the header program parses first, unconditionally, up to the first variable-size
    field or conditional step."""
    out: dict[str, int] = {}
    base = 0
    for step in info.model.header:
        if not isinstance(step, str) or step not in info.layouts:
            break
        size = 0
        for f in info.layouts[step]:
            if f.bit_offset is None:
                return out
            out[f.name] = base + f.bit_offset
            if f.kind == "num":
                size = f.bit_offset + (f.width or 0)
            elif f.size is not None:
                size = f.bit_offset + f.size * 8
            else:  # a variable slice: what follows has no fixed place
                return out
        if size % 8:
            break
        base += size
    return out


def _dym(name: str, options: list[str]) -> str | None:
    best = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f"did you mean '{best[0]}'?" if best else None


def _addr_ok(f: FieldInfo) -> bool:
    return (f.kind == "bytes" and f.size in (4, 16)) or (f.kind == "num" and f.width == 32)


def check_checksums(info: ProtocolInfo, params: dict[str, ProtocolInfo]) -> list[Diagnostic]:
    """Diagnostics (RG070 checksum, RG071 pseudo-header) with one binding of the parameters."""
    m, smap = info.model, info.smap
    diags: list[Diagnostic] = []
    fixed = fixed_offsets(info)
    fields = list(info.fields)
    for fname, cs in m.checksums.items():
        path = ("checksums", fname)
        f = info.fields.get(fname)
        if f is None:
            diags.append(
                smap.diag(
                    "RG070",
                    f"unknown checksum field '{fname}'",
                    path,
                    key=True,
                    hint=_dym(fname, fields) or "name a header field",
                )
            )
            continue
        want = _WIDTH[cs.algorithm]
        if f.kind != "num" or f.width != want:
            have = f"{f.width} bits" if f.kind == "num" else "a byte field"
            diags.append(
                smap.diag(
                    "RG070",
                    f"{cs.algorithm} checksum field '{fname}' must be {want} bits, not {have}",
                    path + ("algorithm",),
                )
            )
        if fname not in fixed or fixed[fname] % 16:
            diags.append(
                smap.diag(
                    "RG070",
                    f"checksum field '{fname}' is not at a fixed, 16-bit aligned place in the "
                    "header",
                    path,
                    key=True,
                    hint="checksums are read and fixed up at a constant offset: put the field in "
                    "the layouts parsed first, after fixed-size fields only",
                )
            )
        if cs.pseudo_header is None:
            for k in ("protocol",):
                if getattr(cs, k) is not None:
                    diags.append(
                        smap.diag("RG070", f"'{k}' applies to a pseudo-header only", path + (k,))
                    )
        else:
            _check_pseudo(info, params, cs.pseudo_header, path, diags)
            if cs.protocol is None:
                diags.append(
                    smap.diag(
                        "RG070",
                        "a checksum with a pseudo-header needs 'protocol'",
                        path,
                        key=True,
                        hint="the upper-layer protocol number it sums, e.g. protocol: 6 (TCP)",
                    )
                )
        if cs.algorithm == "crc32c" and (cs.pseudo_header or cs.zero_means_none):
            diags.append(
                smap.diag(
                    "RG070",
                    "a crc32c checksum has no pseudo-header and no 'zero means none'",
                    path + ("algorithm",),
                )
            )
    ph = m.pseudo_header
    if ph is not None:
        sizes = []
        for k in ("src", "dst"):
            fname = getattr(ph, k)
            f = info.fields.get(fname)
            path = ("pseudo_header", k)
            if f is None:
                hint = _dym(fname, fields)
                diags.append(smap.diag("RG071", f"unknown field '{fname}'", path, hint=hint))
            elif not _addr_ok(f) or fname not in fixed or fixed[fname] % 16:
                diags.append(
                    smap.diag(
                        "RG071",
                        f"pseudo-header field '{fname}' must be an address (4 or 16 bytes, or 32 "
                        "bits) at a fixed, 16-bit aligned place in the header",
                        path,
                    )
                )
            else:
                sizes.append(f.size or 4)
        if ph.length is not None:
            f = info.fields.get(ph.length)
            if f is None or f.kind != "num" or f.width != 16 or ph.length not in fixed:
                diags.append(
                    smap.diag(
                        "RG071",
                        f"pseudo-header length '{ph.length}' must be a 16-bit field at a fixed "
                        "place in the header",
                        ("pseudo_header", "length"),
                        hint=_dym(ph.length, fields) if f is None else None,
                    )
                )
        if len(sizes) == 2 and sizes[0] != sizes[1]:
            diags.append(
                smap.diag("RG071", "src and dst differ in size", ("pseudo_header",), key=True)
            )
    return diags


def _check_pseudo(
    info: ProtocolInfo,
    params: dict[str, ProtocolInfo],
    pname: str,
    path: tuple[str | int, ...],
    diags: list[Diagnostic],
) -> None:
    smap = info.smap
    if pname not in info.model.params:
        diags.append(
            smap.diag(
                "RG071",
                f"pseudo_header '{pname}' is not a parameter of protocol '{info.model.protocol}'",
                path + ("pseudo_header",),
                hint=_dym(pname, list(info.model.params))
                or "name the parameter bound to the network layer (params:)",
            )
        )
        return
    bound = params.get(pname)
    if bound is not None and bound.model.pseudo_header is None:
        diags.append(
            smap.diag(
                "RG071",
                f"protocol '{bound.model.protocol}' (parameter '{pname}') declares no "
                "pseudo_header",
                path + ("pseudo_header",),
                hint="declare `pseudo_header: {src: FIELD, dst: FIELD}` in that protocol",
            )
        )
