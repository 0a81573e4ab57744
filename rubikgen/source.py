"""Load YAML/TOML into plain data plus a source map from document paths to positions.

Models stay plain pydantic objects; every consumer that needs a position (diagnostics,
generated-C comments) asks the SourceMap with the path it is looking at, e.g.
("psm", "transitions", 3, "when").
"""

from __future__ import annotations

import bisect
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

import yaml

from rubikgen.diagnostics import Diagnostic

Path = tuple[str | int, ...]

MAX_NODES = 200_000  # alias expansion bomb guard
MAX_DEPTH = 64


@dataclass(frozen=True)
class Pos:
    line: int  # 1-based
    col: int  # 1-based
    # For scalars on one source line: where the text of the value starts (after a quote),
    # so an offset inside an expression maps to an exact column.
    text_col: int | None = None
    end_line: int | None = None
    end_col: int | None = None
    # Scalars: character index in the source of the first character of the value's text
    # (after an opening quote) and the quoting style, so offsets inside a value that spans
    # lines or contains escapes can be mapped back to the source (see SourceMap.expr_pos).
    index: int | None = None
    style: str | None = None


@dataclass
class SourceMap:
    file: str
    values: dict[Path, Pos] = field(default_factory=dict)
    keys: dict[Path, Pos] = field(default_factory=dict)
    text: str | None = None
    # Values the loader already reported (e.g. !!binary); schema errors there are not repeated.
    reported: set[Path] = field(default_factory=set)
    _line_starts: list[int] | None = field(default=None, repr=False)
    _aligned: dict[tuple[Path, str], list[int] | None] = field(default_factory=dict, repr=False)

    def pos(self, path: Path) -> Pos:
        """Position of the value at path, or of the nearest enclosing value."""
        p = tuple(path)
        while p:
            if p in self.values:
                return self.values[p]
            p = p[:-1]
        return self.values.get((), Pos(1, 1))

    def key_pos(self, path: Path) -> Pos:
        p = tuple(path)
        if p in self.keys:
            return self.keys[p]
        return self.pos(p)

    def line_col(self, index: int) -> tuple[int, int]:
        """1-based line and column of a character index into the source text."""
        if self._line_starts is None:
            starts = [0]
            for m in re.finditer("\n", self.text or ""):
                starts.append(m.end())
            self._line_starts = starts
        i = bisect.bisect_right(self._line_starts, index) - 1
        return i + 1, index - self._line_starts[i] + 1

    def _alignment(self, path: Path, value: str) -> list[int] | None:
        """Source index of every character of `value` (and one past its end), or None."""
        key = (tuple(path), value)
        if key not in self._aligned:
            pos = self.values.get(tuple(path))
            out = None
            if pos is not None and pos.index is not None and self.text is not None:
                out = align_scalar(self.text, pos.index, pos.style, value)
            self._aligned[key] = out
        return self._aligned[key]

    def expr_pos(self, path: Path, offset: int, value: str | None = None) -> tuple[int, int, bool]:
        """Line and column of character `offset` inside the expression string at path, and
        whether the position is exact."""
        pos = self.pos(path)
        exact_path = tuple(path) in self.values
        if value is not None and exact_path:
            idx = self._alignment(path, value)
            if idx is not None:
                offset = max(0, min(offset, len(value)))
                return (*self.line_col(idx[offset]), True)
        if pos.text_col is not None and exact_path:
            return pos.line, pos.text_col + offset, True
        return pos.line, pos.col, False

    def diag(
        self,
        code: str,
        message: str,
        path: Path,
        *,
        key: bool = False,
        severity: str = "error",
        hint: str | None = None,
        offset: tuple[int, int] | None = None,
        text: str | None = None,
    ) -> Diagnostic:
        """A diagnostic at the value (or key) at path; with `offset`, at characters
        [start, end) of the expression `text` written there."""
        if offset is not None:
            line, col, exact = self.expr_pos(path, offset[0], text)
            end: int | None = None
            if exact:
                eline, ecol, _ = self.expr_pos(path, max(offset[0], offset[1] - 1), text)
                end = ecol + 1 if eline == line else None
            return Diagnostic(code, message, self.file, line, col, severity, hint, end)
        pos = self.key_pos(path) if key else self.pos(path)
        end = pos.end_col if pos.end_line == pos.line else None
        return Diagnostic(code, message, self.file, pos.line, pos.col, severity, hint, end)


