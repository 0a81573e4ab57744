"""Diagnostics as data: code, severity, span, message, hint; rendered as text, JSON or GitHub."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import TextIO

# Stable codes. Never renumber: CI configurations and docs refer to them.
CODES: dict[str, str] = {
    "RG001": "YAML syntax error",
    "RG002": "duplicate key",
    "RG003": "not a rubikgen document (no top-level 'protocol' or 'stack' key)",
    "RG004": "missing required key",
    "RG005": "unknown key",
    "RG006": "value of the wrong shape or type",
    "RG007": "referenced file not found or unreadable",
    "RG008": "TOML syntax error",
    "RG009": "document too large, too deep or cyclic (aliases)",
    "RG010": "expression syntax error",
    "RG011": "unknown name",
    "RG012": "type mismatch",
    "RG013": "invalid assignment target",
    "RG014": "virtual reference (v.) outside a condition",
    "RG015": "constant out of range or division by zero",
    "RG016": "comparison that is always false for the field's width (warning)",
    "RG017": "unknown function or wrong number of arguments",
    "RG018": "statement not allowed here",
    "RG019": "invalid identifier",
    "RG020": "bit fields do not pack into whole bytes",
    "RG021": "variable length not in whole bytes",
    "RG022": "duplicate name",
    "RG023": "invalid field width",
    "RG024": "const value does not fit the field",
    "RG025": "malformed TLV loop (any_until)",
    "RG026": "perm variable without init",
    "RG027": "perm byte slice without a fixed size",
    "RG028": "init on a temp variable or a header field",
    "RG029": "malformed selector",
    "RG030": "sequence or PSM without a selector",
    "RG031": "no start state or several start states",
    "RG032": "undefined state or transition",
    "RG033": "unreachable state (warning)",
    "RG034": "transition that can never fire (warning)",
    "RG035": "virtual reference without a sequence",
    "RG036": "elif/else without a preceding if",
    "RG037": "invalid duration",
    "RG038": "name not available at this point of the pipeline",
    "RG039": "invalid framing",
    "RG040": "cyclic event relation",
    "RG041": "event referenced but never defined",
    "RG042": "declared but never used (warning)",
    "RG043": "lifecycle event where no instance ends",
    "RG044": "unknown transform or wrong transform arguments",
    "RG050": "parse-tree cycle other than a declared self-loop",
    "RG051": "layer arguments do not match the protocol's parameters",
    "RG052": "unknown layer",
    "RG053": "layer unreachable from the entry (warning)",
    "RG054": "parameter layer is not parsed before this layer",
    "RG055": "two edges from one layer with the same condition (warning)",
    "RG060": "invalid handler",
    "RG070": "invalid checksum declaration",
    "RG071": "invalid pseudo-header declaration",
    "RG080": "cannot be lowered to eBPF/XDP (build --xdp)",
    "RG900": "internal error",
    "RG901": "broken installation (a module of rubikgen or of a dependency cannot be imported)",
}

DOC_URL = "docs/spec-language.md"


@dataclass
class Diagnostic:
    code: str
    message: str
    file: str
    line: int
    col: int
    severity: str = "error"  # error | warning | note
    hint: str | None = None
    end_col: int | None = None  # exclusive, same line
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["title"] = CODES.get(self.code, "")
        return d


class GenerateError(Exception):
    """Specs (a stack, its protocols, a rules file) with errors: raised by the check stage
    (rubikgen/pipeline.py) with their diagnostics, which the command line renders."""

    def __init__(self, diagnostics: list[Diagnostic], message: str = "") -> None:
        super().__init__(message or f"{len(diagnostics)} error(s) in the specs")
        self.diagnostics = diagnostics


class SourceCache:
    """Source lines of files, for carets."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = {}

    def add(self, path: str, text: str) -> None:
        self._lines[path] = text.splitlines()

    def line(self, path: str, n: int) -> str | None:
        lines = self._lines.get(path)
        if lines is None or n < 1 or n > len(lines):
            return None
        return lines[n - 1]


def _colour(enabled: bool, code: str, s: str) -> str:
    return f"\x1b[{code}m{s}\x1b[0m" if enabled else s


def render_text(d: Diagnostic, sources: SourceCache, colour: bool = False) -> str:
    sev = {"error": "1;31", "warning": "1;33", "note": "1;36"}.get(d.severity, "1")
    head = f"{d.file}:{d.line}:{d.col}: {_colour(colour, sev, d.severity)}[{d.code}]: {d.message}"
    out = [head]
    src = sources.line(d.file, d.line)
    if src is not None:
        # Tabs would misalign the caret; show them as single spaces.
        shown = src.replace("\t", " ")
        col, end_col = d.col, d.end_col
        if len(shown) > 120:  # keep a window around the column on very long lines
            start = max(0, col - 60)
            shown = ("..." if start else "") + shown[start : start + 117] + "..."
            shift = start - (3 if start else 0)
            col -= shift
            end_col = end_col - shift if end_col else None
        d = Diagnostic(d.code, d.message, d.file, d.line, col, d.severity, d.hint, end_col, d.notes)
        gutter = f"{d.line:>5} | "
        out.append(gutter + shown)
        width = max(1, (d.end_col - d.col) if d.end_col and d.end_col > d.col else 1)
        width = min(width, max(1, len(shown) - d.col + 1))
        out.append(
            " " * (len(gutter) - 2) + "| " + " " * (d.col - 1) + _colour(colour, sev, "^" * width)
        )
    for n in d.notes:
        out.append(f"      = note: {n}")
    if d.hint:
        out.append(f"      = hint: {d.hint}")
    return "\n".join(out)


def render_github(d: Diagnostic) -> str:
    kind = "error" if d.severity == "error" else "warning"

    def esc(s: str) -> str:
        return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    msg = d.message + (f" (hint: {d.hint})" if d.hint else "")
    return f"::{kind} file={d.file},line={d.line},col={d.col},title={d.code}::{esc(msg)}"


SEVERITY_ORDER = {"error": 0, "note": 1, "warning": 2}


def errors_first(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Errors, then notes, then warnings; each group in its given order (the real problem is
    read first, not after pages of warnings)."""
    return sorted(diags, key=lambda d: SEVERITY_ORDER.get(d.severity, 3))


def render(
    diags: list[Diagnostic], sources: SourceCache, fmt: str, stream: TextIO | None = None
) -> None:
    stream = stream or sys.stdout
    diags = errors_first(diags)
    if fmt == "json":
        json.dump([d.to_dict() for d in diags], stream, indent=2)
        stream.write("\n")
        return
    if fmt == "github":
        for d in diags:
            stream.write(render_github(d) + "\n")
        return
    colour = stream.isatty() and os.environ.get("NO_COLOR") is None
    for d in diags:
        stream.write(render_text(d, sources, colour) + "\n")
    errors = sum(1 for d in diags if d.severity == "error")
    warnings = sum(1 for d in diags if d.severity == "warning")
    if diags:
        stream.write(f"{errors} error(s), {warnings} warning(s)\n")
