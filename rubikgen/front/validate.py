"""`rubikgen validate`: which files are rubikgen documents, and each kind checked.

Every YAML/TOML file given (or found under a directory given) is read and parsed first. A file
that cannot be read or parsed (syntax, bytes that are not UTF-8, a top level that is not a
mapping) is an error: a broken document is not "not a document". A mapping is then
recognised by the rules of KINDS and checked as that kind; any other mapping is skipped (a CI
workflow, a compose file), named with `-v`, and an error with `--strict` when its folder holds
a rubikgen document of this run (docs/spec-language.md, *What validate reads, and what it
skips*).
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubikgen.front import specpath
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Loaded, load_text, read_file
from rubikgen.front.workspace import Workspace, is_rubikgen_document

#: The document kinds `validate` recognises, in the order the rules are tried, and the rule.
KINDS: tuple[tuple[str, str], ...] = (
    ("protocol", "a mapping with a top-level `protocol` key (schema/protocol.schema.json)"),
    ("stack", "a mapping with a top-level `stack` key (schema/stack.schema.json)"),
    (
        "test",
        "a spec test vector file: named *.test.yaml or *.test.yml, or a YAML mapping with "
        "top-level `test` and `cases` keys (docs/test-vectors.md)",
    ),
    ("rules", "a mapping with a top-level `rules` key (docs/rules.md)"),
    ("chain", "a YAML mapping with a top-level `chain` key (docs/nf.md)"),
)
KIND_NAMES = {k for k, _ in KINDS}
TEST_SUFFIXES = (".test.yaml", ".test.yml")


def kind_of(path: str, data: dict[Any, Any]) -> str | None:
    """The kind of a parsed document (a mapping), by the rules of KINDS; None: not rubikgen's."""
    keys = {str(k) for k in data}
    if keys & {"protocol", "stack"}:
        return "protocol" if "protocol" in keys else "stack"
    yaml_file = path.endswith((".yaml", ".yml"))  # `rubikgen test` and the driver read YAML
    if path.endswith(TEST_SUFFIXES) or (yaml_file and {"test", "cases"} <= keys):
        return "test"
    if "rules" in keys:
        return "rules"
    return "chain" if yaml_file and "chain" in keys else None


def excluded(path: str, globs: Sequence[str]) -> bool:
    """`--exclude GLOB`: fnmatch on the path relative to the working directory (a `*` also
    matches `/`), on the path as given, and on the file's name."""
    rel = os.path.normpath(os.path.relpath(path))
    cands = (rel, os.path.normpath(path), os.path.basename(path))
    return any(fnmatch.fnmatchcase(c, g.rstrip("/")) for g in globs for c in cands) or any(
        fnmatch.fnmatchcase(rel, g.rstrip("/") + "/*") for g in globs
    )


@dataclass
class Outcome:
    workspace: Workspace = field(default_factory=Workspace)
    diags: list[Diagnostic] = field(default_factory=list)
    checked: int = 0
    skipped: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # file -> kind
    failures: list[tuple[str, BaseException]] = field(default_factory=list)


_KIND_KEYS = {"protocol", "stack", "rules", "chain", "test", "cases"}


def _foreign_yaml(f: str, text: str) -> bool:
    """Valid YAML that rubikgen's stricter loader refuses but that is plainly not a rubikgen
    document: several documents (Kubernetes), tags (CloudFormation's `!Ref`), each a mapping
    with no key of a document kind."""
    import yaml

    if f.endswith(TEST_SUFFIXES) or not f.endswith((".yaml", ".yml")):
        return False
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
    except (yaml.YAMLError, RecursionError):
        return False
    return bool(nodes) and all(
        isinstance(n, yaml.MappingNode)
        and not any(isinstance(k, yaml.ScalarNode) and k.value in _KIND_KEYS for k, _ in n.value)
        for n in nodes
    )


def _parse(f: str) -> Loaded | str | None:
    """The parsed file; "foreign" for valid YAML that is no rubikgen document; None when it
    does not parse (the workspace then reports why)."""
    text, err = read_file(os.path.abspath(f))
    if text is None or err is not None:
        return None
    loaded = load_text(f, text)
    if loaded.diags or not isinstance(loaded.data, dict):
        return "foreign" if _foreign_yaml(f, text) else None
    return loaded


