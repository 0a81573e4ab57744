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

from rubikgen.front.diagnostics import Diagnostic

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
                return None
            out.append(j)
            j += 1
            nxt = value[k + 1] if k + 1 < len(value) else None
            if nxt is not None and nxt not in " \n":
                while j < n and src[j] in _WS and src[j] != nxt:
                    j += 1
            continue
        if style in ('"', '"""') and j + 1 < n and src[j] == "\\" and src[j + 1] not in "\r\n":
            # an escape sequence (\t, \x41, \u00e9...) is one character of the value
            out.append(j)
            j += {"x": 4, "u": 6, "U": 10}.get(src[j + 1], 2)
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


def _mark_pos(start: yaml.Mark, end: yaml.Mark, style: str | None, scalar: bool = False) -> Pos:
    text_col: int | None = None
    quoted = 1 if style in ("'", '"') else 0
    if start.line == end.line:
        text_col = start.column + 1 + quoted
    index = start.index + quoted if scalar else None
    return Pos(
        start.line + 1,
        start.column + 1,
        text_col,
        end.line + 1,
        end.column + 1,
        index,
        style if scalar else None,
    )


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
        self.smap.values[path] = _mark_pos(
            node.start_mark,
            node.end_mark,
            getattr(node, "style", None),
            isinstance(node, yaml.ScalarNode),
        )
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
                            self.diags.append(
                                self._d("RG006", "'<<' merges mappings only", src, None)
                            )
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
                        self._d(
                            "RG006",
                            "mapping keys must be plain strings",
                            knode,
                            "write the key as a name",
                        )
                    )
                    continue
                # Keys are names: take the text as written (YAML 1.1 would turn `on:` into True).
                key = str(knode.value)
                kpath = path + (key,)
                if key in out:
                    first = self.smap.keys.get(kpath)
                    where = f" (first defined at line {first.line})" if first else ""
                    self.diags.append(
                        self._d(
                            "RG002",
                            f"duplicate key '{key}'{where}",
                            knode,
                            "remove or rename one of them",
                        )
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
            problem = str(e.problem or e)
            if "could not determine a constructor for the tag" in problem:
                tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
                if not tag.startswith("!!") and isinstance(node, yaml.ScalarNode):
                    # `when: !header.syn` reads as tag '!header.syn': an expression, not a tag
                    self.diags.append(self._bang(node))
                    self.smap.reported.add(path)
                    return None
                self.diags.append(
                    self._d(
                        "RG001",
                        f"unknown YAML tag '{tag}'",
                        node,
                        "remove the tag; rubikgen specs use plain YAML values",
                    )
                )
            else:
                self.diags.append(self._d("RG001", problem, node, None))
            self.smap.reported.add(path)
            return None
        except (
            ValueError,
            OverflowError,
        ) as e:  # e.g. a !!float or !!timestamp that does not parse
            self.diags.append(self._d("RG006", f"invalid value: {e}", node, None))
            self.smap.reported.add(path)
            return None
        if (
            isinstance(node, yaml.ScalarNode)
            and node.style is None
            and (self.smap.text or "")[node.start_mark.index : node.start_mark.index + 1] == "!"
            and str(node.tag) == "tag:yaml.org,2002:str"
        ):
            # `when: ! x` is YAML's non-specific tag: the '!' would silently vanish
            self.diags.append(self._bang(node))
            self.smap.reported.add(path)
            return None
        if isinstance(value, (bytes, bytearray)):
            self.diags.append(
                self._d(
                    "RG006",
                    "binary values (!!binary) are not supported",
                    node,
                    "write the value as a number or a string",
                )
            )
            self.smap.reported.add(path)
            return None
        return value

    def _bang(self, node: yaml.Node) -> Diagnostic:
        m = node.start_mark
        lines = (self.smap.text or "").splitlines()
        line = lines[m.line] if m.line < len(lines) else ""
        return Diagnostic(
            "RG001",
            _must_quote("!"),
            self.smap.file,
            m.line + 1,
            m.column + 1,
            "error",
            quote_hint(line, m.column),
        )

    def _d(self, code: str, msg: str, node: yaml.Node, hint: str | None) -> Diagnostic:
        m, e = node.start_mark, node.end_mark
        end = e.column + 1 if e.line == m.line and e.column > m.column else None
        return Diagnostic(code, msg, self.smap.file, m.line + 1, m.column + 1, "error", hint, end)


class _TooBig(Exception):
    def __init__(self, msg: str, node: yaml.Node) -> None:
        super().__init__(msg)
        self.node = node


def _value_text(line: str, col: int) -> str:
    """The unquoted value starting at column col (0-based) of a source line: up to a comment,
    or in flow style up to the ',', '}' or ']' that ends it (brackets of slices and parentheses
    nest)."""
    depth = 0
    out = []
    for i in range(col, len(line)):
        ch = line[i]
        if ch == "#" and i > col and line[i - 1] in " \t":
            break
        if ch in "([":
            depth += 1
        elif ch in ")]" and depth > 0:
            depth -= 1
        elif ch in ",}]" and depth == 0:
            break
        out.append(ch)
    return "".join(out).strip()


def quote_hint(line: str, col: int) -> str:
    """Tell the user to quote the whole expression at column col, written out."""
    value = _value_text(line, col)
    key = re.search(r"([A-Za-z_][\w-]*)\s*:\s*$", line[:col])
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (
        f"quote the whole expression: {key.group(1) + ': ' if key else ''}{quoted}"
        " ('!', '&' and '*' at the start of a YAML value begin a tag, an anchor or an alias)"
    )


_SCANNING = ("while scanning a tag", "while scanning an anchor", "while scanning an alias")


def _must_quote(c: str) -> str:
    kind = {"!": "a tag", "&": "an anchor", "*": "an alias"}.get(c, "a tag")
    return f"an expression starting with '{c}' must be quoted: YAML reads '{c}' as {kind}"


def _yaml_error(file: str, text: str, e: yaml.YAMLError) -> Diagnostic:
    pmark = getattr(e, "problem_mark", None)
    cmark = getattr(e, "context_mark", None)
    mark = pmark or cmark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    msg = f"{problem}" + (f" ({context})" if context else "")
    hint = None
    at_end = "<stream end>" in problem or "end of stream" in problem
    opener = None
    if cmark is not None and context:
        opener = {
            "while parsing a flow sequence": "[",
            "while parsing a flow mapping": "{",
            "while scanning a quoted scalar": "quote",
        }.get(context)
    src_line = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
    if context in _SCANNING and cmark is not None:
        # `{when: !a && b}`: the expression is read as a tag or an anchor; point at its start
        lines = text.splitlines()
        cline = lines[cmark.line] if cmark.line < len(lines) else ""
        start = cmark.column
        # an anchor after a tag (`!a && b`): the expression starts at the first of them
        while True:
            m = re.search(r"([^\s,\[\]{}:]+)\s+$", cline[:start])
            if m is None or m.group(1)[0] not in "!&*":
                break
            start = m.start(1)
        return Diagnostic(
            "RG001",
            _must_quote(cline[start : start + 1] or "!"),
            file,
            cmark.line + 1,
            start + 1,
            "error",
            quote_hint(cline, start),
        )
    if isinstance(e, yaml.reader.ReaderError):
        msg = (
            f"not a text file: {e.reason} (byte 0x{e.character:02x})"
            if isinstance(e.character, int)
            else str(e)
        )
        hint = "specs must be UTF-8 text"
    elif "'\\t'" in problem or "\t" in problem:
        msg = "tab character in YAML indentation or between tokens"
        hint = "YAML indentation must use spaces, not tabs"
    elif opener is not None and cmark is not None:
        where = f"line {cmark.line + 1}, column {cmark.column + 1}"
        what = "quoted string" if opener == "quote" else f"'{opener}'"
        if at_end:
            # Report the bracket or quote that is never closed, not the end of the file.
            line, col = cmark.line + 1, cmark.column + 1
            msg = f"unclosed {what}: the file ends before it is closed"
            hint = (
                "add the closing quote"
                if opener == "quote"
                else f"add '{']' if opener == '[' else '}'}' to close it"
            )
        else:
            closer = "]" if opener == "[" else "}"
            found = (
                problem.split("but got", 1)[-1].strip()
                if "but got" in problem
                else "something else"
            )
            found = {"'<scalar>'": "a value", "'<block mapping start>'": "a new line of keys"}.get(
                found, found
            )
            msg = f"expected ',' or '{closer}' in the {what} opened at {where}, found {found}"
            hint = f"close the {what} with '{closer}', or separate items with ','"
    elif "mapping values are not allowed" in problem:
        before = src_line[: col - 1]
        if re.fullmatch(r"\s*(- )?[A-Za-z0-9_.\-]+", before) and line > 1:
            msg = "unexpected ':' (a key where none is allowed)"
            hint = "check the indentation: this line is indented more than the keys above it"
        else:
            msg = "':' followed by a space inside an unquoted value"
            hint = "quote values that contain ': ' (e.g. expressions)"
    elif "found character" in problem and "cannot start any token" in problem:
        hint = (
            "quote the value (expressions starting with '!', '&', '*', '%', '@' or '`' need quotes)"
        )
    elif "expected <block end>" in problem and cmark is not None:
        where = f"line {cmark.line + 1}, column {cmark.column + 1}"
        if "<block mapping start>" in problem or "<block sequence start>" in problem:
            msg = "bad indentation: this line does not line up with the lines before it"
            kind = "mapping" if "mapping" in (context or "") else "list"
            hint = f"items of one {kind} start in the same column (the {kind} at {where} starts in column {cmark.column + 1})"
        else:
            msg = "unexpected text after a value"
            hint = "quote the whole value if it contains spaces and quotes"
    elif "found undefined alias" in problem:
        msg = f"alias '*{problem.rsplit(' ', 1)[-1].strip(chr(39))}' refers to no anchor"
        hint = "define the anchor (&name) before using the alias (*name)"
    return Diagnostic("RG001", msg, file, line, col, "error", hint)


def _precheck(file: str, text: str) -> Diagnostic | None:
    """See _precheck_with. LibYAML, when present, screens the document quickly; the pure
    Python parser then reports any problem with exact positions."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            if _precheck_with(file, text, fast) is None:
                return None
        except yaml.YAMLError:
            pass  # reported by the pure Python parser below, with its messages
    return _precheck_with(file, text, _NoDupLoader)


def _precheck_with(file: str, text: str, loader: Any) -> Diagnostic | None:
    """Bounds the document before it is composed: nesting depth, alias recursion and the
    number of values aliases expand to (billion laughs), each reported at the offending
    token. Runs on parser events, which need no recursion."""
    frames: list[list[Any]] = []  # [anchor, expanded size]
    sizes: dict[str, int] = {}
    total = 0

    def diag(msg: str, ev: yaml.Event, hint: str | None = None) -> Diagnostic:
        m, e = ev.start_mark, ev.end_mark
        assert m is not None and e is not None  # the parser marks every event
        end = e.column + 1 if e.line == m.line and e.column > m.column else None
        return Diagnostic("RG009", msg, file, m.line + 1, m.column + 1, "error", hint, end)

    for ev in yaml.parse(text, Loader=loader):
        if isinstance(ev, yaml.AliasEvent):
            a = ev.anchor
            assert a is not None  # an alias names its anchor
            if any(f[0] == a for f in frames):
                return diag(
                    f"recursive alias: '*{a}' is used inside the node it names",
                    ev,
                    "an alias must not refer to a mapping or list that contains it",
                )
            n = sizes.get(a, 1)
            total += n
            if frames:
                frames[-1][1] += n
            if total > MAX_NODES:
                return diag(
                    f"alias '*{a}' expands to {n} values; with it the document holds more than "
                    f"{MAX_NODES} (alias bomb?)",
                    ev,
                    "write the document without nested aliases",
                )
        elif isinstance(ev, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            total += 1
            if frames:
                frames[-1][1] += 1
            if total > MAX_NODES:
                return diag(f"document has more than {MAX_NODES} values", ev)
            if isinstance(ev, yaml.ScalarEvent):
                if ev.anchor:
                    sizes[ev.anchor] = 1
            else:
                frames.append([ev.anchor, 1])
                if len(frames) > MAX_DEPTH:
                    return diag(
                        f"document nested more than {MAX_DEPTH} levels deep",
                        ev,
                        "specs are shallow; check for runaway brackets or indentation",
                    )
        elif isinstance(ev, yaml.CollectionEndEvent) and frames:
            anchor, n = frames.pop()
            if anchor:
                sizes[anchor] = n
            if frames:
                frames[-1][1] += n - 1  # the start event already counted one
    return None


def _failed(smap: SourceMap, text: str, diag: Diagnostic) -> Loaded:
    """A document that could not be loaded: no data, one diagnostic."""
    return Loaded(smap.file, text, None, smap, [diag])


def _too_deep(file: str) -> Diagnostic:
    return Diagnostic("RG009", "document nested too deeply", file, 1, 1)


def _empty(file: str, example: str) -> Diagnostic:
    return Diagnostic("RG003", "empty document", file, 1, 1, hint=f"start with {example}")


def load_yaml(file: str, text: str) -> Loaded:
    smap = SourceMap(file, text=text)
    try:
        pre = _precheck(file, text)
        if pre is not None:
            return _failed(smap, text, pre)
        nodes = list(yaml.compose_all(text, Loader=_NoDupLoader))
    except yaml.YAMLError as e:
        return _failed(smap, text, _yaml_error(file, text, e))
    except RecursionError:
        return _failed(smap, text, _too_deep(file))
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        return _failed(smap, text, _empty(file, "'protocol: NAME' or 'stack: NAME'"))
    if len(nodes) > 1:
        m = nodes[1].start_mark
        msg = "more than one YAML document in the file"
        hint = "put each protocol or stack in its own file"
        return _failed(
            smap, text, Diagnostic("RG001", msg, file, m.line + 1, m.column + 1, hint=hint)
        )
    b = _Builder(file)
    b.smap.text = text
    try:
        data = b.build(nodes[0], (), ())
    except _TooBig as e:
        m = e.node.start_mark
        return _failed(b.smap, text, Diagnostic("RG009", str(e), file, m.line + 1, m.column + 1))
    except RecursionError:
        return _failed(b.smap, text, _too_deep(file))
    return Loaded(file, text, data, b.smap, b.diags)


# --- TOML -------------------------------------------------------------------------------
# tomllib keeps no positions. Once tomllib has accepted a document, a small scanner walks the
# same text and records where every key and value is: table headers ([a.b], [[a.b]]), dotted
# keys, values inside arrays and inline tables, and the text of strings (for columns inside
# expressions).

_BARE = re.compile(r"[A-Za-z0-9_\-]+")
_TOML_SCALAR = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+\-]\d{2}:\d{2})?"
    r"|[A-Za-z0-9_:.+\-]+"
)
_TOML_KEYLINE = re.compile(
    r"\s*((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)
_ML_QUOTES = ('"' * 3, "'" * 3)


class _TomlStop(Exception):
    pass


class _TomlScan:
    def __init__(self, text: str, smap: SourceMap) -> None:
        self.s = text
        self.i = 0
        self.n = len(text)
        self.smap = smap
        self.table: tuple[str | int, ...] = ()
        self.aot: dict[tuple[str | int, ...], int] = {}

    def pos(self, start: int, end: int, index: int | None = None, style: str | None = None) -> Pos:
        line, col = self.smap.line_col(start)
        eline, ecol = self.smap.line_col(end)
        text_col = None
        if index is not None and eline == line:
            text_col = self.smap.line_col(index)[1]
        return Pos(line, col, text_col, eline, ecol, index, style)

    def peek(self) -> str:
        return self.s[self.i] if self.i < self.n else ""

    def ws(self) -> None:
        while self.i < self.n and self.s[self.i] in " \t":
            self.i += 1

    def ws_nl(self) -> None:
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                nl = self.s.find("\n", self.i)
                self.i = self.n if nl < 0 else nl + 1
            else:
                break

    def run(self) -> None:
        while True:
            self.ws_nl()
            if self.i >= self.n:
                return
            if self.peek() == "[":
                self.header()
            else:
                self.keyval(self.table)
            self.ws()
            if self.peek() == "#":
                nl = self.s.find("\n", self.i)
                self.i = self.n if nl < 0 else nl
            if self.peek() not in ("\n", "\r", ""):
                raise _TomlStop

    def key(self) -> list[tuple[str, int, int]]:
        parts: list[tuple[str, int, int]] = []
        while True:
            self.ws()
            st = self.i
            c = self.peek()
            if c == '"':
                j = st + 1
                while j < self.n and self.s[j] != '"':
                    j += 2 if self.s[j] == "\\" else 1
                name, self.i = self.s[st + 1 : j], j + 1
            elif c == "'":
                j = self.s.find("'", st + 1)
                if j < 0:
                    raise _TomlStop
                name, self.i = self.s[st + 1 : j], j + 1
            else:
                m = _BARE.match(self.s, st)
                if not m:
                    raise _TomlStop
                name, self.i = m.group(), m.end()
            parts.append((name, st, self.i))
            self.ws()
            if self.peek() == ".":
                self.i += 1
                continue
            return parts

    def header(self) -> None:
        hstart = self.i
        aot = self.s.startswith("[[", self.i)
        self.i += 2 if aot else 1
        parts = self.key()
        self.ws()
        close = "]]" if aot else "]"
        if not self.s.startswith(close, self.i):
            raise _TomlStop
        self.i += len(close)
        hpos = self.pos(hstart, self.i)
        resolved: list[str | int] = []
        for k, (name, st, en) in enumerate(parts):
            resolved.append(name)
            t = tuple(resolved)
            kpos = self.pos(st, en)
            self.smap.keys.setdefault(t, kpos)
            self.smap.values.setdefault(t, hpos)
            if k == len(parts) - 1 and aot:
                idx = self.aot.get(t, -1) + 1
                self.aot[t] = idx
                resolved.append(idx)
                self.smap.keys[tuple(resolved)] = kpos
                self.smap.values[tuple(resolved)] = hpos
            elif t in self.aot:
                resolved.append(self.aot[t])
        self.table = tuple(resolved)

    def keyval(self, base: tuple[str | int, ...]) -> None:
        parts = self.key()
        path = base
        for k, (name, st, en) in enumerate(parts):
            path = path + (name,)
            self.smap.keys.setdefault(path, self.pos(st, en))
            if k < len(parts) - 1:  # an implicit table made by a dotted key
                self.smap.values.setdefault(path, self.pos(st, en))
        self.ws()
        if self.peek() != "=":
            raise _TomlStop
        self.i += 1
        self.ws()
        self.value(path)

    def value(self, path: tuple[str | int, ...]) -> None:
        s, st = self.s, self.i
        c = self.peek()
        q = s[st : st + 3]
        if q in _ML_QUOTES:
            content = st + 3
            if s.startswith("\r\n", content):
                content += 2
            elif s.startswith("\n", content):
                content += 1
            j = content
            while j < self.n and not s.startswith(q, j):
                j += 2 if (q[0] == '"' and s[j] == "\\") else 1
            end = j + 3
            while end < self.n and s[end] == q[0] and end - j < 5:
                end += 1
            self.i = end
            self.smap.values[path] = self.pos(st, end, content, q)
        elif c == '"':
            j = st + 1
            while j < self.n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            self.i = j + 1
            self.smap.values[path] = self.pos(st, self.i, st + 1, '"')
        elif c == "'":
            j = s.find("'", st + 1)
            if j < 0:
                raise _TomlStop
            self.i = j + 1
            self.smap.values[path] = self.pos(st, self.i, st + 1, "'")
        elif c in ("[", "{"):
            close = "]" if c == "[" else "}"
            self.i += 1
            k = 0
            while True:
                self.ws_nl()
                if self.peek() == close:
                    self.i += 1
                    break
                if c == "[":
                    self.value(path + (k,))
                    k += 1
                else:
                    self.keyval(path)
                self.ws_nl()
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() == close:
                    self.i += 1
                    break
                else:
                    raise _TomlStop
            self.smap.values[path] = self.pos(st, self.i)
        else:
            m = _TOML_SCALAR.match(s, st)
            if not m:
                raise _TomlStop
            self.i = m.end()
            self.smap.values[path] = self.pos(st, self.i, st, None)


def _toml_positions(file: str, text: str) -> tuple[SourceMap, _TomlScan]:
    smap = SourceMap(file, text=text)
    smap.values[()] = Pos(1, 1)
    scan = _TomlScan(text, smap)
    try:
        scan.run()
    except (_TomlStop, IndexError, ValueError, RecursionError):
        pass  # positions found so far are kept; the rest fall back to enclosing values
    return smap, scan


def _split_key(k: str) -> list[str]:
    parts = re.findall(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+", k)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def _toml_error(file: str, text: str, e: tomllib.TOMLDecodeError) -> Diagnostic:
    raw = str(e)
    m = re.search(r"\(at line (\d+), column (\d+)\)", raw)
    lines = text.splitlines()
    if m:
        line, col = int(m.group(1)), int(m.group(2))
    elif "end of document" in raw:
        line = max(1, len(lines))
        col = len(lines[-1]) + 1 if lines else 1
    else:
        line, col = 1, 1
    msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", raw) or "invalid TOML"
    if "end of document" in raw:
        msg = f"unexpected end of file: {msg[:1].lower()}{msg[1:]}"
    src_line = lines[line - 1] if 0 < line <= len(lines) else ""
    dup = re.match(r"Duplicate inline table key '([^']*)'", msg)
    if dup:
        name = dup.group(1)
        pat = rf"(?<![A-Za-z0-9_\-\"']){re.escape(name)}\s*="
        hits = [k for k in re.finditer(pat, src_line) if k.start() < col]
        if hits:
            col = hits[-1].start() + 1
        return Diagnostic(
            "RG002",
            f"duplicate key '{name}' in an inline table",
            file,
            line,
            col,
            "error",
            "remove or rename one of them",
        )
    if not (
        msg.startswith("Cannot declare")
        or msg.startswith("Cannot overwrite")
        or msg.startswith("Cannot mutate")
    ):
        hint = None
        if msg == "Illegal character '\\n'":
            msg, hint = (
                "line break inside a string",
                'close the string on its line, or use a """ multi-line string',
            )
        return Diagnostic("RG008", msg[:1].lower() + msg[1:], file, line, col, "error", hint)
    # Positions of what came before the error name the first definition of the duplicate.
    prev, scan = _toml_positions(file, "\n".join(lines[: line - 1]) + "\n")
    hm = re.match(r"\s*(\[\[?)\s*([^\]]+?)\s*\]", src_line)
    if hm and not _TOML_KEYLINE.match(src_line):
        col = hm.start(1) + 1
        names = tuple(_split_key(hm.group(2)))
        first = prev.keys.get(names)
        where = f" (first at line {first.line})" if first else ""
        return Diagnostic(
            "RG002",
            f"table [{'.'.join(names)}] is defined twice{where}",
            file,
            line,
            col,
            "error",
            "put all keys of a table under one header",
        )
    km = _TOML_KEYLINE.match(src_line)
    if km:
        col = km.start(1) + 1
        names = tuple(_split_key(km.group(1)))
        path = scan.table + names
        first = None
        for k in range(len(path), len(scan.table), -1):
            first = prev.keys.get(path[:k])
            if first:
                break
        where = f" (first defined at line {first.line})" if first else ""
        return Diagnostic(
            "RG002",
            f"duplicate key '{'.'.join(names)}'{where}",
            file,
            line,
            col,
            "error",
            "remove or rename one of them",
        )
    return Diagnostic(
        "RG002",
        f"{msg[:1].lower()}{msg[1:]}: a key is defined twice",
        file,
        line,
        col,
        "error",
        "remove or rename one of them",
    )


def load_toml(file: str, text: str) -> Loaded:
    smap = SourceMap(file, text=text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return _failed(smap, text, _toml_error(file, text, e))
    except RecursionError:
        return _failed(smap, text, _too_deep(file))
    if not data:
        return _failed(smap, text, _empty(file, "'protocol = \"NAME\"' or 'stack = \"NAME\"'"))
    smap, _ = _toml_positions(file, text)
    return Loaded(file, text, data, smap, [])


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
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None, Diagnostic("RG001", "UTF-16 text", file, 1, 1, hint="save the spec as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:  # binary data, whatever else it contains
        line = raw[:nul].count(b"\n") + 1
        line_start = raw.rfind(b"\n", 0, nul) + 1
        col = len(raw[line_start:nul].decode("utf-8", errors="replace")) + 1
        return None, Diagnostic(
            "RG001", "not a text file (NUL byte)", file, line, col, hint="specs must be UTF-8 text"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        col = len(raw[line_start : e.start].decode("utf-8", errors="replace")) + 1
        return None, Diagnostic(
            "RG001",
            f"not UTF-8 text (byte 0x{raw[e.start]:02x})",
            file,
            line,
            col,
            hint="specs must be UTF-8 text",
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, None
