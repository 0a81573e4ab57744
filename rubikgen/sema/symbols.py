"""Pass 1 of protocol analysis: layouts, fields and variables (no expression types yet).

The tables built here are what the IR and C back-end consume, so they carry everything the
wire format needs: bit offsets inside runs, byte sizes, byte order and source paths.
"""

from __future__ import annotations

import re
from typing import Any

from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Path, SourceMap
from rubikgen.models.common import expr_text
from rubikgen.models.protocol import (
    FieldSpec,
    Protocol,
)
from rubikgen.sema.builtins import BUILTIN_VALUES, C_RESERVED, NAMESPACES
from rubikgen.sema.info import FieldInfo, ProtocolInfo, VarInfo

__all__ = ["FieldInfo", "ProtocolInfo", "VarInfo", "build_symbols", "check_ident"]

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_ident(
    name: str, what: str, smap: SourceMap, path: Path, diags: list[Diagnostic], *, key: bool = True
) -> bool:
    if not IDENT.match(name):
        diags.append(
            smap.diag(
                "RG019",
                f"{what} '{name}' is not an identifier",
                path,
                key=key,
                hint="use letters, digits and '_', not starting with a digit",
            )
        )
        return False
    if name in C_RESERVED:
        diags.append(
            smap.diag(
                "RG019",
                f"{what} '{name}' is a reserved word in C",
                path,
                key=key,
                hint=f"rename it, e.g. '{name}_'",
            )
        )
        return False
    return True


def field_decl(decl: Any) -> FieldSpec:
    """Normalise the short forms of a field declaration."""
    if isinstance(decl, FieldSpec):
        return decl
    if decl == "bytes":
        return FieldSpec(bytes="*")
    return FieldSpec(bits=decl)


def is_multiple_of_8(text: str) -> bool | None:
    """True if the bit-length expression is provably a multiple of 8, else False. A length
    that does not parse counts as True here: its syntax error is reported where it is checked."""
    from rubikgen.expr import ExprSyntaxError, is_multiple_of, parse_expr

    try:
        e = parse_expr(text)
    except ExprSyntaxError:
        return True
    return is_multiple_of(e, 8)


def _num_decl(
    spec: FieldSpec, name: str, what: str, smap: SourceMap, path: Path, diags: list[Diagnostic]
) -> tuple[str, int | None, int | None, str | None, str]:
    """Returns (kind, width, size, length_expr, length_unit)."""
    if spec.bits is not None and spec.bytes is not None:
        diags.append(
            smap.diag(
                "RG006",
                f"{what} '{name}' has both 'bits' and 'bytes'",
                path,
                hint="a number has 'bits'; a byte slice has 'bytes'",
            )
        )
    if spec.bytes is not None:
        if spec.bytes == "*":
            return "bytes", None, None, None, "bytes"
        if isinstance(spec.bytes, int):
            if not 1 <= spec.bytes <= 65535:
                diags.append(
                    smap.diag(
                        "RG023",
                        f"byte size {spec.bytes} of '{name}' is out of range 1..65535",
                        path + ("bytes",),
                    )
                )
            return "bytes", None, spec.bytes, None, "bytes"
        return "bytes", None, None, expr_text(spec.bytes), "bytes"
    if spec.bits is None:
        diags.append(
            smap.diag(
                "RG004",
                f"{what} '{name}' needs 'bits' or 'bytes'",
                path,
                hint="e.g. {bits: 16} for a number or {bytes: 4} for a byte slice",
            )
        )
        return "num", 8, None, None, "bytes"
    if isinstance(spec.bits, int):
        if spec.bits < 1 or spec.bits > 64:
            hint = (
                f"write {{bytes: {spec.bits // 8}}} for a {spec.bits}-bit value kept as bytes"
                if 64 < spec.bits <= 65535 * 8 and spec.bits % 8 == 0
                else "numbers are 1 to 64 bits wide"
            )
            diags.append(
                smap.diag(
                    "RG023", f"width {spec.bits} of '{name}' is out of range 1..64", path, hint=hint
                )
            )
            return "num", 64, None, None, "bytes"
        return "num", spec.bits, None, None, "bytes"
    text = expr_text(spec.bits)
    ok = is_multiple_of_8(text)
    if not ok:
        bits_path = path + ("bits",) if (path + ("bits",)) in smap.values else path
        diags.append(
            smap.diag(
                "RG021",
                f"variable length of '{name}' is not provably a whole number of bytes",
                bits_path,
                offset=(0, len(text)),
                text=text,
                hint="write the length in bytes with {bytes: EXPR}, or make the bit length a multiple of 8 (e.g. 'x << 3')",
            )
        )
    return "bytes", None, None, text, "bits"


