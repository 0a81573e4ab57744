"""Load spec files, validate them against the models and run the semantic checks.

A Workspace caches every document by absolute path, so a stack and the protocols it uses
are each read and checked once, and diagnostics of a protocol are reported against the
protocol's own file. The checks it runs see it as a ``document.SpecLoader`` (they do not
import this module). It imports them when first needed: a broken installation (a subpackage
missing) is then reported against the file being checked (RG901), like any other problem.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
from typing import Any

from pydantic import ValidationError

from rubikgen.front import schema_errors, specpath
from rubikgen.front.diagnostics import Diagnostic, SourceCache
from rubikgen.front.document import Document, display_path
from rubikgen.front.source import Loaded, SourceMap, load_text, read_file
from rubikgen.models import Protocol, Stack

SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


class Workspace:
    def __init__(self) -> None:
        self.docs: dict[str, Document] = {}
        self.sources = SourceCache()
        self.loading: set[str] = set()  # stacks being composed (extends cycles)

    # -- loading ----------------------------------------------------------------------------
    def load(self, path: str) -> Document:
        ap = os.path.abspath(path)
        if ap in self.docs:
            return self.docs[ap]
        shown = display_path(ap)
        text, err = read_file(ap)
        if text is None:
            if err is not None:
                err.file = (
                    shown  # report against the path as displayed, like every other diagnostic
                )
            doc = Document(shown, ap, None, None, SourceMap(shown), [err] if err else [])
            self.docs[ap] = doc
            return doc
        self.sources.add(shown, text)
        loaded = load_text(shown, text)
        self.loading.add(ap)
        try:
            doc = self._model(ap, loaded)
        finally:
            self.loading.discard(ap)
        self.docs[ap] = doc
        return doc

    def _model(self, ap: str, loaded: Loaded) -> Document:
        shown = loaded.file
        diags = list(loaded.diags)
        data = loaded.data
        smap = loaded.smap
        if data is None:
            return Document(shown, ap, None, None, smap, diags)
        if not isinstance(data, dict):
            diags.append(
                smap.diag(
                    "RG003",
                    "the top level is not a mapping: every rubikgen document is one",
                    (),
                    hint="start the file with 'protocol: NAME' or 'stack: NAME' (the other "
                    "kinds: rubikgen validate --list-kinds); a file that is not rubikgen's: "
                    "rubikgen validate --exclude GLOB",
                )
            )
            return Document(shown, ap, None, None, smap, diags)
        kinds = [k for k in ("protocol", "stack") if k in data]
        if len(kinds) != 1:
            hint = "protocols start with 'protocol: NAME', stacks with 'stack: NAME'"
            where: tuple[str, ...] = ("stack",) if kinds else ()
            if not kinds:
                near: list[tuple[Any, Any]] = [
                    (k, difflib.get_close_matches(str(k), ("protocol", "stack"), n=1, cutoff=0.6))
                    for k in data
                ]
                near = [(k, m[0]) for k, m in near if m]
                if near:
                    where = (near[0][0],)
                    hint = f"did you mean '{near[0][1]}'?"
            msg = (
                "a document cannot be both a protocol and a stack"
                if kinds
                else "not a rubikgen document: no top-level 'protocol' or 'stack' key"
            )
            diags.append(smap.diag("RG003", msg, where, key=bool(where), hint=hint))
            return Document(shown, ap, None, None, smap, diags)
        kind = kinds[0]
        cls = Protocol if kind == "protocol" else Stack
        try:
            model = cls.model_validate(data)
        except ValidationError as e:
            diags += schema_errors.convert(e, data, smap, cls)
            return Document(shown, ap, kind, None, smap, diags)
        except RecursionError:
            diags.append(smap.diag("RG009", "document nested too deeply", ()))
            return Document(shown, ap, kind, None, smap, diags)
        doc = Document(shown, ap, kind, model, smap, diags, sources=[ap])
        if kind == "stack":
            from rubikgen.front.compose import compose

            compose(self, doc)
        return doc

    # -- protocols ----------------------------------------------------------------------------
    def protocol_info(self, path: str) -> Document:
        """Loads a protocol and builds its symbol tables (pass 1)."""
        from rubikgen.sema.symbols import build_symbols

        doc = self.load(path)
        if doc.kind == "protocol" and doc.model is not None and doc.info is None:
            info, ds = build_symbols(doc.model, doc.path, doc.smap)  # type: ignore[arg-type]
            doc.diags += ds
            doc.info = info
            base = os.path.dirname(doc.abspath)
            for pname, param in doc.model.params.items():  # type: ignore[union-attr]
                files = (
                    [param.protocol] if isinstance(param.protocol, str) else list(param.protocol)
                )
                # a file found nowhere keeps its relative location: check_protocol reports it
                info.param_files[pname] = [specpath.locate(f, base) for f in files]
        return doc

    def check_protocol(self, path: str) -> Document:
        from rubikgen.sema.protocol import check_protocol

        doc = self.protocol_info(path)
        if doc.checked or doc.info is None:
            doc.checked = True
            return doc
        doc.checked = True
        info = doc.info
        candidates: list[list[Any]] = []
        names: list[str] = []
        model: Protocol = doc.model  # type: ignore[assignment]
        for pname, files in info.param_files.items():
            opts = []
            raw = model.params[pname].protocol
            raw_list = [raw] if isinstance(raw, str) else raw
            for i in range(len(files)):
                ppath = ("params", pname, "protocol") + ((i,) if isinstance(raw, list) else ())
                res = specpath.resolve(raw_list[i], os.path.dirname(doc.abspath))
                if res.path is None:
                    what = specpath.problem(res, "protocol file")
                    doc.diags.append(
                        doc.smap.diag(
                            "RG007",
                            f"protocol file '{raw_list[i]}' {what}",
                            ppath,
                            hint=specpath.hint(raw_list[i], res, "this file"),
                        )
                    )
                    continue
                pdoc = self.protocol_info(res.path)
                if pdoc.kind == "stack":
                    doc.diags.append(
                        doc.smap.diag("RG051", f"'{raw_list[i]}' is a stack, not a protocol", ppath)
                    )
                    continue
                if pdoc.info is not None:
                    opts.append(pdoc.info)
            names.append(pname)
            candidates.append(opts or [None])
        # Check once per binding of the parameters; a diagnostic that only some bindings
        # produce says which.
        found: dict[tuple[str, int, int, str], tuple[Diagnostic, list[str]]] = {}
        combos = list(itertools.product(*candidates))[:16]
        for combo in combos:
            binding = {n: c for n, c in zip(names, combo, strict=True) if c is not None}
            label = ", ".join(f"{n} = {os.path.basename(c.file)}" for n, c in binding.items())
            for d in check_protocol(info, binding):
                k = (d.code, d.line, d.col, d.message)
                found.setdefault(k, (d, []))[1].append(label)
        for d, labels in found.values():
            if len(labels) < len(combos):
                d.notes.append("with " + "; ".join(labels))
            doc.diags.append(d)
        return doc

    # -- stacks --------------------------------------------------------------------------------
    def check_stack(self, path: str) -> Document:
        from rubikgen.sema.stack import check_stack

        doc = self.load(path)
        if doc.checked or doc.model is None or doc.kind != "stack":
            doc.checked = True
            return doc
        doc.checked = True
        check_stack(self, doc)
        return doc

    def check(self, path: str) -> Document:
        doc = self.load(path)
        if doc.kind == "protocol":
            return self.check_protocol(path)
        if doc.kind == "stack":
            return self.check_stack(path)
        return doc

    def all_diagnostics(self) -> list[Diagnostic]:
        out: list[Diagnostic] = []
        seen: set[tuple[str, int, int, str, str]] = set()
        for doc in self.docs.values():
            for d in doc.diags:
                # A base stack's element checked again as part of an extending stack.
                k = (d.file, d.line, d.col, d.code, d.message)
                if k not in seen:
                    seen.add(k)
                    out.append(d)
        out.sort(key=lambda d: (d.file, d.line, d.col, d.code))
        return out


_TOP_KEY = re.compile(r"""^["']?(protocol|stack)["']?[ \t]*[:=]""", re.M)


def _known_keys() -> set[str]:
    keys: set[str] = set()
    for cls in (Protocol, Stack):
        for name, f in cls.model_fields.items():
            keys.add(f.alias or name)
    return keys


def is_rubikgen_document(ws: Workspace, path: str) -> bool:
    """Whether a file is meant as a rubikgen spec, so that `validate` run on every YAML/TOML
    file of a repository (the pre-commit hook) skips CI workflows, compose files and the like.

    A spec has a top-level `protocol` or `stack` key. A mapping without one still counts when
    it has a key close to those (a misspelling) next to another key of a spec, so that
    `protocl: x` with `layouts:` is reported, not skipped. A file that does not parse counts
    when a line starts with `protocol:`/`stack:` (or `=` in TOML). Unreadable files count:
    their error is reported.
    """
    doc = ws.load(path)
    if doc.kind is not None:
        return True
    text, _ = read_file(doc.abspath)
    if text is None:
        return True  # unreadable (binary, not UTF-8, too large): report why
    data = load_text(doc.path, text).data
    if isinstance(data, dict):
        keys = [str(k) for k in data]
        near = any(
            difflib.get_close_matches(k, ("protocol", "stack"), n=1, cutoff=0.75) for k in keys
        )
        return near and bool(set(keys) & (_known_keys() - {"protocol", "stack", "doc"}))
    return bool(_TOP_KEY.search(text))


def expand_paths(paths: list[str]) -> tuple[list[str], list[Diagnostic]]:
    """Files given, plus spec files found under directories given."""
    files: list[str] = []
    diags: list[Diagnostic] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for n in sorted(names):
                    if n.endswith(SPEC_SUFFIXES):
                        files.append(os.path.join(root, n))
        elif os.path.exists(p):
            files.append(p)
        else:
            diags.append(Diagnostic("RG007", "no such file or directory", p, 1, 1))
    return files, diags