_WS = " \t\r\n"


def align_scalar(src: str, start: int, style: str | None, value: str) -> list[int] | None:
    """Map each character of a scalar's value to its index in the source.

    The value may differ from the source text by line folding (a line break and indentation
    read as one space), by quoting ('' in single quotes) and by line-continuation escapes.
    Returns None when the two cannot be aligned (e.g. other escapes); callers then fall back
    to the start of the value.
    """
    skippable = _WS
    if style in ("'", "'''"):
        skippable += "'"
    elif style in ('"', '"""'):
        skippable += "\\"
    j = start
    if style in ("|", ">"):  # block scalar: the text starts on the line after the header
        nl = src.find("\n", start)
        if nl < 0:
            return None
        j = nl + 1
    out: list[int] = []
    n = len(src)
    for k, c in enumerate(value):
        if c in " \n":
            if j >= n or src[j] not in _WS:
                # folded break in a quoted scalar may hide behind a backslash
                if not (j < n and src[j] == "\\" and style in ('"', '"""')):
                    return None
                while j < n and src[j] in "\\" + _WS:
                    j += 1
                out.append(j)
                continue
            out.append(j)
            j += 1
            nxt = value[k + 1] if k + 1 < len(value) else None
            if nxt is not None and nxt not in " \n":
                while j < n and src[j] in _WS and src[j] != nxt:
                    j += 1
            continue
        while j < n and src[j] != c:
            if src[j] not in skippable:
                return None
            j += 1
        if j >= n:
            return None
        out.append(j)
        j += 1
    out.append(j)
    return out


@dataclass
class Loaded:
    file: str
    text: str
    data: Any
    smap: SourceMap
    diags: list[Diagnostic]


class _NoDupLoader(yaml.SafeLoader):
    pass


def _mark_pos(start: yaml.Mark, end: yaml.Mark, style: str | None) -> Pos:
    text_col: int | None = None
    if start.line == end.line:
        text_col = start.column + 1 + (1 if style in ("'", '"') else 0)
    return Pos(start.line + 1, start.column + 1, text_col, end.line + 1, end.column + 1)


