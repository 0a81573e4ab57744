"""The handler check: a stack's handlers against the user's handler file, in spec terms.

`review` compares what the stack declares now (`Generated.handler_sigs`) with
* the handler file: handlers it does not define, functions that look like handlers of a name
  the stack no longer declares, prototypes that changed, arguments it reads that are gone;
* the handlers of the last build (the structs of the S_gen.h still in the build directory):
  arguments added, removed or retyped (`+seq -sport`, `len: u16 -> u32`).
A handler that disappears while a similar one appears (same layer and arguments, or a close
name) is reported as a probable rename. `rubikgen build` runs it before compiling, so that a
new or renamed handler is explained here rather than by the linker or the compiler.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

_SPEC_TYPES = {"uint8_t": "u8", "uint16_t": "u16", "uint32_t": "u32", "uint64_t": "u64"}
_STRUCT = re.compile(
    r"/\* handler (?P<name>\w+), layer (?P<layer>\w+) \((?P<src>[^)]*)\) \*/\s*"
    r"struct (?P=name)_args \{(?P<body>[^}]*)\};"
)
_MEMBER = re.compile(r"(\w+)\s+(\w+);")


def spec_type(ctype: str) -> str:
    """The spec's name of an argument's C type (u16, bytes)."""
    return "bytes" if ctype == "rg_bytes" else _SPEC_TYPES.get(ctype, ctype)


@dataclass(frozen=True)
class HandlerSig:
    name: str
    layer: str
    args: tuple[tuple[str, str], ...]  # (name, spec type)
    where: str = ""  # file:line:col of the declaration in the stack ("" if not known)


@dataclass(frozen=True)
class Finding:
    severity: Literal["error", "warning", "note"]
    where: str  # file:line:col or file:line
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.severity}: {self.message}"


def header_sigs(text: str) -> dict[str, HandlerSig]:
    """The handlers an S_gen.h was generated with (its argument structs)."""
    out: dict[str, HandlerSig] = {}
    for m in _STRUCT.finditer(text):
        members = [(n, spec_type(t)) for t, n in _MEMBER.findall(m.group("body"))]
        args = tuple(a for a in members if a[0] != "none_")  # the filler of an empty struct
        out[m.group("name")] = HandlerSig(m.group("name"), m.group("layer"), args)
    return out


def arg_changes(old: HandlerSig, new: HandlerSig) -> str:
    """`+seq -sport len: u16 -> u32`, or "" when the arguments are the same."""
    before, after = dict(old.args), dict(new.args)
    parts = [f"+{n}" for n in after if n not in before]
    parts += [f"-{n}" for n in before if n not in after]
    parts += [
        f"{n}: {before[n]} -> {t}" for n, t in after.items() if n in before and before[n] != t
    ]
    return " ".join(parts)


def renames(gone: Mapping[str, HandlerSig | None], new: Mapping[str, HandlerSig]) -> dict[str, str]:
    """Probable renames, old name -> new name: the same layer and arguments first, then the
    closest name (difflib). A new name is suggested for one old name at most."""
    out: dict[str, str] = {}
    free = dict(new)
    for old, sig in gone.items():
        if sig is None:
            continue
        same = [n for n, s in free.items() if (s.layer, s.args) == (sig.layer, sig.args)]
        if same:
            best = (difflib.get_close_matches(old, same, n=1, cutoff=0.0) or same)[0]
            out[old] = best
            free.pop(best)
    for old in gone:
        if old in out:
            continue
        close = difflib.get_close_matches(old, list(free), n=1, cutoff=0.6)
        if close:
            out[old] = close[0]
            free.pop(close[0])
    return out


def _describe(sig: HandlerSig) -> str:
    args = ", ".join(f"{n}: {t}" for n, t in sig.args) or "no arguments"
    return f"layer {sig.layer}, {args}"


def review(
    sigs: Mapping[str, HandlerSig],
    prototypes: Mapping[str, str],
    handlers_file: Path,
    old_header: Path | None,
    fix: str,
) -> list[Finding]:
    """Findings about handlers_file and the last build (old_header: its S_gen.h, if any).
    Errors stop a build: the compile would fail on them. `fix` is the command that adds stubs.
    """
    from rubikgen.toolchain.csource import function_definitions, normalise_signature

    try:
        text = handlers_file.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [Finding("error", str(handlers_file), f"handler file not found (run '{fix}')")]
    old: dict[str, HandlerSig] = {}
    if old_header is not None and old_header.is_file():
        old = header_sigs(old_header.read_text(encoding="utf-8", errors="replace"))
    defs = {d.name: d for d in function_definitions(text)}
    hf = str(handlers_file)
    # functions of the file that look like handlers the stack no longer declares
    stale = [
        d
        for d in defs.values()
        if d.name not in sigs and not d.static and "rg_hctx" in d.signature.split()
    ]
    undefined = {n: s for n, s in sigs.items() if n not in defs}
    gone: dict[str, HandlerSig | None] = {d.name: old.get(d.name) for d in stale}
    gone.update({n: s for n, s in old.items() if n not in sigs and n not in gone})
    renamed = renames(gone, {n: s for n, s in sigs.items() if n not in old or n in undefined})
    new_names = {v: k for k, v in renamed.items()}
    out: list[Finding] = []
    for name, sig in sigs.items():
        where = sig.where or hf
        was = new_names.get(name)
        hint = f" (renamed from '{was}'?)" if was else ""
        d = defs.get(name)
        if d is None:
            out.append(
                Finding(
                    "error",
                    where,
                    f"handler '{name}'{hint} ({_describe(sig)}) is not defined in {hf}; "
                    f"add its stub with '{fix}'"
                    + (f", then move the body of '{was}' into it" if was in defs else ""),
                )
            )
        elif d.signature != normalise_signature(prototypes[name]):
            out.append(
                Finding(
                    "error",
                    f"{hf}:{d.line}",
                    f"handler '{name}' does not match the stack's declaration ({where})\n"
                    f"    found:    {d.signature}\n"
                    f"    expected: {normalise_signature(prototypes[name])}",
                )
            )
        before = old.get(name) or (old.get(was) if was else None)
        changes = arg_changes(before, sig) if before else ""
        if changes:
            out.append(Finding("note", where, f"handler '{name}': arguments changed: {changes}"))
        if d is not None and before is not None:
            for arg, _ in before.args:
                if arg not in dict(sig.args) and re.search(rf"\bargs\s*->\s*{arg}\b", d.body):
                    out.append(
                        Finding(
                            "error",
                            f"{hf}:{d.line}",
                            f"handler '{name}' reads args->{arg}, which the stack no longer "
                            f"passes (its arguments now: {_describe(sig)})",
                        )
                    )
    for d in stale:
        to = renamed.get(d.name)
        hint = f"; renamed to '{to}' ({sigs[to].where or 'the stack'})?" if to else ""
        out.append(
            Finding(
                "error",
                f"{hf}:{d.line}",
                f"'{d.name}' looks like a handler but the stack declares no handler of that "
                f"name (removed or renamed{hint}); delete it or rename it",
            )
        )
    for name, to in renamed.items():
        if (
            name not in defs and name in old and to in defs
        ):  # renamed in the spec, the file already follows
            out.append(Finding("note", sigs[to].where or hf, f"handler '{name}' is now '{to}'"))
    return out
