"""A small scanner of C source files: the top-level function definitions of a handler file
(comments, strings and preprocessor lines ignored), for the handler check and `rubikgen stubs`.
Not a C parser: it tracks braces, which is what finding definitions needs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

_LEXEMES = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')""",
    re.S,
)
_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|\S")


def _blank(m: re.Match[str]) -> str:
    """Replaces a comment, string or directive, keeping its newlines (for line numbers)."""
    if m.lastgroup == "string":
        return '""'
    return "\n" * m.group(0).count("\n") or " "


def normalise_signature(sig: str) -> str:
    """A C declarator with whitespace normalised: one space between tokens."""
    return " ".join(_TOKEN.findall(sig))


@dataclass(frozen=True)
class FunctionDef:
    name: str
    signature: str  # normalised
    line: int
    static: bool
    body: str = field(default="", compare=False)  # comments and strings blanked


def _function_name(sig: str) -> str | None:
    """The name of a function whose declarator ends with its parameter list."""
    depth = 0
    for i in range(len(sig) - 1, -1, -1):
        if sig[i] == ")":
            depth += 1
        elif sig[i] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", sig[:i])
                return m.group(1) if m else None
    return None


def function_definitions(text: str) -> list[FunctionDef]:
    """Top-level function definitions of a C file (comments, strings and directives ignored)."""
    code = _LEXEMES.sub(_blank, text)
    code = _PREPROCESSOR.sub(_blank, code)
    defs: list[FunctionDef] = []
    depth = 0
    start = 0  # where the current top-level declaration began
    body_start = -1  # where the body of the last function found began
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                body_start = -1
                decl = code[start:i]
                sig = decl.strip()
                if re.fullmatch(r'extern\s*""', sig):  # extern "C" { ... }: look inside
                    start = i + 1
                    continue
                name = _function_name(sig) if sig.endswith(")") and "=" not in sig else None
                if name:
                    line = code.count("\n", 0, start + len(decl) - len(decl.lstrip())) + 1
                    norm = normalise_signature(sig)
                    static = "static" in _TOKEN.findall(sig.split(name, 1)[0])
                    defs.append(FunctionDef(name, norm, line, static))
                    body_start = i
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
            if depth == 0:
                if body_start >= 0:
                    defs[-1] = replace(defs[-1], body=code[body_start : i + 1])
                    body_start = -1
                start = i + 1
        elif ch == ";" and depth == 0:
            start = i + 1
    return defs


__all__ = ["FunctionDef", "function_definitions", "normalise_signature"]