class _Builder:
    def __init__(self, file: str) -> None:
        self.smap = SourceMap(file)
        self.diags: list[Diagnostic] = []
        self.count = 0
        self.constructor = yaml.SafeLoader.__new__(yaml.SafeLoader)
        yaml.constructor.SafeConstructor.__init__(self.constructor)

    def build(self, node: yaml.Node, path: Path, stack: tuple[int, ...]) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooBig("document expands to too many values (alias bomb?)", node)
        if len(path) > MAX_DEPTH:
            raise _TooBig(f"document nested more than {MAX_DEPTH} levels deep", node)
        if id(node) in stack:
            raise _TooBig("recursive alias: a node contains itself", node)
        self.smap.values[path] = _mark_pos(node.start_mark, node.end_mark, getattr(node, "style", None))
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            inner = stack + (id(node),)
            # Merge keys (<<: *base) add the keys of the merged mappings that the mapping does
            # not set itself; explicit keys win, as YAML specifies (not a duplicate).
            pairs, merged = [], []
            for knode, vnode in node.value:
                if isinstance(knode, yaml.ScalarNode) and knode.tag == "tag:yaml.org,2002:merge":
                    srcs = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
                    for src in srcs:
                        if not isinstance(src, yaml.MappingNode):
                            self.diags.append(self._d("RG006", "'<<' merges mappings only", src, None))
                            continue
                        merged += src.value
                else:
                    pairs.append((knode, vnode))
            explicit = {str(k.value) for k, _ in pairs if isinstance(k, yaml.ScalarNode)}
            taken: set[str] = set()
            for knode, vnode in merged:
                kv = str(getattr(knode, "value", ""))
                if kv not in explicit and kv not in taken:
                    taken.add(kv)
                    pairs.append((knode, vnode))
            for knode, vnode in pairs:
                if not isinstance(knode, yaml.ScalarNode):
                    self.diags.append(
                        self._d("RG006", "mapping keys must be plain strings", knode, "write the key as a name")
                    )
                    continue
                # Keys are names: take the text as written (YAML 1.1 would turn `on:` into True).
                key = str(knode.value)
                kpath = path + (key,)
                if key in out:
                    first = self.smap.keys.get(kpath)
                    where = f" (first defined at line {first.line})" if first else ""
                    self.diags.append(
                        self._d("RG002", f"duplicate key '{key}'{where}", knode, "remove or rename one of them")
                    )
                    continue
                self.smap.keys[kpath] = _mark_pos(knode.start_mark, knode.end_mark, knode.style)
                out[key] = self.build(vnode, kpath, inner)
            return out
        if isinstance(node, yaml.SequenceNode):
            inner = stack + (id(node),)
            return [self.build(v, path + (i,), inner) for i, v in enumerate(node.value)]
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as e:
            self.diags.append(self._d("RG001", str(e.problem or e), node, None))
            return None
        if isinstance(value, (bytes, bytearray)):
            return None
        return value

    def _d(self, code: str, msg: str, node: yaml.Node, hint: str | None) -> Diagnostic:
        m = node.start_mark
        return Diagnostic(code, msg, self.smap.file, m.line + 1, m.column + 1, "error", hint)


class _TooBig(Exception):
    def __init__(self, msg: str, node: yaml.Node) -> None:
        super().__init__(msg)
        self.node = node


def _yaml_error(file: str, e: yaml.YAMLError) -> Diagnostic:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    msg = f"{problem}" + (f" ({context})" if context else "")
    hint = None
    if "\\t" in msg or "tab" in msg:
        hint = "YAML indentation must use spaces, not tabs"
    elif "mapping values are not allowed" in msg:
        hint = "quote values that contain ': ' (e.g. expressions)"
    elif "found character" in msg and "cannot start any token" in msg:
        hint = "quote the value (expressions starting with '!', '&', '*', '%', '@' or '`' need quotes)"
    elif isinstance(e, yaml.reader.ReaderError):
        msg = f"not a text file: {e.reason} (byte 0x{e.character:02x})" if isinstance(e.character, int) else str(e)
        hint = "specs must be UTF-8 text"
    return Diagnostic("RG001", msg, file, line, col, "error", hint)


def load_yaml(file: str, text: str) -> Loaded:
    smap = SourceMap(file)
    try:
        nodes = list(yaml.compose_all(text, Loader=_NoDupLoader))
    except yaml.YAMLError as e:
        return Loaded(file, text, None, smap, [_yaml_error(file, e)])
    except RecursionError:
        return Loaded(file, text, None, smap, [Diagnostic("RG009", "document nested too deeply", file, 1, 1)])
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        return Loaded(file, text, None, smap, [Diagnostic("RG003", "empty document", file, 1, 1, hint="start with 'protocol: NAME' or 'stack: NAME'")])
    if len(nodes) > 1:
        m = nodes[1].start_mark
        return Loaded(
            file, text, None, smap,
            [Diagnostic("RG001", "more than one YAML document in the file", file, m.line + 1, m.column + 1, hint="put each protocol or stack in its own file")],
        )
    b = _Builder(file)
    try:
        data = b.build(nodes[0], (), ())
    except _TooBig as e:
        m = e.node.start_mark
        return Loaded(file, text, None, b.smap, [Diagnostic("RG009", str(e), file, m.line + 1, m.column + 1)])
    except RecursionError:
        return Loaded(file, text, None, b.smap, [Diagnostic("RG009", "document nested too deeply", file, 1, 1)])
    return Loaded(file, text, data, b.smap, b.diags)