def check_paths(files: Sequence[str], *, on_skip: Callable[[str], None] | None = None) -> Outcome:
    """Each file recognised and checked as its kind (an exception checking one file is kept
    with it, and the others are still checked)."""
    from rubikgen.front.chain import check_chain_text
    from rubikgen.rules.front import validate_files

    out = Outcome()
    ws = out.workspace
    for f in files:
        try:
            loaded = _parse(f)
            if loaded is None:  # unreadable or unparseable: an error whatever it was meant as
                out.kinds[f] = "unparseable"
                out.checked += 1
                ws.check(f)
                continue
            kind = None if isinstance(loaded, str) else kind_of(f, loaded.data)
            if kind is None and not isinstance(loaded, str) and is_rubikgen_document(ws, f):
                kind = "protocol"  # a misspelt `protocol:`/`stack:`: the workspace says so
            if kind is None:
                ws.docs.pop(os.path.abspath(f), None)
                out.skipped.append(f)
                if on_skip is not None:
                    on_skip(f)
                continue
            assert not isinstance(loaded, str)
            out.kinds[f] = kind
            out.checked += 1
            if kind in ("protocol", "stack"):
                ws.check(f)
            elif kind == "rules":
                validate_files([f], out.diags, ws.sources)
            elif kind == "chain":
                out.diags += check_chain_text(f, loaded.text, ws.sources).diags
            else:
                out.diags += check_test_vector(ws, f, loaded)
        except Exception as e:  # never a traceback for a user: the caller reports it
            out.failures.append((f, e))
    out.diags += ws.all_diagnostics()
    return out


def strict_skips(out: Outcome) -> list[Diagnostic]:
    """--strict: a skipped file in a folder that holds a rubikgen document of this run."""
    folders = {os.path.dirname(os.path.abspath(f)) for f, k in out.kinds.items() if k in KIND_NAMES}
    return [
        Diagnostic(
            "RG003",
            "not a rubikgen document (no key of a document kind, see --list-kinds), in a folder "
            "of rubikgen documents",
            f,
            1,
            1,
            hint="--strict fails on such files: move it, or pass --exclude GLOB",
        )
        for f in out.skipped
        if os.path.dirname(os.path.abspath(f)) in folders
    ]


def check_test_vector(ws: Workspace, file: str, loaded: Loaded) -> list[Diagnostic]:
    """A spec test vector file without running it: its schema, the stack its `spec:` names
    (which must be a stack without errors; the stack's own diagnostics are reported in its
    file), the layers its expectations name, and the captures its packets read."""
    from pydantic import ValidationError

    from rubikgen.front.schema_errors import convert
    from rubikgen.spectest.model import TestFile

    ws.sources.add(file, loaded.text)
    data, smap = loaded.data, loaded.smap
    try:
        TestFile.model_validate(data)
    except ValidationError as e:
        return convert(e, data, smap, TestFile)
    diags: list[Diagnostic] = []
    base = os.path.dirname(os.path.abspath(file))
    ref = data["spec"]
    res = specpath.resolve(ref, base, specpath.STACK_ARGS)
    layers: list[str] | None = None
    if res.path is None:
        diags.append(
            smap.diag(
                "RG007",
                f"stack '{ref}' {specpath.problem(res, 'stack file')}",
                ("spec",),
                hint=specpath.hint(ref, res, "the test file", "stacks"),
            )
        )
    else:
        sdoc = ws.check(res.path)
        if sdoc.kind is not None and sdoc.kind != "stack":
            diags.append(smap.diag("RG051", f"'{ref}' is a {sdoc.kind}, not a stack", ("spec",)))
        elif any(d.severity == "error" for d in sdoc.diags) or sdoc.stack_info is None:
            diags.append(
                smap.diag("RG007", f"the stack '{ref}' has errors; see its diagnostics", ("spec",))
            )
        else:
            layers = list(sdoc.stack_info.layers)
    allowed = specpath.roots(base)
    for i, case in enumerate(data["cases"]):
        for j, pkt in enumerate(case["packets"]):
            cap = pkt.get("pcap")
            if cap is None:
                continue
            p = os.path.normpath(os.path.join(base, cap))
            real = os.path.realpath(p)
            where = ("cases", i, "packets", j, "pcap")
            if allowed is not None and not any(
                real == r or real.startswith(r + os.sep) for r in allowed
            ):
                diags.append(smap.diag("RG007", f"capture '{cap}' leaves the repository root",
                                       where, hint="the file is not read"))  # fmt: skip
            elif not os.path.isfile(p):
                diags.append(smap.diag("RG007", f"capture '{cap}' not found", where,
                                       hint=f"relative to the test file: looked for {p}"))  # fmt: skip
        if layers is not None:
            diags += _unknown_layers(case, ("cases", i, "expect"), layers, smap)
    return diags


def _unknown_layers(case: dict[str, Any], at: tuple[Any, ...], layers: list[str],
                    smap: Any) -> list[Diagnostic]:  # fmt: skip
    out: list[Diagnostic] = []
    for what in ("calls", "gaps", "streams", "flows"):
        for k, item in enumerate(case["expect"].get(what) or []):
            lay = item.get("layer")
            if lay is not None and lay not in layers:
                near = difflib.get_close_matches(lay, layers, n=1)
                hint = f"did you mean '{near[0]}'?" if near else f"the layers: {', '.join(layers)}"
                out.append(
                    smap.diag("RG052", f"unknown layer '{lay}'", (*at, what, k, "layer"), hint=hint)
                )
    return out