def _names(run: list[str]) -> str:
    if len(run) > 4:
        return f"'{run[0]}' ... '{run[-1]}'"
    return ", ".join(f"'{n}'" for n in run)


def build_symbols(
    model: Protocol, file: str, smap: SourceMap
) -> tuple[ProtocolInfo, list[Diagnostic]]:
    diags: list[Diagnostic] = []
    info = ProtocolInfo(model.protocol, file, model, smap)
    check_ident(model.protocol, "protocol name", smap, ("protocol",), diags, key=False)

    # Layouts and fields: one flat namespace per protocol.
    for lname, layout in model.layouts.items():
        lpath: Path = ("layouts", lname)
        check_ident(lname, "layout name", smap, lpath, diags)
        fields: list[FieldInfo] = []
        bit = 0  # bit offset inside the fixed prefix of the layout
        fixed = True
        run_start: tuple[str, Path] | None = None  # first field of the current unaligned run
        run: list[str] = []  # numeric fields since the last byte boundary
        run_bit = 0  # where that run starts
        for i, (fname, decl) in enumerate(layout.items()):
            fpath: Path = lpath + (fname,)
            check_ident(fname, "field name", smap, fpath, diags)
            spec = field_decl(decl)
            if spec.init is not None:
                diags.append(
                    smap.diag(
                        "RG028",
                        f"header field '{fname}' cannot have an init",
                        fpath + ("init",),
                        hint="header fields come from the packet; use a perm variable",
                    )
                )
            if spec.bytes == "*":
                diags.append(
                    smap.diag(
                        "RG006",
                        f"header field '{fname}' needs a size",
                        fpath,
                        hint="write {bytes: N} or {bytes: EXPR}",
                    )
                )
            kind, width, size, lexpr, unit = _num_decl(spec, fname, "field", smap, fpath, diags)
            fi = FieldInfo(
                fname, lname, i, kind, fpath, width, size, lexpr, unit, spec.order, spec.const
            )
            if kind == "num" and width is not None:
                if spec.order == "little" and (width % 8 or bit % 8):
                    diags.append(
                        smap.diag(
                            "RG020",
                            f"little-endian field '{fname}' must be whole, aligned bytes",
                            fpath,
                            hint="byte order applies to multi-byte numbers",
                        )
                    )
                if bit % 8 and run_start is None:
                    run_start = (fname, fpath)
                if (bit % 8 or width % 8) and ((bit % 8) + width + 7) // 8 > 8:
                    diags.append(
                        smap.diag(
                            "RG023",
                            f"unaligned field '{fname}' spans more than 8 bytes",
                            fpath,
                            hint="split it, or align it on a byte boundary",
                        )
                    )
                if bit % 8 == 0 and width % 8:
                    run_start = (fname, fpath)
                fi.bit_offset = bit if fixed else None
                if bit % 8 == 0:
                    run, run_bit = [], bit
                run.append(fname)
                bit += width
                if bit % 8 == 0:
                    run_start = None
                    run = []
                if spec.const is not None and (spec.const < 0 or spec.const >= (1 << width)):
                    diags.append(
                        smap.diag(
                            "RG024",
                            f"const {spec.const} does not fit in {width} bits of '{fname}'",
                            fpath + ("const",),
                            hint=f"the largest {width}-bit value is {(1 << width) - 1}",
                        )
                    )
            else:
                if bit % 8:
                    diags.append(
                        smap.diag(
                            "RG020",
                            f"bit fields {_names(run)} ({bit - run_bit} bits) do not fill whole bytes before "
                            f"byte field '{fname}'",
                            run_start[1] if run_start else fpath,
                            hint=f"a run of bit fields must end on a byte boundary: add {8 - bit % 8} bit(s), "
                            "e.g. a reserved field, or fix a width",
                        )
                    )
                    run = []
                    bit += 8 - bit % 8
                if spec.const is not None:
                    diags.append(
                        smap.diag(
                            "RG024",
                            f"const applies to numbers, not to byte field '{fname}'",
                            fpath + ("const",),
                        )
                    )
                fi.bit_offset = bit if fixed else None
                if size is not None:
                    bit += size * 8
                else:
                    fixed = False
            if fname in info.fields:
                first = info.fields[fname]
                d = smap.diag(
                    "RG022",
                    f"field '{fname}' is already defined in layout '{first.layout}'",
                    fpath,
                    key=True,
                    hint="field names are one namespace per protocol (header.NAME); rename one",
                )
                fl = smap.key_pos(first.path)
                d.notes.append(f"first defined at {file}:{fl.line}:{fl.col}")
                diags.append(d)
            else:
                info.fields[fname] = fi
            fields.append(fi)
        if bit % 8:
            diags.append(
                smap.diag(
                    "RG020",
                    f"bit fields {_names(run)} ({bit - run_bit} bits) at the end of layout '{lname}' do not fill "
                    "whole bytes",
                    run_start[1] if run_start else lpath,
                    key=run_start is None,
                    hint=f"a layout must end on a byte boundary: add {8 - bit % 8} bit(s), e.g. a reserved field, "
                    "or fix a width",
                )
            )
        info.layouts[lname] = fields

    for kind_name, table, target in (
        ("temp", model.temp, info.temps),
        ("perm", model.perm, info.perms),
    ):
        for vname, decl in table.items():
            vpath: Path = (kind_name, vname)
            check_ident(vname, f"{kind_name} variable", smap, vpath, diags)
            spec = field_decl(decl)
            if spec.const is not None:
                diags.append(
                    smap.diag("RG024", "const applies to header fields only", vpath + ("const",))
                )
            k, width, size, lexpr, _ = _num_decl(
                spec, vname, f"{kind_name} variable", smap, vpath, diags
            )
            if lexpr is not None:
                if kind_name == "temp":  # (a perm gets RG027 below)
                    diags.append(
                        smap.diag(
                            "RG006",
                            f"{kind_name} variable '{vname}' cannot have a variable length",
                            vpath + ("bytes",),
                            hint="write 'bytes' for a view of any length, or {bytes: N}",
                        )
                    )
                size = None
            init = expr_text(spec.init) if spec.init is not None else None
            if kind_name == "temp" and init is not None:
                diags.append(
                    smap.diag(
                        "RG028",
                        f"temp variable '{vname}' cannot have an init",
                        vpath + ("init",),
                        hint="temps are zeroed for every packet; assign them in prep",
                    )
                )
            if kind_name == "perm":
                if k == "bytes" and size is None:
                    where = vpath + ("bytes",) if vpath + ("bytes",) in smap.values else vpath
                    diags.append(
                        smap.diag(
                            "RG027",
                            f"perm variable '{vname}' is a byte slice of no fixed size",
                            where,
                            hint="a view into a packet would dangle after the packet; use {bytes: N} "
                            "(the data is copied into the instance)",
                        )
                    )
                if init is None:
                    diags.append(
                        smap.diag(
                            "RG026",
                            f"perm variable '{vname}' has no init",
                            vpath,
                            key=True,
                            hint=f'add init, e.g. {vname}: {{bits: {width or 8}, init: "0"}}'
                            if k == "num"
                            else "add init: an expression of the same size",
                        )
                    )
            target[vname] = VarInfo(vname, k, vpath, width, size, init)

    if model.psm is not None:
        info.states = list(model.psm.states)
        info.transitions = [t.name for t in model.psm.transitions]
    info.events = list(model.events)
    reserved = set(BUILTIN_VALUES) | set(NAMESPACES)
    for i, s in enumerate(info.states):
        if (
            check_ident(s, "state name", smap, ("psm", "states", i), diags, key=False)
            and s in reserved
        ):
            diags.append(
                smap.diag("RG022", f"state '{s}' shadows a built-in name", ("psm", "states", i))
            )
    for name in model.params:
        check_ident(name, "parameter name", smap, ("params", name), diags)
        if name in reserved:
            diags.append(
                smap.diag(
                    "RG022",
                    f"parameter '{name}' shadows a built-in name",
                    ("params", name),
                    key=True,
                )
            )
    return info, diags