# --- TOML -------------------------------------------------------------------------------
# tomllib keeps no positions. We recover them from the text: table headers ([a.b], [[a.b]])
# and `key =` lines give the line of each key path; values inside inline tables map to the
# line of their enclosing key.

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEYLINE = re.compile(r"^\s*((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _split_key(k: str) -> list[str]:
    parts = re.findall(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+", k)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def _toml_positions(file: str, text: str, data: Any) -> SourceMap:
    smap = SourceMap(file)
    smap.values[()] = Pos(1, 1)
    table: list[str | int] = []
    counters: dict[tuple[str, ...], int] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(line)
        if m and not _KEYLINE.match(line):
            names = _split_key(m.group(2))
            if m.group(1) == "[[":
                key = tuple(names)
                idx = counters.get(key, -1) + 1
                counters[key] = idx
                table = [*names, idx]
            else:
                table = list(names)
            col = line.index("[") + 1
            smap.values.setdefault(tuple(table), Pos(i, col))
            smap.keys.setdefault(tuple(table), Pos(i, col))
            continue
        m = _KEYLINE.match(line)
        if m:
            path = tuple(table) + tuple(_split_key(m.group(1)))
            kcol = len(line) - len(line.lstrip()) + 1
            eq = line.index("=", m.end(1))
            rest = line[eq + 1 :]
            vcol = eq + 2 + (len(rest) - len(rest.lstrip()))
            text_col = None
            val = rest.strip()
            if val[:1] in ('"', "'") and not val.startswith(('"""', "'''")):
                text_col = vcol + 1
            smap.keys[path] = Pos(i, kcol)
            smap.values[path] = Pos(i, vcol, text_col)
    return smap


def load_toml(file: str, text: str) -> Loaded:
    smap = SourceMap(file)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+), column (\d+)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e)) or "invalid TOML"
        hint = "duplicate keys are not allowed" if "redefine" in msg.lower() or "overwrite" in msg.lower() else None
        code = "RG002" if hint else "RG008"
        return Loaded(file, text, None, smap, [Diagnostic(code, msg, file, line, col, "error", hint)])
    except RecursionError:
        return Loaded(file, text, None, smap, [Diagnostic("RG009", "document nested too deeply", file, 1, 1)])
    if not data:
        return Loaded(file, text, None, smap, [Diagnostic("RG003", "empty document", file, 1, 1, hint="start with 'protocol = \"NAME\"' or 'stack = \"NAME\"'")])
    return Loaded(file, text, data, _toml_positions(file, text, data), [])


def load_text(file: str, text: str) -> Loaded:
    if file.endswith(".toml"):
        return load_toml(file, text)
    return load_yaml(file, text)


def read_file(file: str) -> tuple[str | None, Diagnostic | None]:
    try:
        with open(file, "rb") as f:
            raw = f.read(8 * 1024 * 1024 + 1)
    except OSError as e:
        return None, Diagnostic("RG007", f"cannot read file: {e.strerror or e}", file, 1, 1)
    if len(raw) > 8 * 1024 * 1024:
        return None, Diagnostic("RG009", "file larger than 8 MiB", file, 1, 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        return None, Diagnostic("RG001", f"not UTF-8 text (byte 0x{raw[e.start]:02x})", file, line, col, hint="specs must be UTF-8 text")
    if "\x00" in text:
        i = text.index("\x00")
        line = text.count("\n", 0, i) + 1
        return None, Diagnostic("RG001", "not a text file (NUL byte)", file, line, 1, hint="specs must be UTF-8 text")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, None
